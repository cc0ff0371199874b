// Kernel-side parameters: what the launcher derives from fc_params once, on the host.
#pragma once
#include <cstdint>

#include "fast_div.h"

namespace flashcore {

struct KernelParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // nullptr: not written
  int batch, heads_q, heads_kv, seqlen_q, seqlen_k;
  int group;  // heads_q / heads_kv: query head h reads K/V head h / group
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];  // batch, seq, head (elements)
  float softmax_scale;        // applied to Q K^T
  float softmax_scale_log2;   // softmax_scale * log2(e), for exp2
  int causal;       // keys right of the diagonal are masked: causal, or a window with a right bound
  int diag_offset;  // seqlen_k - seqlen_q: causal row i sees keys j <= i + diag_offset (bottom-right)
  // Serving (kernel/seqlens.h, kernel/mask.h). Sliding window: row i sees keys j in [i + diag - window_left,
  // i + diag + window_right]; window_left -1: no left bound; window_right applies when `causal` (causal: 0).
  int window_left, window_right;
  float softcap_prescale;  // > 0: scores become tanh(s * softcap_prescale) (softmax_scale folded in); 0: off
  // Per-sequence lengths (nullptr: every sequence is seqlen_q x seqlen_k; then seqlen_q/k are the longest).
  const int* cu_seqlens_q;  // [batch + 1]: sequence b's queries are rows [cu[b], cu[b + 1]) of packed q and o
  const int* cu_seqlens_k;  // [batch + 1]: its keys are rows [cu[b], cu[b + 1]) of packed k and v
  const int* seqused_q;     // [batch]: it uses its first seqused_q[b] of those queries (packed only)
  const int* seqused_k;     // [batch]: it uses its first seqused_k[b] keys (a KV cache's per-sequence length)
  const int* kv_batch_idx;  // [batch]: its keys are k/v batch entry kv_batch_idx[b] (the cache's slot)
  const int* leftpad_k;     // [batch]: its keys start leftpad_k[b] rows in (k_off), and k_len excludes them
  int64_t lse_stride[2];    // LSE element strides of batch and head: [B, Hq, Sq], or [Hq, total_q] when packed
  int fault;        // FaultKind, test-only
  // GQA packing (short queries): one tile holds all `group` query heads of a K/V head, tile row
  // r = (head in group) * seqlen_q + query row, so K/V are read once per group instead of once per head.
  int pack_gqa;
  // Split-KV: num_splits > 1 divides each tile's K/V blocks among that many CTAs (blockIdx.x = tile * splits +
  // split), which write fp32 partials: o_accum [split][batch][head_q][row][head_dim] (normalized by their own
  // softmax sum) and lse_accum [split][batch][head_q][row]; combine_splits_kernel adds them in split order.
  int num_splits;
  int64_t accum_rows;  // batch * heads_q * seqlen_q: rows of one split's partials
  float* o_accum;
  float* lse_accum;
  // Persistent scheduling (kernel/tile_scheduler.h): total_tiles = m_tiles * num_splits * grid_heads * batch tiles,
  // taken section_heads + 1 (batch, head) pairs at a time for the first section_big sections, section_heads after;
  // tile_counter (workspace, zeroed per launch) makes the order dynamic, nullptr static.
  int m_tiles;      // query tiles per head (1 when packed)
  int grid_heads;   // heads_q, or heads_kv when packed
  int total_tiles;
  int section_heads;
  int section_big;
  int* tile_counter;
  // Ragged decode (heuristics.h orders_batches): tile batch index i runs sequence batch_order[i], longest first
  // (workspace, written by zero_words_kernel); nullptr: index i is sequence i.
  const int* batch_order;
  // The tile decode's runtime divisors as multiply-shift constants (kernel/fast_div.h; the launcher sets them): the
  // tiles of a section of section_heads + 1 and of section_heads (batch, head) pairs, those two head counts,
  // num_splits, grid_heads and group; the V^T copy's vt_blocks and heads_kv.
  FastDiv div_section_big, div_section, div_heads_big, div_heads, div_splits, div_grid_heads, div_group;
  FastDiv div_vt_blocks, div_heads_kv;
  // Stream-K tail (kernel/stream_tail.h; tail_tiles 0: none, tail_first INT32_MAX): items from tail_first on are
  // pieces of the last tail_tiles tiles (tail_blocks K/V blocks each) cut into tail_pieces runs, item index
  // tail_first + half * tail_stride + piece; total_tiles then counts items. tail_o (workspace): per slot, kBlockM
  // rows of fp32 O partials [row][head_dim], then their LSEs.
  int tail_first, tail_stride, tail_tiles, tail_pieces, tail_blocks;
  float* tail_o;
  FastDiv div_tail_pieces, div_tail_blocks;  // the producer's item decode (kernel/fast_div.h)
  // Paged KV cache (nullptr: none): sequence b's key j is row j % page_size of page page_table[b * stride +
  // j / page_size] of k and v ([pages, page_size, Hkv, D]); the producer loads page_box rows per TMA box
  // (gcd(page_size, BLOCK_N), set by the launcher: a box never crosses a page).
  const int* page_table;
  int64_t page_table_stride;
  int page_size;
  int page_box;
  int head_dim_v;   // columns of v and o (the kernel's head dim may be larger: TMA zero-fills, stores clip)
  // FP8 (E4M3) inputs: descale factors [batch, heads_kv] (fp32, element strides; nullptr: 1). The real q is
  // q * q_descale[b, h / group], likewise k and v. Without kPointVtSmem the kernel reads V from vt, a transposed copy
  // in the workspace that it writes itself (kernel/fp8_vt_fused.cuh: [batch][heads_kv][head_dim][vt_keys]).
  const float* q_descale;
  const float* k_descale;
  const float* v_descale;
  int64_t q_descale_stride[2], k_descale_stride[2], v_descale_stride[2];
  void* vt;
  int64_t vt_keys;
  // V^T written by the kernel (kernel/fp8_vt_fused.cuh): vt_items blocks of kBlockN keys, vt_blocks per (batch, K/V
  // head); vt_ready (workspace, zeroed per launch) [0] the claim counter, [1 + item] set once the block is stored,
  // [1 + vt_items + batch * heads_kv + head] the head's stored blocks (Cfg::kVtHeadCount).
  int* vt_ready;
  int vt_blocks, vt_items;
  // Chunked local attention (FA3's attention_chunk; 0: off): row i sees only the keys of the chunk of i + diag
  // (kernel/mask.h chunk_start), div_chunk its divisor.
  int attention_chunk;
  FastDiv div_chunk;
  // Attention sinks (fc_params.sinks; nullptr: none): [heads_q] fp32 logits, joined once per row after the key loop
  // (softmax.h join_sink in the epilogue; the combine kernels add them as one more part with O = 0).
  const float* sinks;
  // Small pages (kernel/paged_gather.cuh): page_gather 1 copies K/V rows with cp.async instead of TMA boxes;
  // head_dim_k is k's own columns, div_page divides by page_size. kv_pages bounds the page ids of either path: one
  // outside reads no memory and is recorded in errors (below).
  int page_gather;
  int kv_pages;
  int head_dim_k;
  FastDiv div_page;
  // Bad index data (kernel/index_errors.h, kernel/seqlens.h): the error word (nullptr: nothing recorded) and the
  // bounds each index value is checked against where it is read: packed rows, cache slots, and the keys a sequence's
  // cache holds (contiguous: its seqlen_k; paged: the row of page_table x page_size); page ids against kv_pages.
  int64_t* errors;
  int total_q, total_k, kv_slots, kv_capacity;
};

// The two rows a thread holds in its fragments (g and g+8 of its 16-row slab): query head, query row,
// and whether the row exists (padding rows of a tile are computed but never stored).
struct ThreadRows {
  int head[2];
  int row[2];
  bool valid[2];
};

}  // namespace flashcore
