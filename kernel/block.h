// Block bounds: the K/V blocks a query tile runs and which of them need the mask (causal diagonal, window edges,
// ragged lengths). The producer computes them once per tile and hands them to the consumers in the tile slot
// (kernel/tile_scheduler.h TileInfo).
#pragma once
#include "mask.h"
#include "params.h"
#include "seqlens.h"

namespace flashcore {

// The K/V blocks [n_begin, n_begin + n_blocks) of query tile m_block (split `split`): every block its rows can see
// (causal: up to the diagonal; a left window bound: from the first row's window), or its split's even share of them
// (possibly none).
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
__device__ __forceinline__ bool tile_has_rows(const KernelParams& p, int m_block, const SeqLens& seq) {
  return p.pack_gqa ? seq.q_len > 0 : m_block * kBlockM < seq.q_len;
}

// kLocal: rows may have a left bound (kernel/mask.h); without, every range starts at key 0.
template <int kBlockM, int kBlockN, bool kSplit, bool kLocal>
__device__ __forceinline__ KvRange kv_range(const KernelParams& p, int m_block, int split, int batch,
                                            const SeqLens& seq) {
  KvRange r;
  r.row_first = p.pack_gqa ? 0 : m_block * kBlockM;
  const int row_last = r.row_first + (p.pack_gqa ? seq.q_len : kBlockM) - 1;
  const SeqMask m = seq_mask(seq.q_len, seq.k_len, batch);
  const int key_end = visible_key_end<kLocal>(p, m, row_last);  // (the tail fault widens it: its key is masked anyway)
  const int n_lo = visible_key_begin<kLocal>(p, m, r.row_first) / kBlockN;
  const int n_total = max(0, (key_end + kBlockN - 1) / kBlockN - n_lo);
  if constexpr (kSplit) {
    // 32-bit unsigned: split < 128 and n_total < 2^25 keep the product below 2^32.
    r.n_begin = n_lo + static_cast<int>(static_cast<unsigned>(split) * n_total / p.num_splits);
    r.n_blocks = n_lo + static_cast<int>(static_cast<unsigned>(split + 1) * n_total / p.num_splits) - r.n_begin;
  } else {
    r.n_begin = n_lo;
    r.n_blocks = n_total;
  }
  // Unmasked: keys from the last row's window start (rounded up to a block) below the first row's limit.
  const int u_begin = (visible_key_begin<kLocal>(p, m, row_last) + kBlockN - 1) / kBlockN;
  const int u_end = unmasked_key_limit<kLocal>(p, m, r.row_first) / kBlockN;
  r.um_begin = min(max(u_begin - r.n_begin, 0), r.n_blocks);
  r.um_end = max(min(u_end - r.n_begin, r.n_blocks), r.um_begin);
  return r;
}

}  // namespace flashcore
