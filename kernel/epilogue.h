// Epilogue: normalize O by 1/l, convert to 16 bits, write O and LSE rows that exist (row < seqlen_q).
// Phase 1 writes straight from registers (4 bytes per store); later phases stage through smem + TMA.
#pragma once
#include "config.h"
#include "params.h"

namespace flashcore {

__device__ float g_fault_accumulator;  // only touched by kFaultNondeterministic

template <int kHeadDim, typename Element, int kDTiles>
__device__ __forceinline__ void write_output(const KernelParams& p, float (&o_reg)[kDTiles][4], const float (&inv_l)[2],
                                             const float (&lse)[2], int batch, const ThreadRows& rows, int lane,
                                             bool skip_first_row) {
  float fault_bias = 0.f;
  if (p.fault == kFaultNondeterministic) {
    // A racy global accumulation: the value read back depends on how many CTAs got there first.
    fault_bias = 1e-2f * atomicAdd(&g_fault_accumulator, 1.f);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!rows.valid[r]) continue;
    if (skip_first_row && r == 0 && lane / 4 == 0) continue;
    const int row = rows.row[r];
    const int head_q = rows.head[r];
    uint16_t* o_row = static_cast<uint16_t*>(p.o) + batch * p.o_stride[0] + head_q * p.o_stride[2] + row * p.o_stride[1];
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      const int col = dt * 8 + 2 * (lane % 4);
      const uint32_t packed =
          Element::pack(o_reg[dt][2 * r] * inv_l[r] + fault_bias, o_reg[dt][2 * r + 1] * inv_l[r] + fault_bias);
      *reinterpret_cast<uint32_t*>(o_row + col) = packed;
    }
    if (p.lse != nullptr && lane % 4 == 0) {
      p.lse[(static_cast<int64_t>(batch) * p.heads_q + head_q) * p.seqlen_q + row] = lse[r];
    }
  }
}

// Split-KV epilogue: this split's O rows normalized by its own softmax sum, fp32, and its LSE (-inf for a row
// that sees no key in this split; its O is then 0). combine_splits_kernel weighs them by exp(lse_s - lse).
template <int kHeadDim, int kDTiles>
__device__ __forceinline__ void write_partial(const KernelParams& p, float (&o_reg)[kDTiles][4], const float (&inv_l)[2],
                                              const float (&lse)[2], int batch, int split, const ThreadRows& rows,
                                              int lane, bool skip_first_row) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!rows.valid[r]) continue;
    if (skip_first_row && r == 0 && lane / 4 == 0) continue;
    const int64_t row = split * p.accum_rows +
                        (static_cast<int64_t>(batch) * p.heads_q + rows.head[r]) * p.seqlen_q + rows.row[r];
    float* o_row = p.o_accum + row * kHeadDim;
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      const int col = dt * 8 + 2 * (lane % 4);
      *reinterpret_cast<float2*>(o_row + col) = make_float2(o_reg[dt][2 * r] * inv_l[r], o_reg[dt][2 * r + 1] * inv_l[r]);
    }
    if (lane % 4 == 0) p.lse_accum[row] = lse[r];
  }
}

}  // namespace flashcore
