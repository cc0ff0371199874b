// Score masking shared by every kernel version. Key j of a sequence with q_len queries and k_len keys is visible
// to query row i iff
//   j < k_len,  j <= i + diag + window_right (when p.causal: causal, window_right 0, or a right window bound),
//   j >= i + diag - window_left (when window_left >= 0),   with diag = k_len - q_len (bottom-right alignment);
// other scores get -inf. Fragment layout: s[nt][e] holds row g + 8*(e/2), column 8*nt + 2*(lane%4) + e%2 of a
// 16-row slab (mma.sync C fragments and wgmma accumulators share it).
#pragma once
#include <cmath>

#include "common.h"
#include "params.h"

namespace flashcore {

// The key extent of one sequence: what the mask needs besides the call's window.
struct SeqMask {
  int k_len;
  int diag;  // k_len - q_len
};

__device__ __forceinline__ SeqMask seq_mask(int q_len, int k_len) { return SeqMask{k_len, k_len - q_len}; }

// One past the last key that exists (widened by one under the planted tail-mask fault).
__device__ __forceinline__ int key_end(const KernelParams& p, const SeqMask& m) {
  return p.fault == kFaultTailMaskOffByOne ? m.k_len + 1 : m.k_len;
}

// `rows.row` are the query indices of the thread's two fragment rows; `key0` the block's first key.
// Row i sees keys [lo(i), hi(i)]: a score costs a compare of its compile-time column offset against hi(i) minus this
// thread's first column and a select; a left window bound adds a compare against lo(i).
// kLive: the tiles past it are not read again (a narrow last block), so they take no mask.
template <int kNTiles, int kLive = kNTiles>
__device__ __forceinline__ void mask_scores(float (&s)[kNTiles][4], const KernelParams& p, const SeqMask& m,
                                            const ThreadRows& rows, int key0, int lane) {
  const int end = key_end(p, m);
  const int first_col = key0 + 2 * (lane % 4);
  int hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int limit = p.causal ? min(end - 1, rows.row[r] + m.diag + p.window_right) : end - 1;
    hi[r] = limit - first_col;
  }
  if (p.window_left < 0) {  // no left bound: one compare per score (causal and tail blocks of dense calls)
#pragma unroll
    for (int nt = 0; nt < kLive; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (nt * 8 + (e % 2) > hi[e / 2]) s[nt][e] = -INFINITY;
      }
    }
    return;
  }
  int lo[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) lo[r] = rows.row[r] + m.diag - p.window_left - first_col;
#pragma unroll
  for (int nt = 0; nt < kLive; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = nt * 8 + (e % 2);
      if (col > hi[e / 2] || col < lo[e / 2]) s[nt][e] = -INFINITY;
    }
  }
}

// One past the last key that any query row <= last_row sees (widened by the planted tail fault, as mask_scores is).
__device__ __forceinline__ int visible_key_end(const KernelParams& p, const SeqMask& m, int last_row) {
  const int end = key_end(p, m);
  return p.causal ? min(end, max(0, last_row + m.diag + p.window_right + 1)) : end;
}

// The first key that the query row `row` sees (0 without a left window bound).
__device__ __forceinline__ int visible_key_begin(const KernelParams& p, const SeqMask& m, int row) {
  return p.window_left >= 0 ? max(0, row + m.diag - p.window_left) : 0;
}

// Keys below this limit are visible (from the right) to every row of a tile whose first query row is row_first;
// 0 under the planted tail-mask fault, which masks every block.
__device__ __forceinline__ int unmasked_key_limit(const KernelParams& p, const SeqMask& m, int row_first) {
  if (p.fault == kFaultTailMaskOffByOne) return 0;
  return p.causal ? min(m.k_len, max(0, row_first + m.diag + p.window_right + 1)) : m.k_len;
}

}  // namespace flashcore
