// The tile scheduler: which tiles a launch has, in which order, and how the persistent CTAs take them.
// Host half (plain C++, so tests compile it with the system compiler): the split-KV count and the sections of the
// tile order, which kernel/run_tiles.cuh's make_plan reads. Device half (nvcc only): a tile's coordinates, its K/V
// range, the next tile's fetch, the hand-over from producer to consumers.
//
// Persistent: one CTA per SM walks a linear list of tiles (query tile x split x head x batch).
//   order  : (batch, head) pairs are taken a section at a time (section_big sections of section_heads + 1, then
//            sections of section_heads; plan_sections below), so the K/V that the tiles in flight read
//            stay in L2; inside a section the query tiles go longest-first (highest m_block first: under causal
//            masking it has the most keys), the splits of one query tile side by side.
//   fetch  : static (tile += gridDim.x) when every tile costs the same; dynamic (an atomic counter in the
//            workspace, zeroed before the launch) under causal masking, so an SM that drew short tiles takes more.
// The producer thread fetches; the consumers read the index it stores next to Q (kernel_wgmma.cuh).
#pragma once
#include <cstdint>

namespace flashcore {

// ---------------------------------------------------------------------------------------------
// Host: the split-KV count. FlashAttention's rule, with a tighter efficiency bar: a grid of `tiles` CTAs that
// fills at least 80 % of the SMs is not split; otherwise take the fewest splits whose wave efficiency (CTAs / (waves * SMs)) is within
// kEfficiencyBar of the best reachable, never more splits than K/V blocks (a split of no block is wasted) nor two
// split counts that give the same blocks per split. FlashAttention's bar is 85 %; measured on the H100 (batch-1 and
// batch-2 GQA decode, Sk 64K), 128 CTAs beat the 112 that 85 % allows by 3-5 % (docs/perf-notes.md step 3.11).
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
// longest sequence. Measured on the H100 (docs/perf-notes.md step 7.1, B64 Hq32/Hkv8 D128 lengths 1K-8K): 1 split
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

// ---------------------------------------------------------------------------------------------
// Host: the sections of the tile order.
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

#ifdef __CUDACC__
#include "common.h"
#include "mask.h"
#include "params.h"
#include "seqlens.h"

namespace flashcore {

// ---------------------------------------------------------------------------------------------
// Device: the tile order and its fetch.

struct TileCoord {
  int m_block;  // query tile (0 when GQA heads are packed)
  int head;     // query head, or the K/V head when GQA heads are packed
  int batch;
  int split;    // K/V split (0 without split-KV)
};

// The K/V head tile `c` reads.
__device__ __forceinline__ int kv_head(const KernelParams& p, const TileCoord& c) {
  return p.pack_gqa ? c.head : p.div_group(c.head);
}

// Packed GQA: row `tile_row` of a tile of K/V head `kv_head` is query row `row` of query head `head` (the tile's rows
// run through the group's heads, seqlen_q rows each; rows from p.group * p.seqlen_q on do not exist).
struct PackedRow {
  int head, row;
};
__device__ __forceinline__ PackedRow packed_row(const KernelParams& p, int kv_head, int tile_row) {
  return PackedRow{kv_head * p.group + tile_row / p.seqlen_q, tile_row % p.seqlen_q};
}

// FP8 descale factors ([batch, K/V head] fp32 with strides; nullptr: 1) of tile `c`'s batch and K/V head.
__device__ __forceinline__ float descale(const float* f, const int64_t (&stride)[2], const KernelParams& p,
                                         const TileCoord& c) {
  return f == nullptr ? 1.f : __ldg(f + c.batch * stride[0] + kv_head(p, c) * stride[1]);
}
__device__ __forceinline__ float qk_descale(const KernelParams& p, const TileCoord& c) {
  return descale(p.q_descale, p.q_descale_stride, p, c) * descale(p.k_descale, p.k_descale_stride, p, c);
}

// (batch, head) pair and rank of offset t in a section of `heads` pairs, the section's first pair being `base`.
__device__ __forceinline__ void section_coord(int t, int heads, int per_section, int base, const FastDiv& div_section,
                                              const FastDiv& div_heads, int& bh, int& rank) {
  const int section = div_section(t);
  const int in_section = t - section * per_section;
  rank = div_heads(in_section);  // longest-first rank of the (query tile, split) inside its head
  bh = base + section * heads + (in_section - rank * heads);
}

__device__ __forceinline__ TileCoord tile_coord(const KernelParams& p, int tile) {
  const int tiles_per_head = p.m_tiles * p.num_splits;
  const int big_heads = p.section_big * (p.section_heads + 1);  // the sections of one more head come first
  const int big_tiles = big_heads * tiles_per_head;
  // Divisions by multiply-shift constants (kernel/fast_div.h): no MUFU work on the producer's path to the Q load.
  // Each branch reads its own constants (a select of the two sets made the 24-register producers spill).
  int bh, rank;
  if (tile < big_tiles) {
    section_coord(tile, p.section_heads + 1, (p.section_heads + 1) * tiles_per_head, 0, p.div_section_big,
                  p.div_heads_big, bh, rank);
  } else {
    section_coord(tile - big_tiles, p.section_heads, p.section_heads * tiles_per_head, big_heads, p.div_section,
                  p.div_heads, bh, rank);
  }
  const int m_rank = p.div_splits(rank);
  TileCoord c;
  c.m_block = p.m_tiles - 1 - m_rank;
  c.split = rank - m_rank * p.num_splits;
  c.batch = p.div_grid_heads(bh);
  c.head = bh - c.batch * p.grid_heads;
  return c;
}

__device__ __forceinline__ int first_tile() { return static_cast<int>(blockIdx.x); }

// Called by the producer thread only, once per tile; the k-th dynamic fetch of the launch returns gridDim.x + k.
__device__ __forceinline__ int next_tile(const KernelParams& p, int tile) {
  if (p.tile_counter != nullptr) return static_cast<int>(gridDim.x) + atomicAdd(p.tile_counter, 1);
  return tile + static_cast<int>(gridDim.x);
}

// The K/V blocks [n_begin, n_begin + n_blocks) of a tile: every block its rows can see (causal: up to the
// diagonal; a left window bound: from the first row's window), or its split's even share of them (possibly none).
struct KvRange {
  int row_first;  // first query row of the tile (0 when packed)
  int n_begin;
  int n_blocks;
  // Blocks [um_begin, um_end) of the range need no mask: every key < k_len and visible to every row of the tile;
  // the blocks before um_begin (left window edge) and from um_end on (diagonal, tail) are masked.
  int um_begin;
  int um_end;
};

// Whether tile c has query rows at all: a packed (varlen) batch has no rows past a short sequence's end, and the
// tile list holds the longest sequence's query tiles for every sequence.
template <int kBlockM>
__device__ __forceinline__ bool tile_has_rows(const KernelParams& p, const TileCoord& c, const SeqLens& seq) {
  return p.pack_gqa ? seq.q_len > 0 : c.m_block * kBlockM < seq.q_len;
}

template <int kBlockM, int kBlockN, bool kSplit>
__device__ __forceinline__ KvRange kv_range(const KernelParams& p, const TileCoord& c, const SeqLens& seq) {
  KvRange r;
  r.row_first = p.pack_gqa ? 0 : c.m_block * kBlockM;
  const int row_last = r.row_first + (p.pack_gqa ? seq.q_len : kBlockM) - 1;
  const SeqMask m = seq_mask(seq.q_len, seq.k_len);
  const int key_end = visible_key_end(p, m, row_last);  // (the tail fault widens it: its key is masked anyway)
  const int n_lo = visible_key_begin(p, m, r.row_first) / kBlockN;
  const int n_total = max(0, (key_end + kBlockN - 1) / kBlockN - n_lo);
  if constexpr (kSplit) {
    // 32-bit unsigned: split < 128 and n_total < 2^25 keep the product below 2^32.
    r.n_begin = n_lo + static_cast<int>(static_cast<unsigned>(c.split) * n_total / p.num_splits);
    r.n_blocks = n_lo + static_cast<int>(static_cast<unsigned>(c.split + 1) * n_total / p.num_splits) - r.n_begin;
  } else {
    r.n_begin = n_lo;
    r.n_blocks = n_total;
  }
  // Unmasked: keys from the last row's window start (rounded up to a block) below the first row's limit.
  const int u_begin = (visible_key_begin(p, m, row_last) + kBlockN - 1) / kBlockN;
  const int u_end = unmasked_key_limit(p, m, r.row_first) / kBlockN;
  r.um_begin = min(max(u_begin - r.n_begin, 0), r.n_blocks);
  r.um_end = max(min(u_end - r.n_begin, r.n_blocks), r.um_begin);
  return r;
}

// What the producer hands the consumers with each tile (kQFull's arrive releases it, their wait acquires it): the
// decoded tile and its sequence's extent, so the consumers never divide by runtime values nor read the length
// arrays (three decodes per tile cost ~150-200 instructions per thread, against ~500 per K/V block). tile < 0: no
// tile is left. Stored as three 16-byte vectors (row_first is recomputed), in slot k % 2 for the CTA's k-th tile:
// the producer writes slot k % 2 again only for tile k + 2, after every consumer released tile k + 1's Q, so the
// consumers may read their slot until the end of tile k's epilogue.
struct TileInfo {
  int tile;
  TileCoord coord;
  KvRange kv;
  int q_len, k_len, q_off;
};
constexpr int kTileInfoBytes = 48;

// `slots`: the two kTileInfoBytes slots (16-byte aligned); `k`: the CTA's tile count, which picks slot k % 2.
__device__ __forceinline__ void store_tile_info(void* slots, int k, const TileInfo& t) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(slots)) + (k & 1) * kTileInfoBytes;
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(t.tile), "r"(t.coord.m_block),
               "r"(t.coord.head), "r"(t.coord.batch)
               : "memory");
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr + 16), "r"(t.coord.split), "r"(t.kv.n_begin),
               "r"(t.kv.n_blocks), "r"(t.kv.um_end)
               : "memory");
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr + 32), "r"(t.kv.um_begin), "r"(t.q_len),
               "r"(t.k_len), "r"(t.q_off)
               : "memory");
}

// FP8 (Fp8Choice kDescalesProducer): the tile's q_descale x k_descale and v_descale, loaded by the producer thread
// when it reaches the tile and stored in an 8-byte slot per TileInfo slot, after both (hopper_config.h
// kTileSlotBytes); kQFull's arrive releases them with the tile info.
__device__ __forceinline__ uint32_t descale_slot(const void* slots, int k) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(slots)) + 2 * kTileInfoBytes + (k & 1) * 8;
}
__device__ __forceinline__ void store_descales(void* slots, int k, float qk, float v) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(descale_slot(slots, k)), "f"(qk), "f"(v) : "memory");
}
__device__ __forceinline__ void load_descales(const void* slots, int k, float& qk, float& v) {
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(qk), "=f"(v) : "r"(descale_slot(slots, k)) : "memory");
}

__device__ __forceinline__ TileInfo load_tile_info(const void* slots, int k, int block_m) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(slots)) + (k & 1) * kTileInfoBytes;
  TileInfo t;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(t.tile), "=r"(t.coord.m_block), "=r"(t.coord.head), "=r"(t.coord.batch)
               : "r"(addr)
               : "memory");
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(t.coord.split), "=r"(t.kv.n_begin), "=r"(t.kv.n_blocks), "=r"(t.kv.um_end)
               : "r"(addr + 16)
               : "memory");
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(t.kv.um_begin), "=r"(t.q_len), "=r"(t.k_len), "=r"(t.q_off)
               : "r"(addr + 32)
               : "memory");
  t.kv.row_first = t.coord.m_block * block_m;  // packed tiles have m_block 0
  return t;
}

}  // namespace flashcore
#endif  // __CUDACC__
