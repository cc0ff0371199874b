// The Hopper kernel's two roles: the TMA producer and the wgmma consumer warpgroups.
// Shared-memory tiles are [kChunks][rows][kSpan bytes] (64 16-bit or 128 FP8 columns; FP8 hdim 64: one 64-byte chunk),
// each chunk swizzled by TMA over its span; FP8 V arrives transposed (hopper_config.h kKVBytes).
#pragma once
#include "barriers.h"
#include "block.h"
#include "fp8_vt_fused.cuh"
#include "fp8_vt_smem.cuh"
#include "hopper_config.h"
#include "kv_block_load.h"
#include "mask.h"
#include "element.h"
#include "paged_gather.cuh"
#include "fp8_descales.h"
#include "params.h"
#include "seqlens.h"
#include "softmax.h"
#include "stream_tail.h"
#include "tile_choice.h"
#include "tile_scheduler.h"
#include "timeline.h"
#include "tma.h"
#include "wgmma.h"

namespace flashcore {

// One thread, for every tile of this CTA: K(0) first (it needs only a free stage), then Q with the tile index once
// every consumer is done with the previous tile's (kQEmpty), then V(0) (after kOEmpty + w where O is staged over V) and
// the remaining blocks K(n), V(n) through the stage ring. Hands the consumers tile index -1 when no tile is left.
// kPaged: K/V rows come from a paged cache through the page table (a copy of its own: the page walk inlined into
// the one producer made ptxas spill its 32 registers for every call). kLocal: rows may have a left bound.
// FP8 with V transposed in shared memory (Cfg::kVtSmem): V goes into the raw ring (v_smem is then that ring), with a
// word for the transposing warps beside each stage (kernel/fp8_vt_smem.cuh): they, not this thread, wait for the V
// stage and for kOEmpty, and they stop on kVtStop.
// kGather (paged, small pages): each K/V block is posted to the gather warps (kernel/paged_gather.cuh); a copy of
// its own too, since the post beside the page walk made the paged producer spill 8-20 B.
template <int kHeadDim, int kPoint, int kElemBytes, bool kSplit, bool kPaged, bool kTail, bool kLocal,
          bool kGather = false>
__device__ void tma_producer(const KernelParams& p, const TmaParams& tma, uint8_t* q_smem, uint8_t* k_smem,
                             uint8_t* v_smem, uint64_t* bars, void* tile_slots) {
  using Cfg = HopperTileConfig<kHeadDim, kPoint, kElemBytes>;
  static_assert(!kGather || Cfg::kGatherCapable, "the gather serves 1- and 2-consumer 16-bit points up to hdim 128");
  using Slots = typename Cfg::Slots;
  constexpr int kVFull = Cfg::kVtSmem ? Slots::kVRawFull : Slots::kVFull;
  constexpr int kVEmpty = Cfg::kVtSmem ? Slots::kVRawEmpty : Slots::kVEmpty;
  tma_prefetch_descriptor(&tma.q);
  tma_prefetch_descriptor(&tma.k);
  tma_prefetch_descriptor(&tma.v);
  tma_prefetch_descriptor(&tma.o);
  // Only tile, k, block and the O-over-V state live across tiles: the producer has 32 registers (setmaxnreg), so
  // everything else is recomputed per tile from the parameters.
  int block = 0;  // K/V blocks this CTA has loaded so far: ring stage block % kStages, pass block / kStages
  // O over V: 2 x the tiles with K/V blocks so far (one kOEmpty + w phase each) + 1 if the last had one block (it
  // staged no O).
  int o_state = 0;
  int tile = first_tile();
  for (int k = 0;; ++k) {
    FC_TL(k, 3, 0);
    // Tiles without query rows (past a short packed sequence's end) are skipped here: the consumers never see them.
    bool valid;
    TileCoord c;
    SeqLens seq;
    // Stream-K tail items (kernel/stream_tail.h; kTail instantiations only) run part of a tail tile's blocks; empty
    // ones are skipped too. The item is decoded again for its K/V range below rather than kept: kept across this
    // loop, it made FP8 hdim 256's 24-register producer spill more (96/100 against 80/80 bytes).
    for (;;) {
      valid = tile < p.total_tiles;
      int at = valid ? tile : 0;
      if (kTail && valid && tile >= p.tail_first) {
        const int t = tail_item(p, tile).tile;
        if (t < 0) {
          tile = next_tile(p, tile);
          continue;
        }
        at = p.tail_first + t;
      }
      c = tile_coord<kElemBytes == 2>(p, at);
      seq = seq_lens<kPaged, !Cfg::kFp8 || kPaged>(p, c.batch);
      if (!valid || tile_has_rows<Cfg::kBlockM>(p, c.m_block, seq)) break;
      tile = next_tile(p, tile);
    }
    // FP8 (kDescalesProducer): the tile's descales, loaded now; their latency hides behind the waits below.
    float qk_d = 1.f, v_d = 1.f;
    if constexpr (Cfg::kDescales == kDescalesProducer) {
      if (valid) {
        qk_d = qk_descale(p, c);
        v_d = descale(p.v_descale, p.v_descale_stride, p, c);
      }
    }
    KvRange kv = kv_range<Cfg::kBlockM, Cfg::kBlockN, kSplit, kLocal>(p, c.m_block, c.split, c.batch, seq);
    if (kTail && valid && tile >= p.tail_first) kv = tail_range(p, kv, tail_item(p, tile));
    const int n_blocks = valid ? kv.n_blocks : 0;
    const int head_kv = kv_head(p, c);
    bool vt_all = false;  // V^T copy (Cfg::kVtHeadCount): every block of this tile's head is stored
    // A lambda around load_kv_block, as the loads were written before they moved there: the SASS stays the same.
    auto load = [&](int slot_full, int slot_empty, uint8_t* ring, const CUtensorMap* map, int n, int flags = 0) {
      load_kv_block<kHeadDim, kPoint, kElemBytes, kPaged, kGather>(p, tma, bars, block, seq, kv, head_kv, vt_all,
                                                                    slot_full, slot_empty, ring, map, tile_slots, k,
                                                                    n, flags);
    };
    if (n_blocks > 0) load(Slots::kKFull, Slots::kKEmpty, k_smem, &tma.k, 0);
    FC_TL(k, 3, 1);
    if (k > 0) mbarrier_wait_sleep(&bars[Slots::kQEmpty], (k - 1) & 1);
    FC_TL(k, 3, 2);
    if constexpr (Cfg::kDescales == kDescalesProducer) store_descales(tile_slots, k, qk_d, v_d);
    store_tile_info(tile_slots, k, TileInfo{valid ? tile : -1, c, kv, seq.q_len, seq.k_len, seq.q_off});
    if (!valid) {
      mbarrier_arrive(&bars[Slots::kQFull]);  // release: the consumers see -1 and leave
      if constexpr (kGather) {  // and the gather warps, through their next request (a K one)
        gather_post<Cfg>(bars, 0, block, GatherRequest{-1, 0, 0, 0});
      }
      if constexpr (Cfg::kVtSmem) {  // and the transposing warps, through the next raw stage
        const int stage = block % Cfg::kStages;
        mbarrier_wait_sleep(&bars[kVEmpty + stage], ((block / Cfg::kStages) & 1) ^ 1);
        vt_flags_store(bars, Slots::kVtFlags + stage, kVtStop);
        mbarrier_arrive(&bars[kVFull + stage]);
      }
      break;
    }
    // Packed GQA: the tile's head is the K/V head and the Q box spans its `group` query heads x all query rows.
    const int q_rows = p.pack_gqa ? p.group * p.seqlen_q : Cfg::kBlockM;
    mbarrier_arrive_expect_tx(&bars[Slots::kQFull], q_rows * Cfg::kRowBytes);
#pragma unroll
    for (int ch = 0; ch < Cfg::kChunks; ++ch) {
      tma_load_4d<kQHint>(q_smem + ch * Cfg::kBlockM * Cfg::kSpan, &tma.q, &bars[Slots::kQFull], Cfg::kChunkCols * ch,
                          seq.q_off + (p.pack_gqa ? 0 : c.m_block * Cfg::kBlockM),
                          p.pack_gqa ? c.head * p.group : c.head, q_batch_coord(p, c.batch));
    }
    FC_TL(k, 3, 3);
    const int next = next_tile(p, tile);  // a dynamic fetch's latency hides behind the loads below
    if (n_blocks > 0) {
      // O over V: consumer warpgroup w of a tile with at least 2 blocks stages its O in the V stage of the tile's
      // block (end - kConsumerWGs + w); every tile with blocks arrives on kOEmpty + w, staged or not, once its store
      // has read the stage. V may refill a stage only after the warpgroup that staged there arrived. With 2 stages and
      // 2 warpgroups, after a tile of 2 or more blocks V(0) refills warpgroup 0's stage and V(1) warpgroup 1's, so
      // each waits for its own warpgroup only (warpgroup 0 stores first); otherwise (and when this tile has no V(1))
      // V(0) waits for all of them. The waits are for the last tile with blocks, every phase of every warpgroup is
      // waited once (compute-sanitizer synccheck: "missing wait" otherwise), and this tile's phases cannot complete
      // before its own V loads (no wait runs ahead of its phase).
      // V transposed in shared memory (few query tiles per K/V head: the split gains nothing there): the transposing
      // warps write the V stages, so they wait, told by V(0)'s word, for all of them.
      // The words for V(0) (bits 0-3) and V(1) (bits 4-7), each read by o_empty_wait (fp8_vt_smem.cuh): bit w, wait
      // for kOEmpty + w; bit 3, the parity of the last tile's phase.
      int o_words = 0;
      if constexpr (Cfg::kOAliasV) {
        if (o_state != 0) {
          const int parity = (((o_state >> 1) - 1) & 1) << 3;
          const bool split = Cfg::kStages == 2 && Cfg::kConsumerWGs == 2 && !Cfg::kVtSmem && (o_state & 1) == 0 &&
                             n_blocks > 1;
          o_words = split ? (1 | parity) | (2 | parity) << 4 : ((1 << Cfg::kConsumerWGs) - 1) | parity;
        }
        o_state = (((o_state >> 1) + 1) << 1) | (n_blocks == 1 ? 1 : 0);
      }
      auto o_wait = [&](int word) {
        if constexpr (Cfg::kOAliasV && !Cfg::kVtSmem) o_empty_wait<Cfg>(bars, word);
      };
      o_wait(o_words & 15);
      load(kVFull, kVEmpty, v_smem, &tma.v, 0, Cfg::kVtSmem ? o_words : 0);
      FC_TL(k, 3, 4);
      for (int n = 1; n < n_blocks; ++n) {
        load(Slots::kKFull, Slots::kKEmpty, k_smem, &tma.k, n);
        if (n == 1) o_wait(o_words >> 4);
        load(kVFull, kVEmpty, v_smem, &tma.v, n);
      }
    }
    FC_TL(k, 3, 5);
    block += n_blocks;
    tile = next;
  }
}

// One consumer warpgroup: 64 query rows, S = Q K^T and O += P V on wgmma, online softmax in registers.
// The high word of a K-major 64-byte-swizzle descriptor with SBO 512 (8 rows of 64 bytes): FP8 V^T's tail chunk.
constexpr uint32_t kVtTailHi = static_cast<uint32_t>(smem_descriptor(0, 16, 512, 2) >> 32);

template <int kHeadDim, int kPoint, typename Element>
struct WgmmaConsumer {
  using Cfg = HopperTileConfig<kHeadDim, kPoint, Element::kBytes>;
  static constexpr int kNTiles = Cfg::kBlockN / 8;
  static constexpr int kDTiles = kHeadDim / 8;
  static constexpr bool kRescaleSkip = Cfg::kFp8 && Fp8Knobs<kHeadDim, Cfg::kFp8>::kRescaleSkip;

  float o_reg[kDTiles][4];  // wgmma accumulator layout == mma.sync C layout per 16-row warp slab
  OnlineSoftmax<kNTiles> softmax;

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) o_reg[dt][0] = o_reg[dt][1] = o_reg[dt][2] = o_reg[dt][3] = 0.f;
    softmax.init();
  }

  // Issues S[64 x kKeys] = Q[64 rows of this warpgroup] K^T (both K-major) as one wgmma group; no wait. kKeys is
  // kBlockN, or kNarrowN for a block whose keys past the first kNarrowN no row of this warpgroup sees.
  template <int kKeys>
  __device__ __forceinline__ void qk_issue(float (&acc)[kKeys / 8][4], const SmemDesc& q_desc,
                                           const SmemDesc& k_desc) {
    static_assert(kKeys % 16 == 0 && kKeys <= Cfg::kBlockN, "a wgmma N within the block");
    auto& acc_flat = reinterpret_cast<float(&)[kKeys / 2]>(acc);
#pragma unroll
    for (int kk = 0; kk < Cfg::kKStepsQK; ++kk) {
      // k-step kk: chunk kk / kSteps, 32 bytes (16 or 32 columns) per step inside the swizzled row.
      constexpr int kSteps = Cfg::kSpan / 32;
      const uint32_t q_off = (kk / kSteps) * Cfg::kBlockM * Cfg::kSpan + (kk % kSteps) * 32;
      const uint32_t k_off = (kk / kSteps) * Cfg::kBlockN * Cfg::kSpan + (kk % kSteps) * 32;
      wgmma_ss<kKeys, Element>(acc_flat, q_desc.at(q_off), k_desc.at(k_off), kk > 0);
    }
    wgmma_commit();
  }

  // The block's scores from a completed qk_issue<kKeys>: keys past kKeys are -inf. A narrow GEMM gets its own
  // accumulator array: writing it into part of S made ptxas serialize every wgmma of the kernel (C7511).
  template <int kKeys>
  static __device__ __forceinline__ void scores_from(float (&s)[kNTiles][4], const float (&acc)[kKeys / 8][4]) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = nt < kKeys / 8 ? acc[nt < kKeys / 8 ? nt : 0][e] : -INFINITY;
    }
  }

  // Issues O += P V over the block's first kKeys keys (P from registers) as one wgmma group. 16-bit V is MN-major
  // (LBO = bytes between chunks of one swizzle span: 64 columns, or 32 at hdim 96's 64-byte span); FP8 V^T is
  // K-major, 128-key chunks of kHeadDim rows.
  template <int kKeys = Cfg::kBlockN>
  __device__ __forceinline__ void pv_issue(const uint32_t (&p_frag)[Cfg::kPSteps][4], const SmemDesc& v_desc) {
    auto& o_flat = reinterpret_cast<float(&)[kHeadDim / 2]>(o_reg);
    if constexpr (Cfg::kFp8) {
#pragma unroll
      for (int kk = 0; kk < kKeys / 32; ++kk) {
        // Keys 32kk..32kk+31 (in kernel/fp8_vt.cuh's order): 32 bytes of each 128-byte row of chunk kk / 4, or of
        // each 64-byte row of the tail chunk (its own swizzle mode and SBO: the descriptor's high word).
        if (kk / 4 < Cfg::kVtFull) {
          wgmma_rs<kHeadDim, Element>(o_flat, p_frag[kk], v_desc.at((kk / 4) * kHeadDim * 128 + (kk % 4) * 32));
        } else {
          const SmemDesc tail{v_desc.lo, kVtTailHi};
          wgmma_rs<kHeadDim, Element>(o_flat, p_frag[kk],
                                      tail.at(Cfg::kVtFull * kHeadDim * 128 + (kk - 4 * Cfg::kVtFull) * 32));
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        // Keys 16kk..16kk+15: two 8-key groups of kSpan-byte rows (SBO 8 rows).
        wgmma_rs<kHeadDim, Element>(o_flat, p_frag[kk], v_desc.at(kk * 16 * Cfg::kSpan));
      }
    }
    wgmma_commit();
  }

  // Descriptors of Q (this warpgroup's rows), and of K and V in ring stage 0; stage s adds s * kKVBytes.
  // Q and K are K-major: SBO = 8 rows of one span (1024 or 512 bytes), LBO unused.
  static __device__ __forceinline__ SmemDesc q_desc(uint32_t q_wg_addr) {
    return SmemDesc::make(q_wg_addr, 16, 8 * Cfg::kSpan, Cfg::kSwizzleMode);
  }
  static __device__ __forceinline__ SmemDesc k_desc(uint32_t k_addr) {
    return SmemDesc::make(k_addr, 16, 8 * Cfg::kSpan, Cfg::kSwizzleMode);
  }
  static __device__ __forceinline__ SmemDesc v_desc(uint32_t v_addr) {
    if constexpr (Cfg::kFp8) return SmemDesc::make(v_addr, 16, 1024);
    return SmemDesc::make(v_addr, Cfg::kBlockN * Cfg::kSpan, 8 * Cfg::kSpan, Cfg::kSwizzleMode);
  }

  // O *= alpha. FP8 hdim 128 skips it for the whole warp when none of its alphas differs from 1: no row of its 16 got
  // a new max in the block, and multiplying by exactly 1 changes nothing, so the outputs are the same bits. Measured
  // +1-2 % there; bf16 (-4 %) and FP8 hdim 256 (-3 %) lost more to the branch's scheduling than the skipped FMULs
  // saved.
  __device__ __forceinline__ void rescale_o(const float (&alpha)[2]) {
    if (!kRescaleSkip || __any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) rescale_rows(o_reg, alpha);
  }

  // P (A fragments of the P V GEMM) from the softmaxed S registers: C layout repacked as A layout. 16-bit: two
  // 8-column C tiles are one A fragment. FP8 (k32): the A fragment wants columns 4t..4t+3 (and 16 + 4t..) of a thread
  // that holds 2t, 2t+1, 8+2t, 9+2t (and 16 + those): no shuffle, the thread's own values go in, and V^T's keys are
  // stored in the same order (kernel/fp8_vt.cuh), so P V pairs each P with its own key's V row.
  // kKeys: P V reads the first kKeys keys' steps only (a narrow last block), so only those are packed.
  template <int kKeys = Cfg::kBlockN>
  static __device__ __forceinline__ void pack_p(const float (&s)[kNTiles][4], uint32_t (&p_frag)[Cfg::kPSteps][4]) {
    constexpr int kSteps = kKeys * (Cfg::kFp8 ? 1 : 2) / 32;
    if constexpr (Cfg::kFp8) {
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk) {
        p_frag[kk][0] = Element::pack4(s[4 * kk][0], s[4 * kk][1], s[4 * kk + 1][0], s[4 * kk + 1][1]);
        p_frag[kk][1] = Element::pack4(s[4 * kk][2], s[4 * kk][3], s[4 * kk + 1][2], s[4 * kk + 1][3]);
        p_frag[kk][2] = Element::pack4(s[4 * kk + 2][0], s[4 * kk + 2][1], s[4 * kk + 3][0], s[4 * kk + 3][1]);
        p_frag[kk][3] = Element::pack4(s[4 * kk + 2][2], s[4 * kk + 2][3], s[4 * kk + 3][2], s[4 * kk + 3][3]);
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < kSteps; ++kk) {
        p_frag[kk][0] = Element::pack(s[2 * kk][0], s[2 * kk][1]);
        p_frag[kk][1] = Element::pack(s[2 * kk][2], s[2 * kk][3]);
        p_frag[kk][2] = Element::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        p_frag[kk][3] = Element::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
      }
    }
  }

  __device__ __forceinline__ void fence_o() { fence_operands(reinterpret_cast<float(&)[kHeadDim / 2]>(o_reg)); }
};

}  // namespace flashcore
