// A consumer warpgroup's mainloop over one tile's K/V blocks: block 0 (S and softmax), then each block n with
// S(n) and O += P(n-1) V(n-1) issued together, then the last P V; the tile's last block may be narrow. O stays in the
// consumer's registers for the epilogue (epilogue_store.cuh). The warpgroup's barrier steps (wait, release, the
// issue and softmax turns, o_arrive) and stamps come from the kernel's consumer code as its own lambdas: as a
// struct's methods they changed the SASS of most kernels (the inliner simplifies a lambda before it inlines it).
#pragma once
#include <type_traits>

#include "barriers.h"
#include "hopper_config.h"
#include "hopper_mainloop.h"
#include "mask.h"
#include "params.h"
#include "tile_scheduler.h"
#include "timeline.h"

namespace flashcore {

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

// Zeroes rows [first, kBlockN) of a V stage (whole kSpan-byte lines: the swizzle permutes 16-byte units inside a
// row, never across rows), shared among all consumer threads (disjoint units), then orders the generic writes before
// the wgmma reads (async proxy) and waits for every consumer: no warpgroup's P V may read the stage before.
template <typename Cfg>
__device__ __forceinline__ void scrub_v(uint8_t* v_stage, int first, int consumer_thread) {
  // kUnits threads per row (one 16-byte unit each), kConsumerThreads / kUnits rows at a time, every chunk of the row.
  constexpr int kUnits = Cfg::kSpan / 16;
  const uint32_t unit = smem_addr(v_stage) + (consumer_thread % kUnits) * 16;
  for (int row = first + consumer_thread / kUnits; row < Cfg::kBlockN; row += Cfg::kConsumerThreads / kUnits) {
#pragma unroll
    for (int ch = 0; ch < Cfg::kChunks; ++ch) {
      asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(unit + (ch * Cfg::kBlockN + row) * Cfg::kSpan),
                   "r"(0) : "memory");
    }
  }
  fence_proxy_async_shared();
  // Not bar.sync (.aligned): the loop's trip count differs between a warp's threads, and the consumer warpgroups
  // reach this from their own copies of the code (compute-sanitizer synccheck: "divergent thread(s) in block").
  named_barrier_sync_unaligned(kBarrierScrub, Cfg::kConsumerThreads);
}

// scrub_v for FP8 V transposed in shared memory (kernel/fp8_vt_smem.cuh's V^T stage): keys [first, kBlockN) of every
// d row read as zero. A 16-byte unit holds keys 0-15 or 16-31 of a 32-key group (kernel/fp8_vt.cuh vt_key), so the
// units past `first` are zeroed whole and the one holding it byte by byte; the swizzle is the transposing stores'.
template <typename Cfg>
__device__ __forceinline__ void scrub_vt(uint8_t* v_stage, int first, int consumer_thread) {
  constexpr int kHeadDim = Cfg::kRowBytes;  // one byte per element
  const int u0 = first / 16, part = first % 16;
  const uint32_t base = smem_addr(v_stage);
  for (int t = consumer_thread; t < (Cfg::kBlockN / 16 - u0) * kHeadDim; t += Cfg::kConsumerThreads) {
    const int u = u0 + t / kHeadDim, row = t % kHeadDim, chunk = u / 8;
    const uint32_t addr = chunk < Cfg::kVtFull
                              ? base + (chunk * kHeadDim + row) * 128 + (((u % 8) ^ (row % 8)) << 4)
                              : base + Cfg::kVtFull * kHeadDim * 128 + row * 64 + (((u % 4) ^ ((row >> 1) % 4)) << 4);
    uint32_t w[4] = {0, 0, 0, 0};
    if (u == u0 && part != 0) {
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                   : "r"(addr));
#pragma unroll
      for (int pos = 0; pos < 16; ++pos) {
        if (vt_key(pos) >= part) w[pos / 4] &= ~(0xffu << (8 * (pos % 4)));
      }
    }
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                 : "memory");
  }
  fence_proxy_async_shared();
  named_barrier_sync_unaligned(kBarrierScrub, Cfg::kConsumerThreads);
}

// n counts the tile's blocks from 0; its keys start at block kv.n_begin + n, its ring slot is block + n.
// Blocks [kv.um_begin, kv.um_end) need no mask; the rest run the masked copy of the loop (no mask code in the
// hot one). Soft-capping comes first: a masked score must stay -inf (tanh would make it -1).
// A narrow block's scores past its keys are -inf from its GEMM: where Cfg::kNarrowSoftmax (hdim 128) no softcap,
// mask, max or exponential runs on them, and P V reads none of their P; elsewhere they run at the full width.
// block: the ring slot of the tile's block 0; the tile's blocks are consumed when this returns.
template <int kHeadDim, int kPoint, typename Element, bool kSoftcap, bool kLocal, typename Consumer, typename KDesc,
          typename VDesc, typename Wait, typename Release, typename IssueBegin, typename IssueEnd, typename TurnBegin,
          typename TurnEnd, typename OArrive, typename Stamp, typename EpiStamp>
__device__ __forceinline__ void consumer_mainloop(const KernelParams& p, Consumer& consumer, const TileInfo& info,
                                                  const KvRange& kv, const SeqMask& seq, const ThreadRows& mask_rows,
                                                  float scale_log2, int n_blocks, int block, uint64_t* bars,
                                                  uint8_t* v_smem, const SmemDesc& q_desc, KDesc& k_desc, VDesc& v_desc,
                                                  Wait& wait, Release& release, IssueBegin& issue_begin,
                                                  IssueEnd& issue_end, TurnBegin& turn_begin, TurnEnd& turn_end,
                                                  OArrive& o_arrive, Stamp& stamp, EpiStamp& epi_stamp, int k,
                                                  int consumer_wg, int thread, int lane) {
  using Cfg = HopperTileConfig<kHeadDim, kPoint, Element::kBytes>;
  using Slots = typename Cfg::Slots;
  constexpr int kPOffset = Cfg::kFp8 ? 8 : 0;
  auto live_keys = [](auto keys) { return Cfg::kNarrowSoftmax ? decltype(keys)::value : Cfg::kBlockN; };
  auto scores = [&](float (&s)[Consumer::kNTiles][4], int n, float (&alpha)[2], auto masked, auto keys) {
    constexpr int kLive = live_keys(keys) / 8;
    if constexpr (kSoftcap) softcap_scores<Consumer::kNTiles, kLive>(s, p.softcap_prescale);
    if constexpr (decltype(masked)::value) {
      mask_scores<Consumer::kNTiles, kLive, Cfg::kFp8, kLocal>(s, p, seq, mask_rows, (kv.n_begin + n) * Cfg::kBlockN,
                                                               lane);
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
                  visible_key_end<kLocal>(p, seq, last_row) - (kv.n_begin + n_blocks - 1) * Cfg::kBlockN <=
                      Cfg::kNarrowN;
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
    // FP8's keys past seqlen_k are zeros in a dense batch: TMA fills the raw blocks' rows past the tensor with them
    // (the V^T copy serves dense batches only). V transposed in shared memory from packed keys or a cache holds the
    // raw rows, which past a sequence's keys are the next sequence's or the cache's.
    const bool dense_fp8 = Cfg::kFp8 && (!Cfg::kVtSmem || (p.seqused_k == nullptr && p.cu_seqlens_k == nullptr));
    const int scrub = dense_fp8 ? Cfg::kBlockN : scrub_rows<Cfg::kBlockN>(kv, seq.k_len);
    if (scrub < Cfg::kBlockN) {
      uint8_t* stage = v_smem + ((block + n_blocks - 1) % Cfg::kStages) * Cfg::kKVBytes;
      if constexpr (Cfg::kFp8) {
        scrub_vt<Cfg>(stage, scrub, consumer_wg * 128 + thread);
      } else {
        scrub_v<Cfg>(stage, scrub, consumer_wg * 128 + thread);
      }
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
}

}  // namespace flashcore
