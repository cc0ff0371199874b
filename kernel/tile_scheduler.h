// Persistent tile scheduler: one CTA per SM walks a linear list of tiles (query tile x split x head x batch).
//   order  : (batch, head) pairs are taken `section_heads` at a time, so the K/V that the tiles in flight read stay
//            in L2; inside a section the query tiles go longest-first (highest m_block first: under causal masking
//            it has the most keys), the splits of one query tile side by side.
//   fetch  : static (tile += gridDim.x) when every tile costs the same; dynamic (an atomic counter in the
//            workspace, zeroed before the launch) under causal masking, so an SM that drew short tiles takes more.
// The producer thread fetches; the consumers read the index it stores next to Q (kernel_wgmma.cuh).
#pragma once
#include "config.h"
#include "params.h"

namespace flashcore {

struct TileCoord {
  int m_block;  // query tile (0 when GQA heads are packed)
  int head;     // query head, or the K/V head when GQA heads are packed
  int batch;
  int split;    // K/V split (0 without split-KV)
};

__device__ __forceinline__ TileCoord tile_coord(const KernelParams& p, int tile) {
  const int tiles_per_head = p.m_tiles * p.num_splits;
  const int per_section = p.section_heads * tiles_per_head;
  const int section = tile / per_section;
  const int in_section = tile - section * per_section;
  const int head_first = section * p.section_heads;
  const int heads_here = min(p.section_heads, p.batch * p.grid_heads - head_first);  // the last section may be short
  const int rank = in_section / heads_here;  // longest-first rank of the (query tile, split) inside its head
  const int bh = head_first + (in_section - rank * heads_here);
  TileCoord c;
  c.m_block = p.m_tiles - 1 - rank / p.num_splits;
  c.split = rank % p.num_splits;
  c.head = bh % p.grid_heads;
  c.batch = bh / p.grid_heads;
  return c;
}

// The tile index the producer hands over next to Q (kQFull's arrive releases it, the consumers' wait acquires it).
__device__ __forceinline__ void store_tile_slot(int* slot, int tile) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(slot))), "r"(tile)
               : "memory");
}
__device__ __forceinline__ int load_tile_slot(const int* slot) {
  int tile;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(tile) : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(slot)))
               : "memory");
  return tile;
}

__device__ __forceinline__ int first_tile() { return static_cast<int>(blockIdx.x); }

// Called by the producer thread only, once per tile; the k-th dynamic fetch of the launch returns gridDim.x + k.
__device__ __forceinline__ int next_tile(const KernelParams& p, int tile) {
  if (p.tile_counter != nullptr) return static_cast<int>(gridDim.x) + atomicAdd(p.tile_counter, 1);
  return tile + static_cast<int>(gridDim.x);
}

// The K/V blocks [n_begin, n_begin + n_blocks) of a tile: every block its rows can see (causal: up to the
// diagonal), or its split's even share of them (possibly none).
struct KvRange {
  int row_first;   // first query row of the tile (0 when packed)
  int n_begin;
  int n_blocks;
  int n_unmasked;  // blocks [0, n_unmasked) of the range need no mask: every key < seqlen_k and visible to every row
};

template <int kBlockM, int kBlockN, bool kSplit>
__device__ __forceinline__ KvRange kv_range(const KernelParams& p, const TileCoord& c) {
  KvRange r;
  r.row_first = p.pack_gqa ? 0 : c.m_block * kBlockM;
  const int row_span = p.pack_gqa ? p.seqlen_q : kBlockM;
  int key_end = p.seqlen_k;
  if (p.causal) key_end = min(key_end, max(0, r.row_first + row_span + p.diag_offset));
  const int n_total = (key_end + kBlockN - 1) / kBlockN;
  if constexpr (kSplit) {
    r.n_begin = static_cast<int>(static_cast<int64_t>(c.split) * n_total / p.num_splits);
    r.n_blocks = static_cast<int>(static_cast<int64_t>(c.split + 1) * n_total / p.num_splits) - r.n_begin;
  } else {
    r.n_begin = 0;
    r.n_blocks = n_total;
  }
  // Keys below key_limit are visible to every row of the tile (causal: the first row sees keys <= row + offset);
  // the planted tail-mask fault takes the masked path everywhere, as block_needs_mask says.
  int key_limit = p.seqlen_k;
  if (p.causal) key_limit = min(key_limit, max(0, r.row_first + p.diag_offset + 1));
  if (p.fault == kFaultTailMaskOffByOne) key_limit = 0;
  r.n_unmasked = min(max(key_limit / kBlockN - r.n_begin, 0), r.n_blocks);
  return r;
}

}  // namespace flashcore
