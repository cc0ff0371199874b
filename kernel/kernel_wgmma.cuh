// Hopper kernel (phases 2-3): TMA loads of Q, K, V into 128-byte-swizzled shared memory completing on
// mbarriers (2-stage K/V ring), S = Q K^T and O += P V on wgmma, warp-specialized with register
// reallocation: warpgroup 0 produces, warpgroups 1..2 consume 64 query rows each.
#pragma once
#include <cuda_runtime.h>

#include "barriers.h"
#include "epilogue.h"
#include "hopper_config.h"
#include "hopper_mainloop.h"
#include "mask.h"
#include "params.h"

namespace flashcore {

template <int kHeadDim, typename Element>
__global__ void __launch_bounds__(kHopperThreads, 1)
    attention_forward_wgmma_kernel(const __grid_constant__ KernelParams p, const __grid_constant__ TmaParams tma) {
  using Cfg = HopperTileConfig<kHeadDim>;
  using Slots = HopperSlots<Cfg::kStages>;
  extern __shared__ uint8_t smem_raw[];
  // 128-byte-swizzled TMA tiles and wgmma atoms need 1024-byte alignment.
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + Cfg::kAlign - 1) &
                                             ~uintptr_t{Cfg::kAlign - 1});
  uint8_t* q_smem = smem;                                         // [kChunks][kBlockM][64]
  uint8_t* k_smem = q_smem + Cfg::kQBytes;                        // [kStages][kChunks][kBlockN][64]
  uint8_t* v_smem = k_smem + Cfg::kStages * Cfg::kKVBytes;        // [kStages][kChunks][kBlockN][64]
  auto* bars = reinterpret_cast<uint64_t*>(v_smem + Cfg::kStages * Cfg::kKVBytes);

  // Longest (causal) query tiles first: they start while the grid still has short ones to fill the tail.
  const int m_block = gridDim.x - 1 - blockIdx.x;
  const int head_q = blockIdx.y;
  const int batch = blockIdx.z;
  const int warpgroup = threadIdx.x / 128;

  const int row_first = m_block * Cfg::kBlockM;
  int key_end = p.seqlen_k;
  if (p.causal) key_end = min(key_end, max(0, row_first + Cfg::kBlockM + p.diag_offset));
  const int n_blocks = (key_end + Cfg::kBlockN - 1) / Cfg::kBlockN;

  if (threadIdx.x == 0) {
    mbarrier_init(&bars[Slots::kQFull], 1);  // the producer's arrive.expect_tx; TMA completes the bytes
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbarrier_init(&bars[Slots::kKVFull + s], 1);
      mbarrier_init(&bars[Slots::kKVEmpty + s], 128 * kHopperConsumerWGs);  // every consumer thread
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      tma_producer<kHeadDim>(p, tma, q_smem, k_smem, v_smem, bars, batch, head_q, m_block, n_blocks);
    }
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    const int consumer_wg = warpgroup - 1;
    const int thread = threadIdx.x % 128;
    const int lane = thread % 32;
    const int warp_in_wg = thread / 32;
    const uint32_t q_wg_addr = smem_addr(q_smem) + consumer_wg * 64 * 128;  // this warpgroup's 64 rows
    const int row0 = row_first + consumer_wg * 64 + warp_in_wg * 16 + lane / 4;  // the thread's row g

    WgmmaConsumer<kHeadDim, Element> consumer;
    consumer.init();
    mbarrier_wait(&bars[Slots::kQFull], 0);
    for (int n_block = 0; n_block < n_blocks; ++n_block) {
      const int stage = n_block % Cfg::kStages;
      mbarrier_wait(&bars[Slots::kKVFull + stage], (n_block / Cfg::kStages) & 1);
      const int key0 = n_block * Cfg::kBlockN;
      float s[Cfg::kBlockN / 8][4];
      consumer.qk(s, q_wg_addr, smem_addr(k_smem + stage * Cfg::kKVBytes));                 // 1. S = Q K^T
      if (block_needs_mask(p, key0, Cfg::kBlockN, row_first)) mask_scores(s, p, row0, key0, lane);  // 2. mask
      float alpha[2];
      consumer.softmax.update(s, p.softmax_scale_log2, alpha);                               // 3. P, m_i, l_i
      consumer.pv(s, alpha, smem_addr(v_smem + stage * Cfg::kKVBytes));                      // 4. O = O*alpha + P V
      mbarrier_arrive(&bars[Slots::kKVEmpty + stage]);                                       // 5. release stage
    }
    float inv_l[2], lse[2];
    consumer.softmax.finalize(p.softmax_scale, inv_l, lse);
    write_output<kHeadDim, Element>(p, consumer.o_reg, inv_l, lse, batch, head_q, row0, lane,
                                    p.fault == kFaultSkipFirstRow && consumer_wg == 0 && warp_in_wg == 0);
  }
}

}  // namespace flashcore
