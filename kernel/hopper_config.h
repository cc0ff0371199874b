// Tile and register configuration of the Hopper kernel (TMA loads, wgmma GEMMs, warp specialization,
// persistent CTAs, TMA-store epilogue).
#pragma once
#include <cuda.h>

#include "common.h"
#include "head_dims.h"
#include "tile_choice.h"
#include "tile_point.h"
#include "tile_scheduler.h"

namespace flashcore {

// Tensor maps of Q, K, V and O, passed by value as a __grid_constant__ kernel parameter (TMA reads them there).
struct TmaParams {
  CUtensorMap q, k, v, o;
  CUtensorMap v_tail;  // FP8 V^T's 64-key chunk of a tile whose BLOCK_N is not a multiple of 128 (64-byte swizzle)
  CUtensorMap v_raw;   // FP8 V^T written by the kernel itself (kVtFused): V as it is, with K's boxes and swizzle
};

// Warpgroup 0 produces (one thread issues every TMA load); the consumer warpgroups own 64 query rows each
// (one wgmma M). setmaxnreg moves registers from the producer to the consumers: with a 32-register producer,
// 2 consumers get 232 and 3 get 160. FA3 gives a 2-consumer producer 24; the persistent producer (tile decode,
// ring counters) spilled 4-16 bytes at 24 (ptxas), and the consumers' peak (hdim 128: S 88 + P 44 + O 64 +
// addressing) stays under 232 without spills. make tune searches the producer's share (a point's producer_regs).
// One consumer (BLOCK_M 64, the decode point) has 256 threads: ptxas gives a thread at most 255 registers, so the
// launch holds 248 each, and the consumer takes setmaxnreg's largest, 256 (FA3's one-warpgroup split: 56 + 256).
template <int kConsumerWGs, int kProducerRegs>
struct RegisterSplit {
  static_assert(kConsumerWGs >= 1 && kConsumerWGs <= 3, "1 to 3 consumer warpgroups (named barrier ids 1..3)");
  static_assert(kProducerRegs >= 24 && kProducerRegs % 8 == 0, "setmaxnreg takes multiples of 8 from 24");
  // setmaxnreg.inc takes from the registers the CTA was launched with: __launch_bounds__(threads, 1) gives each
  // thread 65536 / threads rounded down to a multiple of 8 (168 for 384 threads, 128 for 512), at most 255.
  static constexpr int kThreadRegs = 65536 / (128 * (1 + kConsumerWGs));
  static constexpr int kLaunchRegs = (kThreadRegs > 255 ? 255 : kThreadRegs) / 8 * 8;
  static constexpr int kProducer = kProducerRegs;
  static constexpr int kShare = (kLaunchRegs * (1 + kConsumerWGs) - kProducer) / kConsumerWGs / 8 * 8;
  static constexpr int kConsumer = kShare > 256 ? 256 : kShare;
  // What the consumers leave of the pool, at most 40 or the point's own share where larger, for the paged producer
  // (its page walk needs more than 32 registers): 40 beside 2 consumers (232 each either way), 32 beside 3 (never
  // paged: run_tiles.cuh), the point's producer_regs beside 1.
  static constexpr int kLeft = (kLaunchRegs * (1 + kConsumerWGs) - kConsumer * kConsumerWGs) / 8 * 8;
  static constexpr int kPagedWant = kConsumerWGs == 1 && kProducer > 40 ? kProducer : 40;
  static constexpr int kPagedProducer = kLeft > kPagedWant ? kPagedWant : kLeft;
  static_assert(kProducer <= kLaunchRegs, "setmaxnreg.dec cannot raise the producer above the launch registers");
  static_assert(kProducer * 128 + kConsumer * 128 * kConsumerWGs <= kLaunchRegs * 128 * (1 + kConsumerWGs),
                "register split exceeds the CTA's register pool");
};

// mbarrier slots. K and V have their own full/empty barriers, so K(n) is released as soon as S(n) is done while
// V(n) stays until P(n) V(n) is. Per tile of a persistent CTA: kQFull (Q and the tile info landed), kQEmpty (every
// consumer thread is done with Q: the producer may load the next tile's), kOEmpty + w (only where O is staged over V:
// consumer warpgroup w's store of the last tile with K/V blocks has read its staging, so V may refill that stage).
// FP8 with V transposed in shared memory (kRawStages > 0): TMA loads V as it is into a raw ring (kVRawFull /
// kVRawEmpty), the producer warpgroup's other warps transpose it into the V stages (kernel/fp8_vt_smem.cuh), and
// kVtFlags + s is the word the producer thread leaves them with raw stage s (8 bytes each, not barriers).
// kFused (FP8 V^T written by the kernel, kernel/fp8_vt_fused.cuh): kVtLoad, the transposing warps' raw V load, and
// kVtItem, the word with the block they claimed. kGather (16-bit 2-consumer points, which run paged caches): the
// small-page gather's request and request-read barriers, one each per K and V stage, then two words each for the
// requests (kernel/paged_gather.cuh).
template <int kStages, int kRawStages = 0, bool kFused = false, int kGather = 0>
struct HopperSlots {
  static constexpr int kQFull = 0;
  static constexpr int kQEmpty = 1;
  static constexpr int kOEmpty = 2;  // + consumer warpgroup (up to 3)
  static constexpr int kKFull = 5;
  static constexpr int kVFull = 5 + kStages;
  static constexpr int kKEmpty = 5 + 2 * kStages;
  static constexpr int kVEmpty = 5 + 3 * kStages;
  static constexpr int kVRawFull = 5 + 4 * kStages;
  static constexpr int kVRawEmpty = kVRawFull + kRawStages;
  static constexpr int kVtFlags = kVRawEmpty + kRawStages;
  static constexpr int kVtLoad = kVtFlags + kRawStages;
  static constexpr int kVtItem = kVtLoad + (kFused ? 1 : 0);
  static constexpr int kGatherReq = kVtItem + (kFused ? 1 : 0);
  static constexpr int kGatherFree = kGatherReq + kGather;
  static constexpr int kGatherData = (kGatherFree + kGather + 1) / 2 * 2;  // 16-byte aligned: one int4 per request
  static constexpr int kCount = kGatherData + 2 * kGather;
};

// Named barrier ids (bar.sync / bar.arrive). 0 is __syncthreads. Each consumer warpgroup owns one "may issue
// GEMMs" barrier for the ping-pong schedule and one epilogue barrier.
enum NamedBarrier : int {
  kBarrierSyncThreads = 0,
  kBarrierIssueWG0 = 1,     // + consumer warpgroup index (up to 3 consumers: ids 1..3)
  kBarrierEpilogueWG0 = 4,  // + consumer warpgroup index (ids 4..6): the warpgroup's O rows are in shared memory
  kBarrierScrub = 7,        // every consumer thread: V rows past a cache's used keys are zeroed (kernel_wgmma.cuh)
  kBarrierVtFused = 8,      // the producer warpgroup's transposing warps (kernel/fp8_vt_fused.cuh)
};

// The default point of each head dim, each choice with its reason (FA3's choices where they applied here); a
// tuned table may name another compiled point per shape bucket (flashcore/tuned.yaml, kernel/tuned_points.inc):
//   kConsumerWGs: hdim 32 and 64 take 3 (BLOCK_M 192): each K/V tile serves more rows, and their short GEMMs leave
//                 softmax as the long pole, which a third warpgroup in the ping-pong ring helps hide; 2 otherwise.
//   kPingPong:    consumer warpgroups take turns issuing GEMMs (named barriers), so one's softmax hides under the
//                 other's GEMMs. hdim 256 without it measured the same; kept on everywhere. FP8 hdim 128
//                 passes the turn around the softmax instead (kSoftmaxRing below).
//   kRescaleEarly: O *= alpha(n-1) between issuing S(n) and P(n-1) V(n-1) instead of after P V is done (FA3's
//                 choice above hdim 128): hdim 256 measured 6 % slower, hdim 128 the same: off (hdim 192 not
//                 measured: off with its neighbours; make tune tries it).
//   kStages:      2 K/V stages (hdim 128 at 176 keys, hdim 192 and hdim 256 have no room for a third).
//   Registers:    hdim 192's consumers hold O 96 + S 56 + P 28 (112 keys) of their 232, hdim 256's 128 + 40 + 20.
//   kProducerRegs: 32 (see RegisterSplit); hdim 224 40 (HeadDimTraits).
// BLOCK_N is chosen per call among the values of kernel/tile_choice.h.
// decode_point(): calls whose every tile holds at most 64 query rows (packed GQA decode, short queries;
// tile_choice.h use_one_wg_point) run one consumer warpgroup, BLOCK_M 64, as vLLM's FA3 fork does (use_one_mma_wg;
// upstream FA3, the baseline we time, runs 128 x 176 on two): a second (or third) warpgroup would run every GEMM
// and softmax of each K/V block on rows that hold nothing, doubling the tensor work that sits beside the block's DRAM
// time. No ping-pong (a ring of one has no partner); the short BLOCK_N, so a
// paged cache keeps its page boxes (gcd(page_size, BLOCK_N) rows); 3 stages at hdim 128 and 4 at hdim 32 and 64
// (what the smaller Q leaves room for: more K/V loads in flight); FA3's 56-register producer (the consumer gets 256).
// Up to hdim 128 (FA3's rule); the larger head dims' 16-bit decode keeps the default points (FP8's decode points:
// tile_choice.h Fp8Choice).
template <int kHeadDim>
struct HeadDimTraits {
  static_assert(is_kernel_head_dim(kHeadDim), "not a compiled head dim (kernel/head_dims.h KernelHeadDims)");
  static constexpr int kConsumerWGs = kHeadDim <= 64 ? 3 : 2;
  static constexpr int kStages = 2;
  static constexpr bool kPingPong = true;
  static constexpr bool kRescaleEarly = false;
  // hdim 224's producer at 32 spilled 4 B in its split and stream-K tail kernels (seven TMA boxes per K/V block);
  // at 40 its consumers keep 232 all the same (RegisterSplit rounds their share down to a multiple of 8).
  static constexpr int kProducerRegs = kHeadDim == 224 ? 40 : 32;
  // The default point at `block_n` keys per tile (kernel/tile_choice.h picks block_n per call).
  static constexpr int point(int block_n) {
    return point_code(block_n, kStages, kConsumerWGs, kPingPong, kRescaleEarly, kProducerRegs);
  }
  static constexpr bool kOneWgDecode = kHeadDim <= 128;
  static constexpr int decode_point() {
    return point_code(BlockNChoice<kHeadDim>::kShort, kHeadDim <= 64 ? 4 : 3, 1, false, false, 56);
  }
};

constexpr int kSmemLimit = 227 * 1024;  // what one H100 block may use

// Everything the kernel derives from (head dim, point, input element bytes: 2, or 1 for FP8); the static_asserts are
// the rules make tune checks before it builds a point (flashcore/points.py says the same in Python, with the rule
// each point breaks).
template <int kHeadDim, int kPoint, int kElemBytes = 2>
struct HopperTileConfig {
  using Point = TilePoint<kPoint>;
  static_assert(is_kernel_head_dim(kHeadDim), "not a compiled head dim (kernel/head_dims.h KernelHeadDims)");
  static_assert(kElemBytes == 2 || kElemBytes == 1, "16-bit or FP8 inputs");
  static constexpr bool kFp8 = kElemBytes == 1;
  static constexpr int kConsumerWGs = Point::kConsumerWGs;
  static constexpr int kThreads = 128 * (1 + kConsumerWGs);
  static constexpr int kConsumerThreads = 128 * kConsumerWGs;
  using Registers = RegisterSplit<kConsumerWGs, Point::kProducerRegs>;
  static constexpr int kBlockM = 64 * kConsumerWGs;
  static constexpr int kBlockN = Point::kBlockN;
  static constexpr int kStages = Point::kStages;
  static constexpr bool kPingPong = Point::kPingPong;
  static constexpr bool kRescaleEarly = Point::kRescaleEarly;
  static_assert(kStages >= 2 && kStages <= 8, "the K/V ring needs 2..8 stages");
  static_assert(kConsumerWGs > 1 || !kPingPong, "ping-pong needs 2 or more consumer warpgroups (a ring of one)");
  static_assert(!kFp8 || kConsumerWGs >= 2 || Point::kVtSmem,
                "FP8 runs on 2 or 3 consumer warpgroups, or 1 for decode with V transposed in shared memory "
                "(tile_choice.h Fp8Choice)");
  // Q, K and 16-bit V TMA boxes and wgmma atoms are one swizzle span wide: 128 bytes (64 16-bit or 128 FP8 columns),
  // or 64 bytes where a row is not whole 128-byte spans (FP8 hdim 64: one; 16-bit hdim 32, 96, 160, 224: one, three,
  // five, seven of 32 columns): 64-byte swizzle, 8-row groups of 512 bytes.
  static constexpr int kRowBytes = kHeadDim * kElemBytes;  // one row of Q or K
  static constexpr int kSpan = kRowBytes % 128 == 0 ? 128 : 64;
  static_assert(kRowBytes % kSpan == 0, "a row of Q, K and V is whole swizzle spans (64 or 128 bytes)");
  static constexpr int kSwizzleMode = kSpan == 128 ? 1 : 2;  // the descriptors' swizzle field (kernel/wgmma.h)
  static constexpr int kChunkCols = kSpan / kElemBytes;
  static constexpr int kChunks = kRowBytes / kSpan;
  static constexpr int kQBytes = kBlockM * kRowBytes;
  // K: [kChunks][kBlockN][kSpan B]. V: 16-bit [kChunks][kBlockN keys][kSpan B] (MN-major for P V); FP8 V^T (wgmma FP8
  // takes K-major operands only) [kBlockN / 128][kHeadDim rows][128 keys], from a transposed copy in the workspace
  // that the producer warpgroup's other warps write during the call (kVtFused, kernel/fp8_vt_fused.cuh, through a
  // raw and a V^T staging buffer, kVtStaging), or (kVtSmem) transposed in shared memory from a raw ring of
  // kVRawStages stages laid out as K (kernel/fp8_vt_smem.cuh). The same bytes either way; either sits after V.
  static constexpr int kKVBytes = kBlockN * kRowBytes;
  static constexpr bool kVtSmem = kFp8 && Point::kVtSmem;
  static_assert(kFp8 || !Point::kVtSmem, "kPointVtSmem is an FP8 choice");
  static constexpr bool kVtFused = kFp8 && !Point::kVtSmem;
  // The copy's per-head count of stored blocks (tile_choice.h Fp8Choice::kVtHeadCount).
  static constexpr bool kVtHeadCount = kVtFused && Fp8Knobs<kHeadDim, kFp8>::kVtHeadCount;
  // The epilogue's 1/l and LSE by MUFU (tile_choice.h Fp8Choice::kFastFinalize; 16-bit inputs always).
  static constexpr bool kFastFinalize = !kFp8 || Fp8Knobs<kHeadDim, kFp8>::kFastFinalize;
  static constexpr int kVRawStages = kVtSmem ? kStages : 0;
  static constexpr int kVtStaging = kVtFused ? 2 : 0;
  // A paged cache runs on 16-bit points of 1 or 2 consumers only (run_tiles.cuh make_plan). Those of 128-byte spans up
  // to hdim 128 gather small pages (kernel/paged_gather.cuh) and hold its slots; the others keep one TMA box per page
  // (paged calls run on kernels of 128-byte spans: up to hdim 128 on the 128 kernel, 160 on 192, 224 on 256,
  // kernel/head_dims.h paged_kernel_head_dim). At hdim 192 a row
  // is 24 16-byte pieces, one per lane, and a warp must hold whole rows (32 lanes: the gather's row and page-id
  // mapping); at hdim 256 the gather warps' code made 4 of the kernels spill 4 B (the producer's tile decode).
  static constexpr bool kPagedCapable = !kFp8 && kConsumerWGs <= 2;
  static constexpr bool kGatherCapable = kPagedCapable && kHeadDim <= 128 && kSpan == 128;
  using Slots = HopperSlots<kStages, kVRawStages, kVtFused, kGatherCapable ? 2 * kStages : 0>;
  // k-steps of one GEMM (32 bytes of K each: 16 16-bit or 32 FP8 columns); P's A fragments per block.
  static constexpr int kKStepsQK = kRowBytes / 32;
  static constexpr int kPSteps = kBlockN * kElemBytes / 32;
  // O is 16-bit (bf16 for FP8 inputs), staged per consumer warpgroup for the TMA store: [kOChunks][64 rows][64],
  // 128-byte swizzled.
  static constexpr int kOChunks = (kHeadDim + 63) / 64;  // hdim 96: the second chunk's columns past 96 are clipped
  static constexpr int kOWgBytes = 64 * 64 * 2 * kOChunks;
  static constexpr int kOBytes = kOWgBytes * kConsumerWGs;
  static constexpr int kBarrierBytes = (8 * Slots::kCount + 15) / 16 * 16;
  // FP8: where the consumers read the descale factors (tile_choice.h Fp8Choice); 16-bit inputs have none.
  static constexpr int kDescales = kFp8 ? Fp8Knobs<kHeadDim, kFp8>::kDescales : kDescalesEpilogue;
  // The ring around the softmax instead of the GEMM issue (tile_choice.h Fp8Choice::kSoftmaxRing; FP8 only).
  static constexpr bool kSoftmaxRing = kPingPong && kFp8 && Fp8Knobs<kHeadDim, kFp8>::kSoftmaxRing;
  // TileInfo slots (tile_scheduler.h), 16-byte aligned; with kDescalesProducer, the descale slots after them.
  static constexpr int kTileSlotBytes = 2 * kTileInfoBytes + (kDescales == kDescalesProducer ? 16 : 0);
  static constexpr int kAlign = 1024;        // 128-byte-swizzled tiles start on 1024-byte boundaries (64-byte: 512)
  static constexpr int kBaseBytes =
      kAlign + kQBytes + (2 * kStages + kVRawStages + kVtStaging) * kKVBytes + kBarrierBytes + kTileSlotBytes;
  // O gets its own buffer when it fits; otherwise each warpgroup stages its rows in one of V's stages (FA3 overlaps
  // O with V too) and the producer loads the next tile's V only after the stores have read them (kOEmpty + w).
  static constexpr bool kOAliasV = kBaseBytes + kOBytes > kSmemLimit;
  // O over V: a warpgroup waits for its store's read and arrives on kOEmpty + w at its next tile's first S issue
  // (kernel_wgmma.cuh o_arrive), not at the end of its epilogue. Not with V transposed in shared memory, whose
  // transposing warps wait for every warpgroup's arrival before the next tile's V(0) (hopper_mainloop.h).
  static constexpr bool kOLateArrive = !kVtSmem;
  static constexpr int kSmemBytes = kBaseBytes + (kOAliasV ? 0 : kOBytes);
  static_assert(kSmemBytes <= kSmemLimit, "shared memory exceeds the 227 KB an H100 block may use");
  static_assert(!kOAliasV || (kOWgBytes <= kKVBytes && kConsumerWGs <= kStages),
                "O staged over V needs one V stage per consumer warpgroup, each holding its 64 rows");
  static_assert(kBlockN % 16 == 0 && kBlockN >= 64 && kBlockN <= 256,
                "BLOCK_N must be a valid wgmma N (kernel/wgmma_ops.h: 64..256) and a whole k-step of P V");
  static_assert(!kFp8 || kBlockN % 64 == 0, "FP8: V^T tiles are 128-key chunks and at most one 64-key chunk");
  // FP8 V^T: kVtFull chunks [kHeadDim rows][128 keys] (128-byte swizzle), then kVtTail chunk [kHeadDim][64 keys]
  // (64-byte swizzle: a 64-byte row cannot take the 128-byte pattern).
  static constexpr int kVtFull = kBlockN / 128;
  static constexpr int kVtTail = kBlockN % 128 / 64;
  // A warpgroup whose rows see at most kNarrowN keys of a tile's last block (causal diagonal, ragged seqlen_k) runs
  // that block's S and P V GEMMs on its first kNarrowN keys only (0: never). Causal 128 x 128 tiles: the first
  // warpgroup's diagonal block is half the work.
  static constexpr int kNarrowN = kBlockN >= 128 ? 64 : 0;
  // The narrow block's softmax (mask, max, exponentials, sum, P packing) on its live keys only, at hdim 128. At hdim
  // 64 and 256 the same code changed ptxas's schedule of kernels and cost 0.3-1 % on FP8 calls that never run a
  // narrow block, so they keep the full width.
  static constexpr bool kNarrowSoftmax = kHeadDim == 128;
  static_assert(kQBytes % kAlign == 0 && kKVBytes % kAlign == 0, "tiles must keep 1024-byte alignment");
};

}  // namespace flashcore
