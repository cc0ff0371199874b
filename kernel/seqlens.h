// Where one sequence of a call lives: its query and key rows, for dense batches (every sequence seqlen_q x
// seqlen_k, no memory read) and for the serving layouts (packed varlen rows and their used counts, per-sequence
// KV-cache lengths, a cache slot per sequence). The producer reads the arrays once per tile and hands q_len, k_len
// and q_off to the consumers with the tile (tile_scheduler.h TileInfo); a paged cache's left pad is the masks'
// (kernel/mask.h key_floor).
#pragma once
#include "params.h"

namespace flashcore {

struct SeqLens {
  int q_off;     // first query row in q/o's sequence dim (packed: cu_seqlens_q[b]; else 0)
  int q_len;     // query rows of the sequence
  int k_off;     // first key row in k/v's sequence dim (packed: cu_seqlens_k[b]; else 0)
  int k_len;     // keys the sequence attends to
  int kv_batch;  // k/v batch coordinate (packed: 0; else kv_batch_idx[b] or b)
};

// kPaged: the paged producer's (kernel/hopper_mainloop.h), which the kernel runs exactly when p.page_table is set.
template <bool kPaged>
__device__ __forceinline__ SeqLens seq_lens(const KernelParams& p, int batch) {
  SeqLens s{0, p.seqlen_q, 0, p.seqlen_k, batch};
  if (p.cu_seqlens_q != nullptr) {
    s.q_off = __ldg(p.cu_seqlens_q + batch);
    // A used count replaces the length everywhere (tile rows, masks, the bottom-right diagonal), as in FA3.
    s.q_len = p.seqused_q != nullptr ? __ldg(p.seqused_q + batch) : __ldg(p.cu_seqlens_q + batch + 1) - s.q_off;
  }
  if (p.cu_seqlens_k != nullptr) {
    s.k_off = __ldg(p.cu_seqlens_k + batch);
    s.k_len = __ldg(p.cu_seqlens_k + batch + 1) - s.k_off;
    s.kv_batch = 0;
  } else if (p.kv_batch_idx != nullptr) {
    s.kv_batch = __ldg(p.kv_batch_idx + batch);
  }
  if (p.seqused_k != nullptr) s.k_len = __ldg(p.seqused_k + batch);
  // A left-padded cache: rows [leftpad, seqused_k) hold the keys (FA3's). Paged, they stay at their positions (the
  // page walk keeps its page-aligned boxes) and the masks drop rows [0, leftpad) (kernel/mask.h key_floor).
  if (!kPaged && p.leftpad_k != nullptr) {
    const int pad = __ldg(p.leftpad_k + batch);
    s.k_off += pad;
    s.k_len -= pad;
  }
  return s;
}

// The batch coordinate of q and o in their tensor maps (packed rows: one batch entry).
__device__ __forceinline__ int q_batch_coord(const KernelParams& p, int batch) {
  return p.cu_seqlens_q != nullptr ? 0 : batch;
}

}  // namespace flashcore
