// Phase-1 kernel (kept as a reference and for comparisons, see fc_attention_forward_phase1): warp-specialized mma.sync FlashAttention
// forward, cp.async producer warp, double-buffered K/V, online softmax in registers, mbarrier hand-offs.
#pragma once
#include <cuda_runtime.h>

#include "../barriers.h"
#include "config.h"
#include "consumer.h"
#include "../epilogue.h"
#include "loader.h"
#include "../mask.h"
#include "../params.h"

namespace flashcore {

// Blocks per SM promised to ptxas (it caps registers at 64K / (threads * blocks)). The test-only
// -DFLASHCORE_PLANT_SPILL promises 8, a 51-register cap that makes ptxas spill: the build gate's
// selftest uses it to prove that the gate fails on spills.
template <int kHeadDim>
constexpr int launch_min_blocks() {
#ifdef FLASHCORE_PLANT_SPILL
  return 8;
#else
  return TileConfig<kHeadDim>::kMinBlocksPerSm;
#endif
}

// ---------------------------------------------------------------------------------------------
// Kernel: one CTA per (query tile, query head, batch). Warp 0 loads, warps 1..4 compute.
template <int kHeadDim, typename Element>
__global__ void __launch_bounds__(kThreads, launch_min_blocks<kHeadDim>())
    attention_forward_kernel(const __grid_constant__ KernelParams p) {
  using Cfg = TileConfig<kHeadDim>;
  using Slots = BarrierSlots<Cfg::kStages>;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* q_smem = smem;                                          // [kBlockM][kHeadDim]
  uint8_t* k_smem = q_smem + Cfg::kQTileBytes;                     // [kStages][kBlockN][kHeadDim]
  uint8_t* v_smem = k_smem + Cfg::kStages * Cfg::kKVTileBytes;     // [kStages][kBlockN][kHeadDim]
  auto* bars = reinterpret_cast<uint64_t*>(v_smem + Cfg::kStages * Cfg::kKVTileBytes);

  const int m_block = blockIdx.x;
  const int head_q = blockIdx.y;
  const int batch = blockIdx.z;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;

  // Keys this tile needs: all of them, or (causal) up to the last row's diagonal.
  const int row_first = m_block * Cfg::kBlockM;
  int key_end = p.seqlen_k;
  if (p.causal) key_end = min(key_end, max(0, row_first + Cfg::kBlockM + p.diag_offset));
  const int n_blocks = (key_end + Cfg::kBlockN - 1) / Cfg::kBlockN;

  if (threadIdx.x == 0) {
    mbarrier_init(&bars[Slots::kQFull], 32);  // one cp.async arrival per producer lane
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbarrier_init(&bars[Slots::kKVFull + s], 32);
      // Every consumer thread arrives after its own last read of the stage: with one arrival per warp
      // (lane 0 after __syncwarp) compute-sanitizer's racecheck reports WAR hazards on the next refill.
      mbarrier_init(&bars[Slots::kKVEmpty + s], kConsumerWarps * 32);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (warp < kProducerWarps) {
    producer_loop<kHeadDim, Cfg>(p, q_smem, k_smem, v_smem, bars, batch, head_q, m_block, n_blocks);
  } else {
    const int consumer_warp = warp - kProducerWarps;
    Consumer<kHeadDim, Element, Cfg> consumer;
    consumer.init();
    const uint32_t q_slab_addr = smem_addr(q_smem) + consumer_warp * kRowsPerWarp * kHeadDim * 2;
    const int row0 = row_first + consumer_warp * kRowsPerWarp + lane / 4;
    const ThreadRows rows{{head_q, head_q}, {row0, row0 + 8}, {row0 < p.seqlen_q, row0 + 8 < p.seqlen_q}};
    const SeqMask seq = seq_mask(p.seqlen_q, p.seqlen_k);  // dense batches only (the serving layouts need Hopper)
    mbarrier_wait(&bars[Slots::kQFull], 0);

    for (int n_block = 0; n_block < n_blocks; ++n_block) {
      const int stage = n_block % Cfg::kStages;
      mbarrier_wait(&bars[Slots::kKVFull + stage], (n_block / Cfg::kStages) & 1);
      const uint32_t k_addr = smem_addr(k_smem + stage * Cfg::kKVTileBytes);
      const uint32_t v_addr = smem_addr(v_smem + stage * Cfg::kKVTileBytes);
      const int key0 = n_block * Cfg::kBlockN;

      float s[Cfg::kBlockN / 8][4];
      consumer.qk(s, q_slab_addr, k_addr, lane);                                   // 1. S = Q K^T
      if (key0 + Cfg::kBlockN > unmasked_key_limit(p, seq, row_first)) mask_scores(s, p, seq, rows, key0, lane);  // 2.
      float alpha[2];
      consumer.softmax.update(s, p.softmax_scale_log2, alpha);                      // 3. P, m_i, l_i
      consumer.pv(s, alpha, v_addr, lane);                                          // 4. O = O*alpha + P V
      mbarrier_arrive(&bars[Slots::kKVEmpty + stage]);                             // 5. release stage
    }

    float inv_l[2], lse[2];
    consumer.softmax.finalize(p.softmax_scale, inv_l, lse);
    write_output<kHeadDim, Element>(p, consumer.o_reg, inv_l, lse, batch, 0, rows, lane,
                                    p.fault == kFaultSkipFirstRow && consumer_warp == 0);
  }
}

// The launch: one CTA per (query tile, query head, batch).
template <int kHeadDim, typename Element>
cudaError_t launch_mma_sync(const KernelParams& p, cudaStream_t stream) {
  using Cfg = TileConfig<kHeadDim>;
  auto kernel = attention_forward_kernel<kHeadDim, Element>;
  // Above 48 KB of dynamic shared memory a kernel must opt in (per device, so on every call: it is cheap).
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid((p.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM, p.heads_q, p.batch);
  kernel<<<grid, kThreads, Cfg::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace flashcore
