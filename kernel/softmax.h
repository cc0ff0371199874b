// Online softmax over the rows a thread holds in its mma fragments: rows g and g+8 of its warp's
// 16-row slab (index r = 0, 1 below). Names follow the paper: m_i (running max), l_i (running sum).
// Scores stay in raw units; exp2(s * scale_log2 - m * scale_log2) compiles to one FFMA + one MUFU.EX2.
#pragma once
#include <cmath>

#include "params.h"

namespace flashcore {

// 2^x with denormal results flushed to 0 (ex2.approx.ftz: one MUFU.EX2). Plain exp2f keeps denormals, which costs
// an FSETP and two predicated FMULs around every MUFU.EX2 (SASS of the hdim-128 kernel: 182 FSETP.GEU for 180
// EX2). A P value below 2^-126 is far under bf16/fp16 resolution of the row sum, so flushing it changes nothing.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 1/x and log2(x) by one MUFU each (rcp.approx.ftz: at most 1 ulp off; lg2.approx.ftz: about 2^-22 absolute), for
// the epilogue's 1/l and LSE: the IEEE division and logf compile to software sequences that held each warpgroup's
// tile boundary ~0.2 steps longer. FA3 builds with --use_fast_math, which makes its
// 1.f / sum and logf these two instructions. l is at least 1 (2^kOffset for FP8) or 0 (handled apart): no denormals.
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float lg2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <int kNTiles>  // kNTiles 8-column tiles of S per thread: S is float[kNTiles][4]
struct OnlineSoftmax {
  float m_i[2];  // running row max of raw scores, -inf until a visible key is seen
  float l_i[2];  // running row sum of exp, partial: this thread's columns only (reduced at the end)

  __device__ __forceinline__ void init() {
    m_i[0] = m_i[1] = -INFINITY;
    l_i[0] = l_i[1] = 0.f;
  }

  // Updates m_i and l_i with one block of scores, turns `s` into P in place (unnormalized) and
  // returns the factor alpha[r] = exp(m_old - m_new) by which the caller rescales its O rows.
  // kOffset (log2 units): P = 2^kOffset exp(s - m), in (0, 2^kOffset]. FP8 P takes 8 (FA3's choice): E4M3 holds up to
  // 448 and its subnormals reach 2^-9, so P in [0, 256] keeps 8 more binades of small probabilities than P in
  // [0, 1]. The factor is in l too, so O / l is unchanged; finalize takes it out of the LSE.
  // The block max is a tree: kMaxWays independent partial maxima per row, then two levels, and the quad shuffles of
  // both rows together. One chain over the row (24 dependent FMNMX at 192 keys) held back the row's first
  // exponential while the warp had nothing else to issue. A max is exact in any order.
  static constexpr int kMaxWays = 4;
  static_assert(kNTiles >= kMaxWays && (kMaxWays & (kMaxWays - 1)) == 0, "at least 32 keys; a power-of-two tree");

  // kLive: only the block's first kLive 8-column tiles can hold a visible key (a narrow last block); the rest are
  // left as they are, since P V reads P of the live tiles only. The max and the sum skip -inf and 0 terms, so they
  // are the bits a full update gives.
  template <int kOffset = 0, int kLive = kNTiles>
  __device__ __forceinline__ void update(float (&s)[kNTiles][4], float scale_log2, float (&alpha)[2]) {
    static_assert(kLive >= kMaxWays && kLive <= kNTiles, "at least 32 live keys, at most the block");
    float block_max[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float part[kMaxWays];
#pragma unroll
      for (int w = 0; w < kMaxWays; ++w) part[w] = fmaxf(s[w][2 * r], s[w][2 * r + 1]);
#pragma unroll
      for (int nt = kMaxWays; nt < kLive; ++nt) {
        part[nt % kMaxWays] = fmaxf(part[nt % kMaxWays], fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      }
#pragma unroll
      for (int w = 1; w < kMaxWays; w *= 2) {
#pragma unroll
        for (int i = 0; i < kMaxWays; i += 2 * w) part[i] = fmaxf(part[i], part[i + w]);
      }
      block_max[r] = part[0];
    }
    // The 4 lanes of a quad (same g) hold the row's other columns.
#pragma unroll
    for (int x = 1; x <= 2; x *= 2) {
#pragma unroll
      for (int r = 0; r < 2; ++r) block_max[r] = fmaxf(block_max[r], __shfl_xor_sync(0xffffffffu, block_max[r], x));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m_i[r], block_max[r]);
      // A row with no visible key so far keeps m = -inf; subtracting 0 instead keeps exp2 at 0, not NaN.
      const float m_scaled = m_new == -INFINITY ? 0.f : m_new * scale_log2;
      alpha[r] = exp2_ftz(m_i[r] * scale_log2 - m_scaled);
      const float m_p = m_scaled - static_cast<float>(kOffset);
      float row_sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < kLive; ++nt) {
        s[nt][2 * r] = exp2_ftz(s[nt][2 * r] * scale_log2 - m_p);
        s[nt][2 * r + 1] = exp2_ftz(s[nt][2 * r + 1] * scale_log2 - m_p);
        row_sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      m_i[r] = m_new;
      l_i[r] = l_i[r] * alpha[r] + row_sum;
    }
  }

  // Full row sums (quad reduction) for the epilogue: 1/l (0 for a row with no visible key) and the
  // natural-log LSE = scale * m + ln(l) (-inf for a row with no visible key); kOffset as in update.
  // kFast: 1/l and log2(l) by one MUFU each; else the IEEE division and logf (kernel/tile_choice.h kFastFinalize).
  template <int kOffset = 0, bool kFast = true>
  __device__ __forceinline__ void finalize(float softmax_scale, float (&inv_l)[2], float (&lse)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = l_i[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const bool empty = l == 0.f;
      constexpr float kLn2 = 0.6931471805599453f;
      if constexpr (kFast) {
        inv_l[r] = empty ? 0.f : rcp_approx(l);
        lse[r] = empty ? -INFINITY : m_i[r] * softmax_scale + (lg2_approx(l) - kOffset) * kLn2;
      } else {
        inv_l[r] = empty ? 0.f : 1.f / l;
        lse[r] = empty ? -INFINITY : m_i[r] * softmax_scale + logf(l) - kOffset * kLn2;
      }
    }
  }
};

// Joins a sink logit (raw units) to a finished row: LSE' = log(e^lse + e^sink) and 1/l scaled by e^(lse - LSE'), so
// O = sum_j P_j v_j / (l + e^sink) and a row without keys (lse -inf, 1/l 0) keeps O = 0 with LSE' = sink. Once per
// row in the epilogue: the key loop never sees the sink. sink -inf (no sink) leaves both as they are.
__device__ __forceinline__ void join_sink(float sink, float& inv_l, float& lse) {
  if (!(sink > -INFINITY)) return;
  const float m = fmaxf(lse, sink);
  const float joined = m + logf(expf(lse - m) + expf(sink - m));
  inv_l *= expf(lse - joined);
  lse = joined;
}

// Query head `head`'s sink logit for join_sink and the combines: -inf (no sink) when the call has none.
__device__ __forceinline__ float row_sink(const KernelParams& p, int head) {
  return p.sinks != nullptr ? __ldg(p.sinks + head) : -INFINITY;
}

// O *= alpha per row: in the C fragment layout a thread's c0, c1 are row g and c2, c3 row g + 8 (mma.sync and wgmma).
template <int kTiles>
__device__ __forceinline__ void rescale_rows(float (&o)[kTiles][4], const float (&alpha)[2]) {
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    o[t][0] *= alpha[0];
    o[t][1] *= alpha[0];
    o[t][2] *= alpha[1];
    o[t][3] *= alpha[1];
  }
}

}  // namespace flashcore
