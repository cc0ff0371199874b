// Split-KV combine: O = sum_s exp(lse_s - lse) O_s with lse = log sum_s exp(lse_s), over the splits in index
// order. One warp per output row; the warp reductions are xor butterflies, whose float sums come out identical
// in every lane and every run, so the result depends only on the split count, never on scheduling.
#pragma once
#include <cuda_runtime.h>

#include <cmath>

#include "element.h"
#include "grid_dependency.h"
#include "params.h"
#include "softmax.h"

namespace flashcore {

constexpr int kCombineWarps = 4;  // rows per 128-thread block

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int m = 16; m > 0; m /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, m));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int m = 16; m > 0; m /= 2) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

// Adds one output row's `parts` fp32 partial rows (O at o_of(s), normalized by its own sum; its LSE lse_of(s)) in
// part order and writes it to o_row_of() (the first head_dim_v columns, 16-bit); returns the row's LSE. One warp.
// sink (-inf: none) is the row's attention sink: one more part with LSE = sink and O = 0, so the parts stay
// sink-free and it joins once per row (a row no part saw: O = 0, LSE = sink).
template <int kHeadDim, typename Element, typename LseOf, typename OOf, typename RowOf>
__device__ __forceinline__ float combine_row(int parts, LseOf lse_of, OOf o_of, RowOf o_row_of, int head_dim_v,
                                             int lane, float sink) {
  float lse_max = -INFINITY;
  bool nan = false;  // a part of a sequence with bad index data (kernel/seqlens.h): the row stays NaN
  for (int s = lane; s < parts; s += 32) {
    const float x = lse_of(s);
    lse_max = fmaxf(lse_max, x);
    nan |= x != x;
  }
  lse_max = __any_sync(0xffffffffu, nan) ? __int_as_float(0x7fc00000) : fmaxf(warp_max(lse_max), sink);
  const bool empty = lse_max == -INFINITY;  // no part saw a key and no sink: O = 0, LSE = -inf (flashcore.h)
  float sum = 0.f;
  if (!empty) {
    for (int s = lane; s < parts; s += 32) sum += expf(lse_of(s) - lse_max);
  }
  sum = warp_sum(sum);
  if (!empty) sum += expf(sink - lse_max);  // after the butterfly: the same value in every lane, added once
  const float lse = empty ? -INFINITY : lse_max + logf(sum);

  // float2 columns per lane: lane's pair j is columns 2 (32 j + lane) + {0,1}, those below kHeadDim (hdim 96: the
  // second pair of lanes 16..31 lies past the row).
  constexpr int kPairs = (kHeadDim + 63) / 64;
  float2 acc[kPairs];
#pragma unroll
  for (int j = 0; j < kPairs; ++j) acc[j] = make_float2(0.f, 0.f);
  for (int s = 0; s < parts; ++s) {
    const float w = empty ? 0.f : expf(lse_of(s) - lse);
    const float2* o_s = reinterpret_cast<const float2*>(o_of(s));
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      if (kHeadDim % 64 != 0 && 2 * (32 * j + lane) >= kHeadDim) continue;
      const float2 x = o_s[32 * j + lane];
      acc[j].x += w * x.x;
      acc[j].y += w * x.y;
    }
  }
  uint16_t* o_row = o_row_of();
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int col = 2 * (32 * j + lane);
    if (col < head_dim_v) *reinterpret_cast<uint32_t*>(o_row + col) = Element::pack(acc[j].x, acc[j].y);
  }
  return lse;
}

// Partial row `row` is (batch, head, query row) of [batch][heads_q][seqlen_q]; packed queries (cu_seqlens_q) put
// sequence b's query row r at packed row cu_seqlens_q[b] + r of o and of the LSE's [Hq, total_q], and rows past the
// sequence's queries (seqlen_q is the longest) were never computed: no write.
template <int kHeadDim, typename Element>
__global__ void __launch_bounds__(32 * kCombineWarps) combine_splits_kernel(const __grid_constant__ KernelParams p) {
  grid_dependency_wait();  // the partials of the attention kernel this launch follows (kernel/grid_dependency.h)
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kCombineWarps + threadIdx.x / 32;
  if (row >= p.accum_rows) return;
  const int q_row = static_cast<int>(row % p.seqlen_q);
  const int64_t bh = row / p.seqlen_q;
  const int head = static_cast<int>(bh % p.heads_q);
  const int batch = static_cast<int>(bh / p.heads_q);
  int q_off = 0;
  if (p.cu_seqlens_q != nullptr) {  // packed: o_stride[0] and lse_stride[0] are 0
    q_off = __ldg(p.cu_seqlens_q + batch);
    const int q_len = p.seqused_q != nullptr ? __ldg(p.seqused_q + batch) : __ldg(p.cu_seqlens_q + batch + 1) - q_off;
    if (q_row >= q_len) return;  // the whole warp: one row per warp
  }
  auto o_row = [&] {
    return static_cast<uint16_t*>(p.o) + batch * p.o_stride[0] + head * p.o_stride[2] +
           (q_off + static_cast<int64_t>(q_row)) * p.o_stride[1];
  };
  const float lse = combine_row<kHeadDim, Element>(
      p.num_splits, [&](int s) { return p.lse_accum[s * p.accum_rows + row]; },
      [&](int s) { return p.o_accum + (s * p.accum_rows + row) * kHeadDim; }, o_row, p.head_dim_v, lane,
      row_sink(p, head));
  if (p.lse != nullptr && lane == 0) p.lse[batch * p.lse_stride[0] + head * p.lse_stride[1] + q_off + q_row] = lse;
}

}  // namespace flashcore
