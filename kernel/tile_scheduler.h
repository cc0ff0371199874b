// The tile scheduler: which tiles a launch has, in which order, and how the persistent CTAs take them (device code;
// the host's split count and section size are kernel/heuristics.h's).
//
// Persistent: one CTA per SM walks a linear list of tiles (query tile x split x head x batch).
//   order  : (batch, head) pairs are taken a section at a time (section_big sections of section_heads + 1, then
//            sections of section_heads; heuristics.h plan_sections), so the K/V that the tiles in flight read
//            stay in L2; inside a section the query tiles go longest-first (highest m_block first: under causal
//            masking it has the most keys), the splits of one query tile side by side. Ragged decode takes its
//            sequences longest first (KernelParams::batch_order).
//   fetch  : static (tile += gridDim.x) when every tile costs the same; dynamic (an atomic counter in the
//            workspace, zeroed before the launch) under causal masking, so an SM that drew short tiles takes more.
//   hand-over: the producer thread fetches and decodes each tile; the consumers read it from the slot it stores
//            next to Q (TileInfo below; kernel_wgmma.cuh).
#pragma once
#include <cstdint>

#include "block.h"
#include "common.h"
#include "params.h"

namespace flashcore {

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

// (batch, head) pair and rank of offset t in a section of `heads` pairs, the section's first pair being `base`.
__device__ __forceinline__ void section_coord(int t, int heads, int per_section, int base, const FastDiv& div_section,
                                              const FastDiv& div_heads, int& bh, int& rank) {
  const int section = div_section(t);
  const int in_section = t - section * per_section;
  rank = div_heads(in_section);  // longest-first rank of the (query tile, split) inside its head
  bh = base + section * heads + (in_section - rank * heads);
}

// kOrder: whether the kernel reads batch_order (16-bit kernels; the FP8 kernels' 24-register producers spilled past
// the build gate's allowance with the load, and their plans never order).
template <bool kOrder>
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
  // A plain load: the order was written by the grid this launch follows (griddepcontrol.wait before any decode).
  if (kOrder && p.batch_order != nullptr) c.batch = p.batch_order[c.batch];
  return c;
}

__device__ __forceinline__ int first_tile() { return static_cast<int>(blockIdx.x); }

// Called by the producer thread only, once per tile; the k-th dynamic fetch of the launch returns gridDim.x + k.
__device__ __forceinline__ int next_tile(const KernelParams& p, int tile) {
  if (p.tile_counter != nullptr) return static_cast<int>(gridDim.x) + atomicAdd(p.tile_counter, 1);
  return tile + static_cast<int>(gridDim.x);
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

// Bad index data found after the tile's slot was written (a page id, kernel/seqlens.h): its k_len becomes `k_len`
// (< 0), which the consumers read again for the epilogue.
__device__ __forceinline__ void mark_tile_bad(void* slots, int k, int k_len) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(slots)) + (k & 1) * kTileInfoBytes;
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr + 40), "r"(k_len) : "memory");
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
