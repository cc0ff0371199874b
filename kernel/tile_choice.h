// The tile of each head dim and call (FA3's tile_size.h), each choice with what it measured on the H100.
// BLOCK_N per call: every head dim compiles a "short" and a "long" key tile (one instantiation when they agree);
// the host picks by the shape. Paired against FA3:
//   hdim 128: 128 keys for causal masking and short key ranges (less diagonal waste, 2x fewer registers
//             for S; S = 1K causal 0.85x -> 0.98x FA3), 176 otherwise (fewer iterations: 8K +2-3 % over 128).
//   hdim 64 : 128 keys (S is 64 of the 160 registers three consumer warpgroups get).
//   hdim 32 : hdim 64's tile (64-byte spans: one 32-column chunk a row; O 16 registers). FA3 runs 32 on its 64 kernel.
//   hdim 96 : hdim 128's pair, 128 and 176 keys, 2 consumer warpgroups (O 48 + S 88 + P 44 registers at 176). FA3
//             runs 192 x 144 with P through shared memory (three warpgroups of 160 registers hold no S and P
//             beside O here). Not measured yet.
//   hdim 192: 112 keys (FA3's 128 x 112: Q 48 KB + 2 stages of K and V at 42 KB each fill the 227 KB; 128 keys
//             do not fit, V is 192 columns wide also for v's 128 of (192, 128)). Not measured yet; one tile for
//             every call, as hdim 256 (FA3 takes 96 for windows and paged caches: a tuned point may).
//   hdim 160: 128 keys (64-byte spans, as hdim 96: Q 40 KB + 2 stages of K and V at 40 KB each, O staged over V;
//             O 80 + S 64 + P 32 registers of 232). One tile for every call. FA3 runs 160 on its 192 kernel.
//   hdim 224: 96 keys (Q 56 KB + 2 stages of K and V at 42 KB each fill the 227 KB; O 112 + S 48 + P 24). FA3 runs
//             224 on its 256 kernel (80 keys).
//   hdim 256: 80 keys (Q 64 KB + 2 stages of K and V at 40 KB each fill the 227 KB).
#pragma once
#include <cstdint>

namespace flashcore {

template <int kHeadDim>
struct BlockNChoice;
template <>
struct BlockNChoice<32> {
  static constexpr int kShort = 128, kLong = 128;
};
template <>
struct BlockNChoice<64> {
  static constexpr int kShort = 128, kLong = 128;
};
template <>
struct BlockNChoice<96> {
  static constexpr int kShort = 128, kLong = 176;
};
template <>
struct BlockNChoice<128> {
  static constexpr int kShort = 128, kLong = 176;
};
template <>
struct BlockNChoice<160> {
  static constexpr int kShort = 128, kLong = 128;
};
template <>
struct BlockNChoice<192> {
  static constexpr int kShort = 112, kLong = 112;
};
template <>
struct BlockNChoice<224> {
  static constexpr int kShort = 96, kLong = 96;
};
template <>
struct BlockNChoice<256> {
  static constexpr int kShort = 80, kLong = 80;
};

// FP8 (E4M3) inputs: one compiled point per head dim (no tuned table yet). V^T tiles are 128-key chunks plus at most
// one 64-key chunk (kernel/fp8_vt.cuh), so BLOCK_N is a multiple of 64. Measured against FA3's FP8 (B4 H16 S8K):
// hdim 128 at 192 keys 0.952x (128 keys 0.920x; 256 keys spill 356 B); hdim 256 at 128 keys with a 24-register
// producer (consumers 240) 0.997x, with 32 (consumers 232, spilling) 0.79x.
// Each head dim compiles the tile twice, V^T from a copy the kernel writes (kernel/fp8_vt_fused.cuh) and V transposed
// in shared memory (kPointVtSmem, kernel/fp8_vt_smem.cuh); either way the producer warpgroup runs the transposing
// warps. Its registers: hdim 128 40 both ways (at 32 ptxas spilled 4 B; the consumers keep 232); hdim 256 24 both
// ways; hdim 64 40 in shared memory (at 32 it spilled 4-8 B; the three consumers get 152, not 160) and 32 with the
// copy (it spills 4-8 B there, which cost less than 152 consumer registers: S8K 0.883x FA3 at 40).
// kDescales: where an FP8 tile's descale factors reach its consumers (kernel/fp8_descales.h). Measured on the H100,
// FP8 B4 H16 prefill, time against kDescalesEpilogue's in paired rounds:
//   kDescalesEpilogue:  q x k descale loaded at the tile's start, q, k and v again in the epilogue (two dependent L2
//                       loads after the tile info's reload, on each tile's path). hdim 64: its three consumer
//                       warpgroups have 160 registers, and two more kept live across the mainloop made S8K take
//                       1.13x (tile start) and 1.15x (producer) the time.
//   kDescalesTileStart: all three loaded by the consumers at the tile's start and kept in two registers. hdim 256:
//                       S4K 0.98x, causal 0.99x; the producer way read 1.00x / 0.98x and doubled the spills of its
//                       24-register producer.
//   kDescalesProducer:  loaded by the producer thread when it reaches the tile (its waits hide the latency) and
//                       handed over beside the tile info (fp8_descales.h store_descales). hdim 128: S4K causal
//                       0.96-0.97x, 4K queries x 1088 keys 0.91-0.92x, S8K causal 0.99x, S4K 1.00-1.01x.
// kSoftmaxRing: whether the consumer warpgroups' ring (kernel_wgmma.cuh) passes the turn around each block's softmax
// instead of around the GEMM issue, so the softmaxes never overlap (their MUFU and issue slots are the long pole at
// FP8, whose GEMMs are half of 16-bit's). Measured on the H100 against the GEMM ring, three runs: hdim 128 S4K +2 %,
// 4K x 1088 keys +3-4 %, S4K causal -0.5-0 %, S8K causal -1.2 to +1.4 %; hdim 64 S8K +2 % but causal -4 % (three
// warpgroups' softmaxes in turn); hdim 256 -2 to -3 % (its consumers spill twice as much). Only hdim 128 takes it.
// A run-time switch (the ring by the call's mask) cost 1 % at hdim 128 and 6 % at hdim 64. 16-bit inputs always
// take the GEMM ring (-2 to -4 %).
// kFastFinalize: whether the epilogue takes 1/l and log2(l) by one MUFU each (softmax.h finalize<true>) or by the
// IEEE division and logf (finalize<false>). Measured on the H100 against the IEEE form: +0.3-1.6 % on FP8 hdim
// 128/256 and bf16 rows, but FP8 hdim 64 S8K -12 % (causal unchanged) with the same registers and spills: FP8 hdim 64
// keeps the IEEE form. 16-bit inputs always take the fast form (bf16 hdim 64 +0.6 %).
// kVtHeadCount: whether the producer thread of the V^T copy (kernel/fp8_vt_fused.cuh) reads a per-head count of
// stored blocks at each tile's first V block and skips the per-block flags once the head is complete. Measured on
// the H100, B4 H16, against the per-block flags, two runs of 12 flushed rounds: hdim 256 S4K +1.2 / +1.6 %, S4K
// causal +1.2 / +1.1 %; hdim 128 -0.5 to +0.4 % (S4K, S4K causal, S8K, S8K causal): only hdim 256, whose 24-register
// producer thread waits on each flag, takes it.
// kRescaleSkip: O's rescale skipped by a warp whose rows kept their max (hopper_mainloop.h rescale_o): hdim 128
// +1-2 %, hdim 256 -3 %.
// kVtSmemRows: use_fp8_vt_smem's limit (below).
enum Fp8Descales : int { kDescalesEpilogue = 0, kDescalesTileStart = 1, kDescalesProducer = 2 };
template <int kHeadDim>
struct Fp8Choice;
// hdim 64 takes the 16-bit hdim 64's shape (3 consumer warpgroups, BLOCK_M 192, 128 keys; FA3's FP8 hdim 64 also
// runs BLOCK_M 192): its short GEMMs leave the softmax as the long pole.
template <>
struct Fp8Choice<64> {
  static constexpr int kConsumerWGs = 3, kBlockN = 128, kStages = 2;
  static constexpr int kProducerRegs = 32, kVtSmemProducerRegs = 40, kRescaleEarly = 0;
  static constexpr int kVtSmemRows = 4096;
  static constexpr bool kRescaleSkip = false;  // not measured at hdim 64
  static constexpr int kDescales = kDescalesEpilogue;
  static constexpr bool kSoftmaxRing = false;
  static constexpr bool kVtHeadCount = false;
  static constexpr bool kFastFinalize = false;
  // Decode on one consumer warpgroup (as hdim 128's, below): the default tile ran every block's GEMMs and softmax on
  // 192 rows for decode's few. The 16-bit hdim-64 decode point's 128 keys and 4 stages (the small Q and K/V stages
  // leave room); the shared-memory transpose's 40-register producer.
  static constexpr bool kOneWgDecode = true;
  static constexpr int kDecodeBlockN = 128, kDecodeStages = 4, kDecodeProducerRegs = 40;
};
template <>
struct Fp8Choice<128> {
  static constexpr int kConsumerWGs = 2, kBlockN = 192, kStages = 2;
  static constexpr int kProducerRegs = 40, kVtSmemProducerRegs = 40, kRescaleEarly = 0;
  static constexpr int kVtSmemRows = 512;
  static constexpr bool kRescaleSkip = true;
  static constexpr int kDescales = kDescalesProducer;
  static constexpr bool kSoftmaxRing = true;
  static constexpr bool kVtHeadCount = false;
  static constexpr bool kFastFinalize = true;
  // Decode (tiles of at most 64 query rows, use_one_wg_point) on one consumer warpgroup, BLOCK_M 64, as the 16-bit
  // decode point (hopper_config.h decode_point): two consumers of 128 rows ran every GEMM and softmax on rows that
  // hold nothing. The 16-bit decode point's 128 keys and 3 stages; V transposed in shared memory (decode's rows per
  // K/V head are far below kVtSmemRows), the producer's 40 registers for the page walk.
  static constexpr bool kOneWgDecode = true;
  static constexpr int kDecodeBlockN = 128, kDecodeStages = 3, kDecodeProducerRegs = 40;
};
template <>
struct Fp8Choice<256> {
  static constexpr int kConsumerWGs = 2, kBlockN = 128, kStages = 2;
  static constexpr int kProducerRegs = 24, kVtSmemProducerRegs = 24;
  static constexpr int kVtSmemRows = 256;
  static constexpr int kRescaleEarly = 0;
  static constexpr bool kRescaleSkip = false;
  static constexpr int kDescales = kDescalesTileStart;
  static constexpr bool kSoftmaxRing = false;
  static constexpr bool kVtHeadCount = true;
  static constexpr bool kFastFinalize = true;
  // Decode on one consumer warpgroup: two consumers ran every block on 128 rows for decode's few. Beside one consumer
  // the producer need not keep the 2-consumer split's 24 registers: it takes FA3's one-warpgroup 56 (at 40, with a
  // page walk compiled in then, the kernel spilled 16 B). 128 keys and 2 stages fill the shared memory (each stage:
  // K, raw V and V^T, 32 KB each; O staged over V). One H200, B16 H16 S4K: 72 % of DRAM peak, 0.81-0.88x FA3's FP8;
  // 64 keys x 3 stages ran 4-14 % slower. ptxas: 255 registers, 0 spills.
  static constexpr bool kOneWgDecode = true;
  static constexpr int kDecodeBlockN = 128, kDecodeStages = 2, kDecodeProducerRegs = 56;
};

// The FP8 choices a kernel reads (kernel/hopper_config.h, hopper_mainloop.h): Fp8Choice's with FP8 inputs, the 16-bit
// answers otherwise, so a head dim FP8 does not run (96, 192: FC_HEAD_DIM_TABLE) compiles without an Fp8Choice.
template <int kHeadDim, bool kFp8>
struct Fp8Knobs {
  static constexpr bool kRescaleSkip = false, kSoftmaxRing = false, kVtHeadCount = false, kFastFinalize = true;
  static constexpr int kDescales = kDescalesEpilogue;
};
template <int kHeadDim>
struct Fp8Knobs<kHeadDim, true> : Fp8Choice<kHeadDim> {};

// Key ranges up to this many keys take the short tile even without causal masking (hdim 128, S = 2K: 128 keys
// 0.92x FA3, 160 keys 0.91x, 176 keys 0.88x).
constexpr int64_t kShortKeyRange = 2048;

inline bool use_short_block_n(bool causal, int64_t seqlen_k) { return causal || seqlen_k <= kShortKeyRange; }

// Whether a call runs its head dim's one-warpgroup decode point (hopper_config.h HeadDimTraits::decode_point): every
// tile of the default points' plan holds at most 64 query rows. That plan packs a GQA group's rows into one tile when
// they fit its `block_m` (run_tiles.cuh make_plan), so a tile holds seqlen_q x group rows packed, else up to
// seqlen_q (the longest sequence's, with packed queries). vLLM's FA3 fork (use_one_mma_wg): seqlen_q x group <= 64
// packed.
constexpr int64_t kOneWgRows = 64;

// GQA with short queries (decode): all query heads of a K/V head fit in one tile of `block_m` rows, so make_plan
// packs them and reads each K/V head once instead of once per query head.
constexpr bool packs_gqa(int64_t seqlen_q, int64_t group, int64_t block_m) {
  return group > 1 && seqlen_q * group <= block_m;
}

constexpr bool use_one_wg_point(int64_t seqlen_q, int64_t group, int64_t block_m) {
  return (packs_gqa(seqlen_q, group, block_m) ? seqlen_q * group : seqlen_q) <= kOneWgRows;
}

// FP8: the share of the L2 that the K and V^T of one section of the dynamic order's (batch, head) pairs may take when
// the caller names none (fc_params.l2_section_pct 0); 0 = the 16-bit default, a third. Measured on the H100, FP8 B4
// H16 causal, two runs of 10 rounds against FA3: hdim 256 at two thirds (16 pairs a
// section at S4K) S4K 0.994-0.996x -> 1.000-1.003x, S8K 1.027-1.028x -> 1.038x (all of the L2: 0.980x, 1.036x); hdim
// 128 at two thirds lost 1-2.5 % (S4K causal 0.975x -> 0.951x), so it keeps a third.
constexpr int fp8_l2_section_pct(int head_dim) { return head_dim == 256 ? 67 : 0; }

// FP8: where V is transposed. The copy (kernel/fp8_vt_fused.cuh) costs one read and write of V per call, whatever
// the query count, beside the GEMMs; the shared-memory transpose costs each query tile's producer warpgroup one pass
// over every V block the tile sees, so its total grows with the query rows per K/V head (seqlen_q x the GQA group)
// times the share of keys a row sees (causal, bottom-right: 1 - Sq / 2Sk, or Sk / 2Sq when Sq > Sk). Up to this many
// such rows the shared-memory transpose wins (H100, bench/fp8_v_transpose.py: decode 1.2-2.1x; hdim 128 wins 5 % at
// 512 rows, loses 2 % at 1K; hdim 256 loses 9 % at 512 non-causal, wins 7 % at 512 causal; hdim 64 wins 2-4 % at
// 4K). Above, the copy. The limits are Fp8Choice's kVtSmemRows.
template <int kHeadDim>
bool use_fp8_vt_smem(int64_t seqlen_q, int64_t seqlen_k, int64_t group, bool causal) {
  double rows = static_cast<double>(seqlen_q) * static_cast<double>(group);
  if (causal && seqlen_k > 0) {
    const double sq = static_cast<double>(seqlen_q), sk = static_cast<double>(seqlen_k);
    rows *= sq <= sk ? 1.0 - sq / (2.0 * sk) : sk / (2.0 * sq);
  }
  return rows <= Fp8Choice<kHeadDim>::kVtSmemRows;
}

}  // namespace flashcore
