// Score masking shared by every kernel version: tail keys (>= seqlen_k) and, causal, keys past the
// bottom-right diagonal get -inf. Fragment layout: s[nt][e] holds row g + 8*(e/2), column 8*nt + 2*(lane%4) + e%2
// of a 16-row slab (mma.sync C fragments and wgmma accumulators share it).
#pragma once
#include <cmath>

#include "config.h"
#include "params.h"

namespace flashcore {

// `rows.row` are the query indices of the thread's two fragment rows; `key0` the block's first key.
// Key j is visible to row i iff j <= limit(i) = min(seqlen_k - 1, causal ? i + diag_offset : inf), so each score
// costs one compare of a compile-time column offset against limit(i) - (this thread's first column), and a select.
template <int kNTiles>
__device__ __forceinline__ void mask_scores(float (&s)[kNTiles][4], const KernelParams& p, const ThreadRows& rows,
                                            int key0, int lane) {
  const int key_end = p.fault == kFaultTailMaskOffByOne ? p.seqlen_k + 1 : p.seqlen_k;
  const int first_col = key0 + 2 * (lane % 4);
  int threshold[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int limit = p.causal ? min(key_end - 1, rows.row[r] + p.diag_offset) : key_end - 1;
    threshold[r] = limit - first_col;
  }
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (nt * 8 + (e % 2) > threshold[e / 2]) s[nt][e] = -INFINITY;
    }
  }
}

// One past the last key that any query row <= last_row sees (widened by the planted tail fault, as mask_scores is).
__device__ __forceinline__ int visible_key_end(const KernelParams& p, int last_row) {
  const int key_end = p.fault == kFaultTailMaskOffByOne ? p.seqlen_k + 1 : p.seqlen_k;
  return p.causal ? min(key_end, last_row + p.diag_offset + 1) : key_end;
}

// Keys below this limit are visible to every row of a tile whose first query row is row_first (causal: the first
// row sees keys <= row_first + diag_offset); 0 under the planted tail-mask fault, which masks every block.
__device__ __forceinline__ int unmasked_key_limit(const KernelParams& p, int row_first) {
  if (p.fault == kFaultTailMaskOffByOne) return 0;
  return p.causal ? min(p.seqlen_k, max(0, row_first + p.diag_offset + 1)) : p.seqlen_k;
}

// Whether any score of the block [key0, key0 + block_n) x query rows [row_first, ...) needs masking.
__device__ __forceinline__ bool block_needs_mask(const KernelParams& p, int key0, int block_n, int row_first) {
  return key0 + block_n > unmasked_key_limit(p, row_first);
}

}  // namespace flashcore
