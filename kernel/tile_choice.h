// BLOCK_N per call: every head dim compiles a "short" and a "long" key tile (one instantiation when they agree);
// the host picks by the shape. Measured on the H100 (docs/perf-notes.md step 4.3, paired against FA3):
//   hdim 128: 128 keys for causal masking and short key ranges (less diagonal waste, 2x fewer registers
//             for S; S = 1K causal 0.85x -> 0.98x FA3), 176 otherwise (fewer iterations: 8K +2-3 % over 128).
//   hdim 64 : 128 keys (S is 64 of the 160 registers three consumer warpgroups get).
//   hdim 256: 80 keys (Q 64 KB + 2 stages of K and V at 40 KB each fill the 227 KB).
// FLASHCORE_D128_BLOCK_N (long) and FLASHCORE_D128_BLOCK_N_SHORT override the hdim-128 pair for experiments.
#pragma once
#include <cstdint>

namespace flashcore {

#ifndef FLASHCORE_D128_BLOCK_N
#define FLASHCORE_D128_BLOCK_N 176
#endif
#ifndef FLASHCORE_D128_BLOCK_N_SHORT
#define FLASHCORE_D128_BLOCK_N_SHORT 128
#endif

template <int kHeadDim>
struct BlockNChoice;
template <>
struct BlockNChoice<64> {
  static constexpr int kShort = 128, kLong = 128;
};
template <>
struct BlockNChoice<128> {
  static constexpr int kShort = FLASHCORE_D128_BLOCK_N_SHORT, kLong = FLASHCORE_D128_BLOCK_N;
};
template <>
struct BlockNChoice<256> {
  static constexpr int kShort = 80, kLong = 80;
};

// Key ranges up to this many keys take the short tile even without causal masking (hdim 128, S = 2K: 128 keys
// 0.92x FA3, 160 keys 0.91x, 176 keys 0.88x).
constexpr int64_t kShortKeyRange = 2048;

inline bool use_short_block_n(bool causal, int64_t seqlen_k) { return causal || seqlen_k <= kShortKeyRange; }

}  // namespace flashcore
