// Score masking shared by every kernel version: tail keys (>= seqlen_k) and, causal, keys past the
// bottom-right diagonal get -inf. Fragment layout: s[nt][e] holds row g + 8*(e/2), column 8*nt + 2*(lane%4) + e%2
// of a 16-row slab (mma.sync C fragments and wgmma accumulators share it).
#pragma once
#include <cmath>

#include "config.h"
#include "params.h"

namespace flashcore {

// `rows.row` are the query indices of the thread's two fragment rows; `key0` the block's first key.
template <int kNTiles>
__device__ __forceinline__ void mask_scores(float (&s)[kNTiles][4], const KernelParams& p, const ThreadRows& rows,
                                            int key0, int lane) {
  const int key_end = p.fault == kFaultTailMaskOffByOne ? p.seqlen_k + 1 : p.seqlen_k;
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + nt * 8 + 2 * (lane % 4) + (e % 2);
      const int row = rows.row[e / 2];
      const bool hidden = key >= key_end || (p.causal && key > row + p.diag_offset);
      if (hidden) s[nt][e] = -INFINITY;
    }
  }
}

// Whether any score of the block [key0, key0 + block_n) x query rows [row_first, ...) needs masking.
__device__ __forceinline__ bool block_needs_mask(const KernelParams& p, int key0, int block_n, int row_first) {
  const bool tail = key0 + block_n > p.seqlen_k;
  const bool diagonal = p.causal && key0 + block_n - 1 > row_first + p.diag_offset;
  return tail || diagonal || p.fault == kFaultTailMaskOffByOne;
}

}  // namespace flashcore
