// Hopper kernel: persistent CTAs (one per SM) walk the tile list of kernel/tile_scheduler.h. Warpgroup 0
// produces: one thread loads Q, K and V by TMA into 128-byte-swizzled shared memory, completing on mbarriers
// (a 2-stage K/V ring that runs on across tiles, so the next tile's loads overlap this tile's last GEMMs and
// epilogue). Warpgroups 1..n consume 64 query rows each: S = Q K^T and O += P V on wgmma, online softmax in
// registers, ping-pong between warpgroups, O out through shared memory and a TMA store.
#pragma once
#include <cuda_runtime.h>

#include "barriers.h"
#include "consumer_mainloop.cuh"
#include "epilogue_store.cuh"
#include "fp8_descales.h"
#include "hopper_config.h"
#include "hopper_mainloop.h"
#include "mask.h"
#include "params.h"
#include "seqlens.h"
#include "thread_rows.h"
#include "tile_scheduler.h"
#include "timeline.h"
#include "zero_words.cuh"

namespace flashcore {

// Thread 0, before any role starts: every mbarrier with its arrival count.
template <typename Cfg>
__device__ __forceinline__ void init_barriers(const KernelParams& p, uint64_t* bars) {
  using Slots = typename Cfg::Slots;
  mbarrier_init(&bars[Slots::kQFull], 1);  // the producer's arrive.expect_tx; TMA completes the bytes
  mbarrier_init(&bars[Slots::kQEmpty], Cfg::kConsumerThreads);  // each consumer thread, after its last use
  for (int w = 0; w < Cfg::kConsumerWGs; ++w) mbarrier_init(&bars[Slots::kOEmpty + w], 1);  // its storing thread
  // Small pages: the gather warps' arrivals complete K and V stages (kernel/paged_gather.cuh), not TMA's bytes.
  const int fills = Cfg::kGatherCapable && p.page_gather ? kGatherWarps : 1;  // page_gather: paged calls only
  for (int s = 0; s < Cfg::kStages; ++s) {
    mbarrier_init(&bars[Slots::kKFull + s], fills);
    mbarrier_init(&bars[Slots::kVFull + s], Cfg::kVtSmem ? kVtWarps : fills);  // kVtSmem: each transposing warp
    // One arrival per consumer warpgroup: its thread 0 arrives after the warpgroup's wgmma.wait_group,
    // when the GEMM that read the stage has completed for the whole warpgroup.
    mbarrier_init(&bars[Slots::kKEmpty + s], Cfg::kConsumerWGs);
    mbarrier_init(&bars[Slots::kVEmpty + s], Cfg::kConsumerWGs);
  }
  for (int s = 0; s < Cfg::kVRawStages; ++s) {
    mbarrier_init(&bars[Slots::kVRawFull + s], 1);  // the producer's arrive.expect_tx (or its stop arrival)
    mbarrier_init(&bars[Slots::kVRawEmpty + s], kVtWarps);
  }
  if (Cfg::kVtFused) mbarrier_init(&bars[Slots::kVtLoad], 1);  // the transposing warps' leader
  if constexpr (Cfg::kGatherCapable) {
    for (int r = 0; r < 2 * Cfg::kStages; ++r) {
      mbarrier_init(&bars[Slots::kGatherReq + r], 1);  // the producer's post
      mbarrier_init(&bars[Slots::kGatherFree + r], kGatherWarps);  // each gather warp, once it read the post
    }
  }
  mbarrier_init_fence();
}

// Warpgroup 0: thread 0 runs the TMA producer; the other warps gather small pages or transpose FP8 V where the
// point does.
template <int kHeadDim, int kPoint, typename Element, bool kSplit, bool kTail, bool kLocal>
__device__ __forceinline__ void producer_warpgroup(const KernelParams& p, const TmaParams& tma, uint8_t* q_smem,
                                                   uint8_t* k_smem, uint8_t* v_smem, uint8_t* v_raw, uint64_t* bars,
                                                   void* tile_slots) {
  using Cfg = HopperTileConfig<kHeadDim, kPoint, Element::kBytes>;
  // The paged producer walks the page table on the registers 1 or 2 consumer warpgroups leave it (kPagedProducer,
  // 40 or more); beside 3 it has 32 and spills, so a paged cache never runs on a 3-consumer point (run_tiles.cuh
  // make_plan). FP8: the hdim-128 point with V transposed in shared memory only (kRunsPages, validate.cu check_fp8).
  if (kRunsPages<Cfg> && p.page_table != nullptr) {
    setmaxnreg_dec<Cfg::Registers::kPagedProducer>();
    grid_dependency_wait();  // the tile counter (kernel/zero_words.cuh)
    if (threadIdx.x >= 32) report_seq_values(p, threadIdx.x - 32);  // bad index values (kernel/seqlens.h)
    constexpr bool kGather = Cfg::kGatherCapable;  // small pages gathered up to hdim 128 (hopper_config.h)
    if (threadIdx.x == 0) {
      if (kGather && p.page_gather) {  // small pages (kernel/paged_gather.cuh)
        tma_producer<kHeadDim, kPoint, Element::kBytes, kSplit, true, kTail, kLocal, kGather>(
            p, tma, q_smem, k_smem, v_smem, bars, tile_slots);
      } else {
        tma_producer<kHeadDim, kPoint, Element::kBytes, kSplit, true, kTail, kLocal>(p, tma, q_smem, k_smem,
                                                                   Cfg::kVtSmem ? v_raw : v_smem, bars, tile_slots);
      }
    } else if (Cfg::kVtSmem && threadIdx.x >= 32) {
      transpose_v_ring<Cfg>(v_raw, v_smem, bars, threadIdx.x / 32 - 1, threadIdx.x % 32);
    } else if constexpr (kGather) {
      if (p.page_gather && threadIdx.x >= 32) gather_kv<Cfg>(p, k_smem, v_smem, bars, threadIdx.x - 32);
    }
  } else {
    setmaxnreg_dec<Cfg::Registers::kProducer>();
    grid_dependency_wait();  // the tile counter and the V^T flags (kernel/zero_words.cuh)
    if (!Cfg::kFp8 && threadIdx.x >= 32) report_seq_values(p, threadIdx.x - 32);  // FP8: unchecked
    if (threadIdx.x == 0) {
      tma_producer<kHeadDim, kPoint, Element::kBytes, kSplit, false, kTail, kLocal>(p, tma, q_smem, k_smem,
                                                                   Cfg::kVtSmem ? v_raw : v_smem, bars, tile_slots);
    } else if (Cfg::kVtSmem && threadIdx.x >= 32) {
      // Warps 1..3 transpose V from the raw ring into the V stages (kernel/fp8_vt_smem.cuh).
      transpose_v_ring<Cfg>(v_raw, v_smem, bars, threadIdx.x / 32 - 1, threadIdx.x % 32);
    } else if (Cfg::kVtFused && threadIdx.x >= 32) {
      // Warps 1..3 write the V^T copy the producer loads (kernel/fp8_vt_fused.cuh).
      transpose_v_fused<Cfg>(p, tma, v_raw, v_raw + Cfg::kKVBytes, bars, threadIdx.x / 32 - 1, threadIdx.x % 32);
    }
  }
}

// kSplit: split-KV instantiation (tiles carry a split index; fp32 partials for the combine kernel). The non-split
// instantiation folds every split term away: measured on the H100, one kernel with a runtime split count ran
// hdim 64 prefill 5.9 % slower (445.7 vs 473.7 TFLOPS, 2832 vs 2528 SASS lines).
// kSoftcap: scores are soft-capped (tanh). A run-time branch on it inside the block loop made ptxas spill (hdim 256:
// 20 bytes), and so did a second copy of the consumer in the same kernel (hdim 128 at 176 keys: 12 bytes), so it is
// an instantiation of its own, compiled for the short default point of each head dim only (run_tiles.cuh).
// kTail: the stream-K tail's items (kernel/stream_tail.h), launched only for a plan with a tail: compiled into every
// kernel, its code moved ptxas's schedule of calls that never cut a tile (-0.3-0.6 % on causal S2K-S4K rows),
// so those run kernels without it.
// kLocal: rows may have a left bound (a window, chunks, a paged cache's left pad: kernel/mask.h has_left_bound),
// compiled for the 16-bit short default point only, as FA3 compiles Is_local. Compiled into every kernel, the
// bounds' code cost causal prefill 1.5-4 % (S1K and GQA hdim 128, S2K hdim 64) through ptxas's schedule, though no
// causal call runs it. FP8 calls take no left bound (validate.cu), nor do the stream-K tail's equal tiles.
// Element E4m3: FP8 inputs, the per-(batch, K/V head) descale factors folded into the tile's softmax scale and O's
// normalization, P offset by 2^8 (softmax.h), V read transposed (a copy in the workspace that warps 1-3 of the
// producer warpgroup write during the call, kernel/fp8_vt_fused.cuh, or transposed in shared memory at kPointVtSmem
// points, kernel/fp8_vt_smem.cuh, the only way for packed rows and caches), bf16 output; no pages.
template <int kHeadDim, int kPoint, typename Element, bool kSplit, bool kSoftcap, bool kTail = false,
          bool kLocal = false>
__global__ void __launch_bounds__(HopperTileConfig<kHeadDim, kPoint, Element::kBytes>::kThreads, 1)
    attention_forward_wgmma_kernel(const __grid_constant__ KernelParams p, const __grid_constant__ TmaParams tma) {
  using Cfg = HopperTileConfig<kHeadDim, kPoint, Element::kBytes>;
  static_assert(!kLocal || (!Cfg::kFp8 && !kTail), "left bounds are compiled for 16-bit whole tiles only");
  using Slots = typename Cfg::Slots;
  extern __shared__ uint8_t smem_raw[];
  // 128-byte-swizzled TMA tiles and wgmma atoms need 1024-byte alignment.
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + Cfg::kAlign - 1) &
                                             ~uintptr_t{Cfg::kAlign - 1});
  uint8_t* q_smem = smem;                                         // [kChunks][kBlockM][kSpan bytes]
  uint8_t* k_smem = q_smem + Cfg::kQBytes;                        // [kStages][kChunks][kBlockN][kSpan bytes]
  uint8_t* v_smem = k_smem + Cfg::kStages * Cfg::kKVBytes;        // [kStages][kChunks][kBlockN][64] (FP8: V^T)
  uint8_t* v_raw = v_smem + Cfg::kStages * Cfg::kKVBytes;         // kVtSmem: [kVRawStages] of V as K's layout;
                                                                  // kVtFused: [kVtStaging] raw, then V^T
  uint8_t* o_own = v_raw + (Cfg::kVRawStages + Cfg::kVtStaging) * Cfg::kKVBytes;  // [wg][kChunks][64][64] or over V
  auto* bars = reinterpret_cast<uint64_t*>(o_own + (Cfg::kOAliasV ? 0 : Cfg::kOBytes));
  void* tile_slots = reinterpret_cast<uint8_t*>(bars) + Cfg::kBarrierBytes;  // 2 x TileInfo (tile_scheduler.h)
  // Broadcast from lane 0 so the compiler knows the index is warp-uniform: values derived from it (this warpgroup's
  // Q descriptor, barrier ids) then live in uniform registers instead of being rebuilt per wgmma (FA3 does the same).
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);

  if (threadIdx.x == 0) {
    init_barriers<Cfg>(p, bars);
  }
  __syncthreads();

  if (warpgroup == 0) {
    producer_warpgroup<kHeadDim, kPoint, Element, kSplit, kTail, kLocal>(p, tma, q_smem, k_smem, v_smem, v_raw, bars,
                                                                         tile_slots);
    return;
  }
  setmaxnreg_inc<Cfg::Registers::kConsumer>();
  const int consumer_wg = warpgroup - 1;
  const int thread = threadIdx.x % 128;
  const int lane = thread % 32;
  const int warp_in_wg = thread / 32;
  const int tile_row0 = consumer_wg * 64 + warp_in_wg * 16;  // first of this warp's 16 rows in the tile
  const uint32_t q_wg_addr = smem_addr(q_smem) + consumer_wg * 64 * Cfg::kSpan;  // this warpgroup's 64 rows

  using Consumer = WgmmaConsumer<kHeadDim, kPoint, Element>;
  Consumer consumer;
  const SmemDesc q_desc = Consumer::q_desc(q_wg_addr);
  const SmemDesc k_desc0 = Consumer::k_desc(smem_addr(k_smem)), v_desc0 = Consumer::v_desc(smem_addr(v_smem));
  auto stage_desc = [&](const SmemDesc& d0, int b) {
    return SmemDesc{d0.lo + (b % Cfg::kStages) * (Cfg::kKVBytes >> 4), d0.hi};
  };
  auto k_desc = [&](int b) { return stage_desc(k_desc0, b); };
  auto v_desc = [&](int b) { return stage_desc(v_desc0, b); };
  auto wait = [&](int slot, int b) { mbarrier_wait(&bars[slot + b % Cfg::kStages], (b / Cfg::kStages) & 1); };
  auto release = [&](int slot, int b) {
    if (thread == 0) mbarrier_arrive(&bars[slot + b % Cfg::kStages]);
  };

  // Ping-pong ring: a warpgroup issues GEMMs only after the previous one in the ring issued its own, so one
  // warpgroup's softmax runs under the others' GEMMs. Each issue phase: bar.sync on my barrier (my 128 threads +
  // the predecessor's 128 arrivals), issue, bar.arrive on my successor's. The last warpgroup lets the first one go.
  // Every warpgroup issues the same number of times per tile, so the ring stays in step across tiles.
  const int my_barrier = kBarrierIssueWG0 + consumer_wg;
  const int next_barrier = kBarrierIssueWG0 + (consumer_wg + 1) % Cfg::kConsumerWGs;
  // Cfg::kSoftmaxRing (FP8 hdim 128): the turn passes around each block's softmax instead, so the
  // warpgroups' softmaxes never overlap and each one's GEMMs, issued as soon as their operands are in, run under
  // the other's softmax. Either way every warpgroup takes one turn per K/V block of the tile.
  auto issue_begin = [&] {
    if constexpr (Cfg::kPingPong && !Cfg::kSoftmaxRing) named_barrier_sync(my_barrier, 256);
  };
  auto issue_end = [&] {
    if constexpr (Cfg::kPingPong && !Cfg::kSoftmaxRing) named_barrier_arrive(next_barrier, 256);
  };
  auto turn_begin = [&] {
    if constexpr (Cfg::kSoftmaxRing) named_barrier_sync(my_barrier, 256);
  };
  auto turn_end = [&] {
    if constexpr (Cfg::kSoftmaxRing) named_barrier_arrive(next_barrier, 256);
  };
  if (Cfg::kPingPong && consumer_wg == Cfg::kConsumerWGs - 1) named_barrier_arrive(kBarrierIssueWG0, 256);

  int block = 0;  // K/V blocks consumed so far by this CTA (ring stage and parity, as the producer counts them)
  // O over V (kOLateArrive): thread 0's wait for the last tile's store to read its staging, and its kOEmpty arrival,
  // left for the next tile's first S issue (or its epilogue, or the end), so the warpgroup's next GEMMs do not wait
  // for the read. The producer needs the arrival only to refill this warpgroup's stage, V(0) or V(1) of that tile.
  bool o_arrive_pending = false;
  auto o_arrive = [&] {
    if (Cfg::kOAliasV && o_arrive_pending) {
      bulk_wait_group_read_all();
      mbarrier_arrive(&bars[Slots::kOEmpty + consumer_wg]);
      o_arrive_pending = false;
    }
  };
  for (int k = 0;; ++k) {
    auto stamp = [&](int at) {  // timeline builds only (kernel/timeline.h): the tile's phases
      if (thread == 0) FC_TL(k, consumer_wg, at);
    };
    auto epi_stamp = [&](int at) {  // and its epilogue's
      if (thread == 0 && consumer_wg < 2) FC_TL(k, kTlEpilogueRole + consumer_wg, at);
    };
    stamp(0);
    mbarrier_wait(&bars[Slots::kQFull], k & 1);
    const TileInfo info = load_tile_info(tile_slots, k, p.pack_gqa ? 0 : Cfg::kBlockM);
    if (info.tile < 0) {
      o_arrive();
      break;
    }
    const KvRange kv = info.kv;
    const int n_blocks = kv.n_blocks;
    stamp(1);
    if (thread == 0) FC_TL_VALUE(k, consumer_wg, 7, n_blocks);
    const SeqMask seq = seq_mask(info.q_len, info.k_len, info.coord.batch);
    const ThreadRows mask_rows = thread_rows(p, info.coord, kv, info.q_len, tile_row0, lane);  // only .row is used
    // FP8: S is in units of q_descale * k_descale of the tile's (batch, K/V head); O in units of v_descale. Where the
    // factors are read is Fp8Choice's kDescales: from the producer's slot or from global memory now, kept in two
    // registers for the epilogue; or (kDescalesEpilogue) the product now and both again in the epilogue.
    float qk_d = 1.f, v_d = 1.f;
    if constexpr (Cfg::kFp8 && Cfg::kDescales == kDescalesProducer) {
      load_descales(tile_slots, k, qk_d, v_d);
    } else if constexpr (Cfg::kFp8 && Cfg::kDescales == kDescalesTileStart) {
      qk_d = qk_descale(p, info.coord);
      v_d = descale(p.v_descale, p.v_descale_stride, p, info.coord);
    } else if constexpr (Cfg::kFp8) {
      qk_d = qk_descale(p, info.coord);  // for the scale only: the epilogue reads both again
    }
    const float scale_log2 = p.softmax_scale_log2 * qk_d;
    consumer.init();
    consumer_mainloop<kHeadDim, kPoint, Element, kSoftcap, kLocal>(
        p, consumer, info, kv, seq, mask_rows, scale_log2, n_blocks, block, bars, v_smem, q_desc, k_desc, v_desc, wait,
        release, issue_begin, issue_end, turn_begin, turn_end, o_arrive, stamp, epi_stamp, k, consumer_wg, thread,
        lane);
    block += n_blocks;
    stamp(5);
    // The epilogue: O and the LSE out (epilogue_store.cuh).
    consumer_epilogue<kHeadDim, kPoint, Element, kSplit, kTail>(p, tma, consumer, wait, o_arrive, epi_stamp,
                                                                o_arrive_pending, tile_slots, v_smem, o_own, kv, k,
                                                                block, n_blocks, qk_d, v_d, tile_row0, lane, warp_in_wg,
                                                                consumer_wg, thread);
    stamp(6);
  }
  if (thread == 0) bulk_wait_group_all();  // the CTA's shared memory must outlive its last store's reads
}

}  // namespace flashcore