// Hopper kernel: persistent CTAs (one per SM) walk the tile list of kernel/tile_scheduler.h. Warpgroup 0
// produces: one thread loads Q, K and V by TMA into 128-byte-swizzled shared memory, completing on mbarriers
// (a 2-stage K/V ring that runs on across tiles, so the next tile's loads overlap this tile's last GEMMs and
// epilogue). Warpgroups 1..n consume 64 query rows each: S = Q K^T and O += P V on wgmma, online softmax in
// registers, ping-pong between warpgroups, O out through shared memory and a TMA store.
#pragma once
#include <cuda_runtime.h>

#include <type_traits>

#include "barriers.h"
#include "epilogue.h"
#include "fp8_descales.h"
#include "hopper_config.h"
#include "hopper_mainloop.h"
#include "mask.h"
#include "params.h"
#include "seqlens.h"
#include "stream_tail.h"
#include "tile_scheduler.h"
#include "timeline.h"
#include "zero_words.cuh"

namespace flashcore {

// The thread's two fragment rows (g, g + 8 of its warp's 16) of tile `c`: query head, query row, whether it exists
// (row < q_len, the sequence's query rows).
__device__ __forceinline__ ThreadRows thread_rows(const KernelParams& p, const TileCoord& c, const KvRange& kv,
                                                  int q_len, int tile_row0, int lane) {
  ThreadRows rows;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int tile_row = tile_row0 + lane / 4 + 8 * r;
    if (p.pack_gqa) {  // the Q box's rows run through the group's heads
      const PackedRow packed = packed_row(p, c.head, tile_row);
      rows.head[r] = packed.head;
      rows.row[r] = packed.row;
      rows.valid[r] = tile_row < p.group * p.seqlen_q && rows.row[r] < q_len;
    } else {
      rows.head[r] = c.head;
      rows.row[r] = kv.row_first + tile_row;
      rows.valid[r] = rows.row[r] < q_len;
    }
  }
  return rows;
}

// Soft-capping (Gemma-style): s = tanh(s * softmax_scale / softcap); the host folds softcap into the softmax scale.
// tanh.approx.f32 (one MUFU.TANH): max relative error 2^-10.987, below the bf16/fp16 P that the scores become.
template <int kNTiles, int kLive = kNTiles>  // kLive: the tiles a narrow block's P V reads
__device__ __forceinline__ void softcap_scores(float (&s)[kNTiles][4], float prescale) {
#pragma unroll
  for (int nt = 0; nt < kLive; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm("tanh.approx.f32 %0, %1;" : "=f"(s[nt][e]) : "f"(s[nt][e] * prescale));
  }
}

// A KV cache's rows past a sequence's used keys (seqused_k, paged) are real memory the masked scores give P = 0,
// but 0 * NaN is NaN: a cache allocated with torch.empty, or a page's stale tail, would poison O (FA3 issues 1745,
// 2374). The first row of the tile's last V block that must read as zero, or kBlockN when none: only the block
// holding the sequence's last key. Every layout takes it (a test of seqused_k here made ptxas spill beside 3
// consumers); where TMA's zero fill lies past the keys it rewrites zeros, once per tile.
template <int kBlockN>
__device__ __forceinline__ int scrub_rows(const KvRange& kv, int k_len) {
  if (kv.n_blocks == 0) return kBlockN;
  const int first = k_len - (kv.n_begin + kv.n_blocks - 1) * kBlockN;
  return first < kBlockN ? (first > 0 ? first : 0) : kBlockN;
}

// Zeroes rows [first, kBlockN) of a V stage (whole 128-byte lines: the swizzle permutes 16-byte units inside a row,
// never across rows), shared among all consumer threads (disjoint units), then orders the generic writes before
// the wgmma reads (async proxy) and waits for every consumer: no warpgroup's P V may read the stage before.
template <typename Cfg>
__device__ __forceinline__ void scrub_v(uint8_t* v_stage, int first, int consumer_thread) {
  // 8 threads per row (one 16-byte unit each), kConsumerThreads / 8 rows at a time, every chunk of the row.
  const uint32_t unit = smem_addr(v_stage) + (consumer_thread % 8) * 16;
  for (int row = first + consumer_thread / 8; row < Cfg::kBlockN; row += Cfg::kConsumerThreads / 8) {
#pragma unroll
    for (int ch = 0; ch < Cfg::kChunks; ++ch) {
      asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(unit + (ch * Cfg::kBlockN + row) * 128), "r"(0)
                   : "memory");
    }
  }
  fence_proxy_async_shared();
  // Not bar.sync (.aligned): the loop's trip count differs between a warp's threads, and the consumer warpgroups
  // reach this from their own copies of the code (compute-sanitizer synccheck: "divergent thread(s) in block").
  named_barrier_sync_unaligned(kBarrierScrub, Cfg::kConsumerThreads);
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
// points, kernel/fp8_vt_smem.cuh), bf16 output; dense batches only.
template <int kHeadDim, int kPoint, typename Element, bool kSplit, bool kSoftcap, bool kTail = false,
          bool kLocal = false>
__global__ void __launch_bounds__(HopperTileConfig<kHeadDim, kPoint, Element::kBytes>::kThreads, 1)
    attention_forward_wgmma_kernel(const __grid_constant__ KernelParams p, const __grid_constant__ TmaParams tma) {
  using Cfg = HopperTileConfig<kHeadDim, kPoint, Element::kBytes>;
  static_assert(!kLocal || (!Cfg::kFp8 && !kTail), "left bounds are compiled for 16-bit whole tiles only");
  using Out = typename Element::Out;
  constexpr int kPOffset = Cfg::kFp8 ? 8 : 0;
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
  __syncthreads();

  if (warpgroup == 0) {
    // The paged producer walks the page table on the registers 2 consumer warpgroups leave it (kPagedProducer, 40);
    // beside 3 it has 32 and spills, so a paged cache never runs on a 3-consumer point (run_tiles.cuh make_plan).
    // FP8 takes dense batches only (validate.cu check_fp8): no paged copy.
    if (Cfg::kConsumerWGs == 2 && !Cfg::kFp8 && p.page_table != nullptr) {
      setmaxnreg_dec<Cfg::Registers::kPagedProducer>();
      grid_dependency_wait();  // the tile counter (kernel/zero_words.cuh)
      if (threadIdx.x >= 32) report_seq_values(p, threadIdx.x - 32);  // bad index values (kernel/seqlens.h)
      constexpr bool kGather = Cfg::kGatherCapable;  // small pages gathered up to hdim 128 (hopper_config.h)
      if (threadIdx.x == 0) {
        if (kGather && p.page_gather) {  // small pages (kernel/paged_gather.cuh)
          tma_producer<kHeadDim, kPoint, Element::kBytes, kSplit, true, kTail, kLocal, kGather>(
              p, tma, q_smem, k_smem, v_smem, bars, tile_slots);
        } else {
          tma_producer<kHeadDim, kPoint, Element::kBytes, kSplit, true, kTail, kLocal>(p, tma, q_smem, k_smem, v_smem,
                                                                                      bars, tile_slots);
        }
      } else if constexpr (kGather) {
        if (p.page_gather && threadIdx.x >= 32) gather_kv<Cfg>(p, k_smem, v_smem, bars, threadIdx.x - 32);
      }
    } else {
      setmaxnreg_dec<Cfg::Registers::kProducer>();
      grid_dependency_wait();  // the tile counter and the V^T flags (kernel/zero_words.cuh)
      if (!Cfg::kFp8 && threadIdx.x >= 32) report_seq_values(p, threadIdx.x - 32);  // FP8: no index arrays
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
    // n counts the tile's blocks from 0; its keys start at block kv.n_begin + n, its ring slot is block + n.
    // Blocks [kv.um_begin, kv.um_end) need no mask; the rest run the masked copy of the loop (no mask code in the
    // hot one). Soft-capping comes first: a masked score must stay -inf (tanh would make it -1).
    // A narrow block's scores past its keys are -inf from its GEMM: where Cfg::kNarrowSoftmax (hdim 128) no softcap,
    // mask, max or exponential runs on them, and P V reads none of their P; elsewhere they run at the full width.
    auto live_keys = [](auto keys) { return Cfg::kNarrowSoftmax ? decltype(keys)::value : Cfg::kBlockN; };
    auto scores = [&](float (&s)[Consumer::kNTiles][4], int n, float (&alpha)[2], auto masked, auto keys) {
      constexpr int kLive = live_keys(keys) / 8;
      if constexpr (kSoftcap) softcap_scores<Consumer::kNTiles, kLive>(s, p.softcap_prescale);
      if constexpr (decltype(masked)::value) {
        mask_scores<Consumer::kNTiles, kLive, Cfg::kFp8, kLocal>(s, p, seq, mask_rows,
                                                                     (kv.n_begin + n) * Cfg::kBlockN, lane);
      }
      consumer.softmax.template update<kPOffset, kLive>(s, scale_log2, alpha);
    };
    // Q (and the tile index) are free for the producer once this thread's last S GEMM has completed.
    auto q_done = [&] { mbarrier_arrive(&bars[Slots::kQEmpty]); };
    if (n_blocks == 0) q_done();

    // This warpgroup's share of the tile's last block: when its rows see at most kNarrowN of its keys, that block's
    // GEMMs run on those keys only, and its softmax too where Cfg::kNarrowSoftmax (packed GQA rows may be any query
    // row: the last one bounds them).
    bool narrow_last = false;
    if constexpr (Cfg::kNarrowN > 0) {
      const int last_row = p.pack_gqa ? info.q_len - 1 : min(kv.row_first + consumer_wg * 64 + 63, info.q_len - 1);
      narrow_last = n_blocks > 0 &&
                    visible_key_end<kLocal>(p, seq, last_row) - (kv.n_begin + n_blocks - 1) * Cfg::kBlockN <= Cfg::kNarrowN;
    }
    using Full = std::integral_constant<int, Cfg::kBlockN>;
    using Narrow = std::integral_constant<int, (Cfg::kNarrowN > 0 ? Cfg::kNarrowN : Cfg::kBlockN)>;

    // Block 0: S = Q K^T, softmax; P(0) waits in registers for the next iteration's P V.
    uint32_t p_frag[Cfg::kPSteps][4];
    float alpha[2];  // kRescaleEarly: the factor of the last softmax, applied to O before the next P V
    auto rescale_early = [&] {
      if constexpr (Cfg::kRescaleEarly) {
        consumer.rescale_o(alpha);
        wgmma_fence();  // the P V GEMM reads the O registers just written
      }
    };
    auto first = [&](auto keys) {
      constexpr int kKeys = decltype(keys)::value;
      float acc[kKeys / 8][4];
      wait(Slots::kKFull, block);
      wgmma_fence();
      issue_begin();
      consumer.template qk_issue<kKeys>(acc, q_desc, k_desc(block));
      issue_end();
      o_arrive();
      wgmma_wait<0>();
      fence_operands(reinterpret_cast<float(&)[kKeys / 2]>(acc));
      stamp(2);
      float s[Consumer::kNTiles][4];
      Consumer::template scores_from<kKeys>(s, acc);
      release(Slots::kKEmpty, block);
      if (n_blocks == 1) q_done();
      // O is still 0: alpha needs no rescale.
      turn_begin();
      if (kv.um_begin == 0 && kv.um_end > 0) {
        scores(s, 0, alpha, std::false_type{}, keys);
      } else {
        scores(s, 0, alpha, std::true_type{}, keys);
      }
      turn_end();
      Consumer::template pack_p<live_keys(keys)>(s, p_frag);
    };
    if (n_blocks == 1 && narrow_last) {
      first(Narrow{});
    } else if (n_blocks > 0) {
      first(Full{});
    }
    stamp(3);
    // Block n: issue S(n) = Q K(n)^T and O += P(n-1) V(n-1) together; softmax(n) runs while P V is on the
    // tensor cores; K(n) is released once S(n) is done, V(n-1) once P V is; then O *= alpha(n), keep P(n).
    auto step = [&](int n, auto masked, auto keys) {
      constexpr int kKeys = decltype(keys)::value;
      auto step_stamp = [&](int at) {  // timeline builds only: one step per tile
        if (thread == 0 && n == kTlStep && consumer_wg < 2) FC_TL(k, kTlStepRole + consumer_wg, at);
      };
      if (n == 1) epi_stamp(6);
      step_stamp(0);
      float acc[kKeys / 8][4];
      wait(Slots::kKFull, block + n);
      wait(Slots::kVFull, block + n - 1);
      step_stamp(1);
      if (n == 1) epi_stamp(7);
      wgmma_fence();
      issue_begin();
      step_stamp(2);
      consumer.template qk_issue<kKeys>(acc, q_desc, k_desc(block + n));  // group: S(n)
      if (n > 1) rescale_early();                              // alpha(n-1); after block 0, O is still 0
      consumer.pv_issue(p_frag, v_desc(block + n - 1));        // group: O += P(n-1) V(n-1)
      issue_end();
      step_stamp(3);
      wgmma_wait<1>();                                         // S(n) done, P V may still run
      fence_operands(reinterpret_cast<float(&)[kKeys / 2]>(acc));
      step_stamp(4);
      float s[Consumer::kNTiles][4];
      Consumer::template scores_from<kKeys>(s, acc);
      release(Slots::kKEmpty, block + n);
      if (n == n_blocks - 1) q_done();
      turn_begin();
      scores(s, n, alpha, masked, keys);
      turn_end();
      step_stamp(5);
      wgmma_wait<0>();                                         // P V done
      consumer.fence_o();
      step_stamp(6);
      release(Slots::kVEmpty, block + n - 1);
      if constexpr (!Cfg::kRescaleEarly) consumer.rescale_o(alpha);
      Consumer::template pack_p<live_keys(keys)>(s, p_frag);
      step_stamp(7);
    };
    // A narrow last block is always masked (its keys past kNarrowN are): blocks < um_end are full. One masked and
    // one unmasked copy of the step: the unmasked run is an inner loop of its own.
    const int n_wide = narrow_last ? n_blocks - 1 : n_blocks;
    const int um_end = min(kv.um_end, n_wide);
    for (int n = 1; n < n_wide;) {
      if (n >= kv.um_begin && n < um_end) {
        for (; n < um_end; ++n) step(n, std::false_type{}, Full{});
      } else {
        step(n, std::true_type{}, Full{});
        ++n;
      }
    }
    if (narrow_last && n_blocks > 1) step(n_blocks - 1, std::true_type{}, Narrow{});
    stamp(4);
    auto last_pv = [&](auto keys) {
      wait(Slots::kVFull, block + n_blocks - 1);
      // FP8: V^T's keys past seqlen_k are zeros (TMA fills the raw blocks' rows past the tensor with them).
      const int scrub = Cfg::kFp8 ? Cfg::kBlockN : scrub_rows<Cfg::kBlockN>(kv, seq.k_len);
      if (scrub < Cfg::kBlockN) {
        scrub_v<Cfg>(v_smem + ((block + n_blocks - 1) % Cfg::kStages) * Cfg::kKVBytes, scrub,
                     consumer_wg * 128 + thread);
      }
      wgmma_fence();
      issue_begin();
      if (n_blocks > 1) rescale_early();
      consumer.template pv_issue<decltype(keys)::value>(p_frag, v_desc(block + n_blocks - 1));
      issue_end();
      wgmma_wait<0>();
      consumer.fence_o();
      release(Slots::kVEmpty, block + n_blocks - 1);
    };
    if (narrow_last) {
      last_pv(Narrow{});
    } else if (n_blocks > 0) {
      last_pv(Full{});
    }
    block += n_blocks;
    stamp(5);

    // Epilogue. The tile's coordinates are read again from its slot rather than kept live across the mainloop
    // (registers are what the hdim-256 and split instantiations run short of).
    const TileInfo again = load_tile_info(tile_slots, k, Cfg::kBlockM);
    const TileCoord c = again.coord;
    const ThreadRows rows = thread_rows(p, c, kv, again.q_len, tile_row0, lane);
    const int wg_row0 = c.m_block * Cfg::kBlockM + consumer_wg * 64;
    float inv_l[2], lse[2];
    if constexpr (Cfg::kFp8) {
      const float d = Cfg::kDescales == kDescalesEpilogue ? qk_descale(p, c) : qk_d;
      consumer.softmax.template finalize<kPOffset, Cfg::kFastFinalize>(p.softmax_scale * d, inv_l, lse);
      const float v_scale = Cfg::kDescales == kDescalesEpilogue ? descale(p.v_descale, p.v_descale_stride, p, c) : v_d;
      inv_l[0] *= v_scale;
      inv_l[1] *= v_scale;
    } else {
      consumer.softmax.finalize(p.softmax_scale, inv_l, lse);
      // Sinks join once per finished row; split and stream-K tail partials stay sink-free (the combine adds them).
      if (p.sinks != nullptr && !kSplit && !(kTail && again.tile >= p.tail_first)) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (rows.valid[r]) join_sink(__ldg(p.sinks + rows.head[r]), inv_l[r], lse[r]);
        }
      }
    }
    if (!Cfg::kFp8 && again.k_len < 0) {  // bad index data (kernel/seqlens.h): the rows and LSE are NaN
      inv_l[0] = inv_l[1] = lse[0] = lse[1] = __int_as_float(0x7fc00000);
      if (thread == 0 && consumer_wg == 0) report_tile_page(p, again.k_len);
    }
    if (Cfg::kGatherCapable && p.page_gather && thread == 0 && consumer_wg == 0 &&
        consumer.o_reg[0][0] != consumer.o_reg[0][0]) {  // a gathered bad page's NaN rows (kernel/seqlens.h)
      report_gathered_pages<Cfg::kBlockN>(p, c.batch, kv.n_begin, kv.n_blocks);
    }
    epi_stamp(0);
    o_arrive();  // a tile without blocks
    const bool skip_first_row = p.fault == kFaultSkipFirstRow && consumer_wg == 0 && warp_in_wg == 0;
    if constexpr (kSplit) {
      write_partial<kHeadDim>(p, consumer.o_reg, inv_l, lse, c.batch, c.split, rows, lane, skip_first_row);
    } else if (kTail && again.tile >= p.tail_first) {
      // A stream-K tail item (kernel/stream_tail.h): partials; combine_tail_kernel writes O after the launch.
      write_tail_partial<Cfg::kBlockM, kHeadDim>(p, consumer.o_reg, inv_l, lse, again.tile, rows, tile_row0, lane);
    } else if (p.pack_gqa || p.fault == kFaultSkipFirstRow || (Cfg::kOAliasV && n_blocks < Cfg::kConsumerWGs) ||
               (p.cu_seqlens_q != nullptr && wg_row0 + 64 > again.q_len)) {
      // Packed rows span several heads (no single TMA box); the planted skip-row fault needs per-row stores; O over
      // V stages only in the V stages of the tile's own last kConsumerWGs blocks (hopper_mainloop.h: the producer's
      // refill waits by that rule), so a tile with fewer blocks writes from registers; a box past a packed
      // sequence's end would overwrite the next sequence's rows (this is per warpgroup: each stages and stores its
      // own rows, with its own barriers).
      write_output<kHeadDim, Out>(p, consumer.o_reg, inv_l, lse, c.batch, again.q_off, rows, lane,
                                      skip_first_row);
    } else {
      // This warpgroup's 64 rows are staged in its own slot of the O buffer, or, where O overlaps V, in the V stage
      // of ring block b = block - kConsumerWGs + consumer_wg (the tile's last blocks: a different stage per
      // warpgroup). Staging waits until the slot is free: the stage's kVEmpty phase (every warpgroup's P V that read
      // it is done; no later phase can complete before kOEmpty + consumer_wg lets the producer load V into it
      // again), or this warpgroup's previous store has been read (its thread 0 waits for that before the barrier).
      uint8_t* wg_o;
      if constexpr (Cfg::kOAliasV) {
        const int b = block - Cfg::kConsumerWGs + consumer_wg;  // >= 0: the tile has kConsumerWGs blocks or more
        wait(Slots::kVEmpty, b);
        wg_o = v_smem + (b % Cfg::kStages) * Cfg::kKVBytes;
      } else {
        if (thread == 0) bulk_wait_group_read_all();  // this slot's previous store (a tile ago: done by now)
        named_barrier_sync(kBarrierEpilogueWG0 + consumer_wg, 128);
        wg_o = o_own + consumer_wg * Cfg::kOWgBytes;
      }
      epi_stamp(1);
      stage_output<Out>(smem_addr(wg_o), consumer.o_reg, inv_l, fault_bias(p), warp_in_wg * 16, lane);
      fence_proxy_async_shared();  // the TMA store (async proxy) reads what these generic stores wrote
      named_barrier_sync(kBarrierEpilogueWG0 + consumer_wg, 128);
      epi_stamp(2);
      if (thread == 0 && wg_row0 < again.q_len) {
#pragma unroll
        for (int ch = 0; ch < Cfg::kOChunks; ++ch) {  // dense: rows past seqlen_q clip, columns past head_dim_v too
          if (64 * ch < p.head_dim_v) {
            tma_store_4d(&tma.o, wg_o + ch * 64 * 128, 64 * ch, again.q_off + wg_row0, c.head,
                         q_batch_coord(p, c.batch));
          }
        }
        bulk_commit_group();
        epi_stamp(3);
        // Over V, kOEmpty (below) must follow the read; an own buffer is waited for at the next epilogue, so this
        // warpgroup's next GEMMs (which need its thread 0) do not wait for the store.
        if constexpr (Cfg::kOAliasV && !Cfg::kOLateArrive) bulk_wait_group_read_all();
        epi_stamp(4);
      }
      write_lse(p, lse, c.batch, again.q_off, rows, lane);
      epi_stamp(5);
    }
    // O over V: each warpgroup arrives on its own kOEmpty + w for each tile with blocks, staged or not (the producer
    // waits on such phases before refilling the stages). With O in its own buffer nobody waits, so nobody arrives
    // (synccheck: "missing wait").
    if (Cfg::kOAliasV && n_blocks > 0 && thread == 0) {
      o_arrive_pending = true;
      if (!Cfg::kOLateArrive) o_arrive();
    }
    stamp(6);
  }
  if (thread == 0) bulk_wait_group_all();  // the CTA's shared memory must outlive its last store's reads
}

}  // namespace flashcore
