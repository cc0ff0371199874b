// Host heuristics of a launch: how many splits a tile's keys get (split-KV) and how the tile order groups its
// (batch, head) pairs into sections. Plain C++, so tests compile it with the system compiler
// (tests/test_split_plan.py); kernel/run_tiles.cuh's make_plan reads it. The tile per head dim and call is
// kernel/tile_choice.h's.
#pragma once
#include <cstdint>

#include "fast_div.h"  // FC_HOST_DEVICE

namespace flashcore {

// The split-KV count. FlashAttention's rule, with a tighter efficiency bar: a grid of `tiles` CTAs that
// fills at least 80 % of the SMs is not split; otherwise take the fewest splits whose wave efficiency (CTAs / (waves * SMs)) is within
// kEfficiencyBar of the best reachable, never more splits than K/V blocks (a split of no block is wasted) nor two
// split counts that give the same blocks per split. FlashAttention's bar is 85 %; measured on the H100 (batch-1 and
// batch-2 GQA decode, Sk 64K), 128 CTAs beat the 112 that 85 % allows by 3-5 %.
// Each split keeps at least kMinBlocksPerSplit K/V blocks: every split reloads Q and writes fp32 partials, and
// splitting odd-grid (105 tiles, 7 blocks each) into 7 one-block splits made it 1.8x slower on the H100.
constexpr int kMaxSplits = 128;
// Deterministic mode plans for this SM count (an H100 SXM's), whatever the GPU has: one plan per shape.
constexpr int kNominalSms = 132;
constexpr double kEfficiencyBar = 0.95;
constexpr int kMinBlocksPerSplit = 4;

inline int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

inline int choose_num_splits(int64_t tiles, int n_blocks, int sms) {
  if (sms < 1 || tiles >= 0.8 * sms || n_blocks <= 1) return 1;
  int max_splits = n_blocks / kMinBlocksPerSplit;
  if (max_splits > kMaxSplits) max_splits = kMaxSplits;
  if (max_splits > sms) max_splits = sms;
  if (max_splits <= 1) return 1;
  auto efficiency = [&](int s) {
    const double waves = static_cast<double>(tiles) * s / sms;
    return waves / ceil_div(tiles * s, sms);
  };
  auto eligible = [&](int s) { return s == 1 || ceil_div(n_blocks, s) != ceil_div(n_blocks, s - 1); };
  double best = 0.0;
  for (int s = 1; s <= max_splits; ++s) {
    if (eligible(s) && efficiency(s) > best) best = efficiency(s);
  }
  for (int s = 1; s <= max_splits; ++s) {
    if (eligible(s) && efficiency(s) >= kEfficiencyBar * best) return s;
  }
  return 1;
}

// Ragged keys (per-sequence lengths: seqused_k, cu_seqlens_k) with one query tile per (batch, head), as in decode:
// the tiles' costs follow the sequences' lengths, which the host does not see, so the last tiles of the dynamic order
// can leave SMs idle. Splitting each tile's keys gives more, smaller tiles whose shares even out: up to
// kRaggedTilesPerSm tiles per SM, at most kMaxRaggedSplits splits, each of at least kMinBlocksPerSplit blocks of the
// longest sequence. Measured on the H100 (B64 Hq32/Hkv8 D128 lengths 1K-8K): 1 split
// 0.919x FA3, 2 0.957x, 4 0.967x; B128 0.933x / 0.966x at 4; B64 Hq32/Hkv32 0.986x / 0.998x.
constexpr int kRaggedTilesPerSm = 16;
constexpr int kMaxRaggedSplits = 4;

inline int choose_ragged_splits(int64_t tiles, int n_blocks, int sms) {
  if (sms < 1 || tiles < 0.8 * sms) return choose_num_splits(tiles, n_blocks, sms);
  int splits = ceil_div(int64_t{kRaggedTilesPerSm} * sms, tiles);
  if (splits > kMaxRaggedSplits) splits = kMaxRaggedSplits;
  if (splits > n_blocks / kMinBlocksPerSplit) splits = n_blocks / kMinBlocksPerSplit;
  return splits > 1 ? splits : 1;
}

// Ragged keys with one query tile per (batch, head), in a dynamic order: the tiles go longest sequence first
// (zero_words.cuh writes the order on the device, tile_scheduler.h reads it), so the launch ends on the shortest
// sequences' tiles instead of wherever the batch order put the long ones: in sequence order an SM that drew a long
// sequence's last split ran on while the others had nothing left (FA3 sorts its varlen batches likewise). Up to
// kOrderMaxBatch sequences, the device sort's shared memory; beyond that they go in order.
constexpr int kOrderMaxBatch = 2048;

inline bool orders_batches(bool dynamic, bool ragged_keys, int m_tiles, int64_t batch) {
  return dynamic && ragged_keys && m_tiles == 1 && batch > 1 && batch <= kOrderMaxBatch;
}

// Sequence b's place in that order of keys[0..n) (its used keys): longer first, equal keys in index order. Any key
// values give each sequence its own rank, so bad index data cannot make the tile list skip or repeat a sequence.
FC_HOST_DEVICE int order_rank(const int* keys, int n, int b) {
  const int key = keys[b];
  int rank = 0;
  for (int j = 0; j < n; ++j) rank += keys[j] > key || (keys[j] == key && j < b);
  return rank;
}

// Sections of the tile order: `big` sections of heads + 1 (batch, head) pairs, then sections of `heads`.
struct Sections {
  int heads;
  int big;
};

// The sections of the tile order. Equal-cost tiles (static order) go one head at a time, query tiles side by side: the CTAs
// in flight then read the K/V of the fewest heads (B4 H16 S8K hdim 128: 6-head sections read 1.07 GB from DRAM,
// FA3's head-by-head order 0.41 GB; S = 2K +4 %). Uneven tiles (dynamic order) go longest-first inside sections
// whose K/V fit the L2 budget, all of one size but for a head: a short last section would end the launch on one
// wave of its tiles, longest included (S = 1K causal with sections of 50 and a last one of 6: SMs idle for 7 % of
// the kernel, ncu sm__cycles_active max vs avg).
inline Sections plan_sections(int64_t bh, int64_t kv_bytes, int64_t l2_budget, bool dynamic) {
  if (!dynamic) return {1, 0};
  int64_t fit = l2_budget / (kv_bytes > 0 ? kv_bytes : 1);
  if (fit < 1) fit = 1;
  const int64_t sections = (bh + fit - 1) / fit;
  return {static_cast<int>(bh / sections), static_cast<int>(bh % sections)};
}

}  // namespace flashcore
