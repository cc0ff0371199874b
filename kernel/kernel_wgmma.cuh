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

// kSplit: split-KV instantiation (blockIdx.x = tile * num_splits + split, fp32 partials for the combine kernel).
// The non-split instantiation folds every split term away: measured on the H100, one kernel with a runtime
// split count ran hdim 64 prefill 5.9 % slower (445.7 vs 473.7 TFLOPS, 2832 vs 2528 SASS lines).
template <int kHeadDim, typename Element, bool kSplit>
__global__ void __launch_bounds__(HopperTileConfig<kHeadDim>::kThreads, 1)
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
  // Split-KV: the splits of one tile are neighbours in blockIdx.x.
  const int num_splits = kSplit ? p.num_splits : 1;
  const int split = kSplit ? static_cast<int>(blockIdx.x) % num_splits : 0;
  const int m_block = kSplit ? static_cast<int>(gridDim.x) / num_splits - 1 - static_cast<int>(blockIdx.x) / num_splits
                             : static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int head = blockIdx.y;  // query head, or (GQA packing) K/V head
  const int batch = blockIdx.z;
  const int warpgroup = threadIdx.x / 128;

  // First query row of the tile and how many query rows it spans (packed: all rows of each head in it).
  const int row_first = p.pack_gqa ? 0 : m_block * Cfg::kBlockM;
  const int row_span = p.pack_gqa ? p.seqlen_q : Cfg::kBlockM;
  int key_end = p.seqlen_k;
  if (p.causal) key_end = min(key_end, max(0, row_first + row_span + p.diag_offset));
  const int n_total = (key_end + Cfg::kBlockN - 1) / Cfg::kBlockN;
  // This CTA's K/V blocks [n_begin, n_begin + n_blocks): all of them, or its split's even share (may be none).
  const int n_begin = kSplit ? static_cast<int>(static_cast<int64_t>(split) * n_total / num_splits) : 0;
  const int n_blocks =
      kSplit ? static_cast<int>(static_cast<int64_t>(split + 1) * n_total / num_splits) - n_begin : n_total;

  if (threadIdx.x == 0) {
    mbarrier_init(&bars[Slots::kQFull], 1);  // the producer's arrive.expect_tx; TMA completes the bytes
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbarrier_init(&bars[Slots::kKFull + s], 1);
      mbarrier_init(&bars[Slots::kVFull + s], 1);
      // One arrival per consumer warpgroup: its thread 0 arrives after the warpgroup's wgmma.wait_group,
      // when the GEMM that read the stage has completed for the whole warpgroup.
      mbarrier_init(&bars[Slots::kKEmpty + s], Cfg::kConsumerWGs);
      mbarrier_init(&bars[Slots::kVEmpty + s], Cfg::kConsumerWGs);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (warpgroup == 0) {
    setmaxnreg_dec<Cfg::Registers::kProducer>();
    if (threadIdx.x == 0) {
      tma_producer<kHeadDim>(p, tma, q_smem, k_smem, v_smem, bars, batch, head, m_block, n_begin, n_blocks);
    }
  } else {
    setmaxnreg_inc<Cfg::Registers::kConsumer>();
    const int consumer_wg = warpgroup - 1;
    const int thread = threadIdx.x % 128;
    const int lane = thread % 32;
    const int warp_in_wg = thread / 32;
    const uint32_t q_wg_addr = smem_addr(q_smem) + consumer_wg * 64 * 128;  // this warpgroup's 64 rows
    ThreadRows rows;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int tile_row = consumer_wg * 64 + warp_in_wg * 16 + lane / 4 + 8 * r;  // fragment rows g, g+8
      if (p.pack_gqa) {
        rows.head[r] = head * p.group + tile_row / p.seqlen_q;
        rows.row[r] = tile_row % p.seqlen_q;
        rows.valid[r] = tile_row < p.group * p.seqlen_q;
      } else {
        rows.head[r] = head;
        rows.row[r] = row_first + tile_row;
        rows.valid[r] = rows.row[r] < p.seqlen_q;
      }
    }

    using Consumer = WgmmaConsumer<kHeadDim, Element>;
    Consumer consumer;
    consumer.init();
    auto k_addr = [&](int n) { return smem_addr(k_smem + (n % Cfg::kStages) * Cfg::kKVBytes); };
    auto v_addr = [&](int n) { return smem_addr(v_smem + (n % Cfg::kStages) * Cfg::kKVBytes); };
    auto wait = [&](int slot, int n) { mbarrier_wait(&bars[slot + n % Cfg::kStages], (n / Cfg::kStages) & 1); };
    auto release = [&](int slot, int n) {
      if (thread == 0) mbarrier_arrive(&bars[slot + n % Cfg::kStages]);
    };
    // n counts this CTA's blocks from 0 (ring stage and parity); its keys start at block n_begin + n.
    auto scores = [&](float (&s)[Consumer::kNTiles][4], int n, float (&alpha)[2]) {
      const int key0 = (n_begin + n) * Cfg::kBlockN;
      if (block_needs_mask(p, key0, Cfg::kBlockN, row_first)) mask_scores(s, p, rows, key0, lane);
      consumer.softmax.update(s, p.softmax_scale_log2, alpha);
    };

    // Ping-pong ring: a warpgroup issues GEMMs only after the previous one in the ring issued its own, so
    // one warpgroup's softmax runs under the others' GEMMs. Each issue phase: bar.sync on my barrier (my 128
    // threads + the predecessor's 128 arrivals), issue, bar.arrive on my successor's. The last warpgroup
    // lets the first one go.
    const int my_barrier = kBarrierIssueWG0 + consumer_wg;
    const int next_barrier = kBarrierIssueWG0 + (consumer_wg + 1) % Cfg::kConsumerWGs;
    auto issue_begin = [&] { named_barrier_sync(my_barrier, 256); };
    auto issue_end = [&] { named_barrier_arrive(next_barrier, 256); };
    if (consumer_wg == Cfg::kConsumerWGs - 1) named_barrier_arrive(kBarrierIssueWG0, 256);

    mbarrier_wait(&bars[Slots::kQFull], 0);
    // Block 0: S = Q K^T, softmax; P(0) waits in registers for the next iteration's P V.
    uint32_t p_frag[Cfg::kBlockN / 16][4];
    if (n_blocks > 0) {
      float s[Consumer::kNTiles][4];
      float alpha[2];
      wait(Slots::kKFull, 0);
      wgmma_fence();
      issue_begin();
      consumer.qk_issue(s, q_wg_addr, k_addr(0));
      issue_end();
      wgmma_wait<0>();
      fence_operands(reinterpret_cast<float(&)[Cfg::kBlockN / 2]>(s));
      release(Slots::kKEmpty, 0);
      scores(s, 0, alpha);  // O is still 0: alpha needs no rescale
      Consumer::pack_p(s, p_frag);
    }
    // Block n: issue S(n) = Q K(n)^T and O += P(n-1) V(n-1) together; softmax(n) runs while P V is on the
    // tensor cores; K(n) is released once S(n) is done, V(n-1) once P V is; then O *= alpha(n), keep P(n).
    for (int n_block = 1; n_block < n_blocks; ++n_block) {
      float s[Consumer::kNTiles][4];
      float alpha[2];
      wait(Slots::kKFull, n_block);
      wait(Slots::kVFull, n_block - 1);
      wgmma_fence();
      issue_begin();
      consumer.qk_issue(s, q_wg_addr, k_addr(n_block));       // group: S(n)
      consumer.pv_issue(p_frag, v_addr(n_block - 1));         // group: O += P(n-1) V(n-1)
      issue_end();
      wgmma_wait<1>();                                         // S(n) done, P V may still run
      fence_operands(reinterpret_cast<float(&)[Cfg::kBlockN / 2]>(s));
      release(Slots::kKEmpty, n_block);
      scores(s, n_block, alpha);
      wgmma_wait<0>();                                         // P V done
      consumer.fence_o();
      release(Slots::kVEmpty, n_block - 1);
      consumer.rescale_o(alpha);
      Consumer::pack_p(s, p_frag);
    }
    if (n_blocks > 0) {
      wait(Slots::kVFull, n_blocks - 1);
      wgmma_fence();
      issue_begin();
      consumer.pv_issue(p_frag, v_addr(n_blocks - 1));
      issue_end();
      wgmma_wait<0>();
      consumer.fence_o();
      release(Slots::kVEmpty, n_blocks - 1);
    }
    float inv_l[2], lse[2];
    consumer.softmax.finalize(p.softmax_scale, inv_l, lse);
    const bool skip_first_row = p.fault == kFaultSkipFirstRow && consumer_wg == 0 && warp_in_wg == 0;
    if constexpr (kSplit) {
      write_partial<kHeadDim>(p, consumer.o_reg, inv_l, lse, batch, split, rows, lane, skip_first_row);
    } else {
      write_output<kHeadDim, Element>(p, consumer.o_reg, inv_l, lse, batch, rows, lane, skip_first_row);
    }
  }
}

}  // namespace flashcore
