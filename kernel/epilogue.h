// Epilogue: normalize O by 1/l, convert to 16 bits, write O and LSE rows that exist (row < the sequence's q_len).
// The Hopper kernel stages O in shared memory for a TMA store (stage_output; kernel_wgmma.cuh issues the store);
// the phase-1 kernel, packed-GQA tiles and the planted skip-row fault write from registers (write_output);
// split-KV tiles write fp32 partials (write_partial).
#pragma once
#include "common.h"
#include "params.h"

namespace flashcore {

__device__ float g_fault_accumulator;  // only touched by kFaultNondeterministic

// 0, or with kFaultNondeterministic a bias that depends on how many CTAs got to the racy accumulator first.
__device__ __forceinline__ float fault_bias(const KernelParams& p) {
  return p.fault == kFaultNondeterministic ? 1e-2f * atomicAdd(&g_fault_accumulator, 1.f) : 0.f;
}

// LSE of the thread's two rows (one lane per quad writes), rows that exist only. `q_off`: the sequence's first row
// in packed (varlen) layouts, whose LSE is [Hq, total_q]; 0 for [B, Hq, Sq].
__device__ __forceinline__ void write_lse(const KernelParams& p, const float (&lse)[2], int batch, int q_off,
                                          const ThreadRows& rows, int lane) {
  if (p.lse == nullptr || lane % 4 != 0) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows.valid[r]) {
      p.lse[batch * p.lse_stride[0] + rows.head[r] * p.lse_stride[1] + q_off + rows.row[r]] = lse[r];
    }
  }
}

// The thread's O rows, normalized and converted, into its warpgroup's staging tile: [chunk][64 rows][64] 16-bit,
// 128-byte swizzled (16-byte unit u of row r sits at u ^ (r % 8)), which is what a TMA store of 64-row boxes reads.
// A quad's 4-byte stores of one row fill one 16-byte unit; a warp's 8 rows land in 8 different units: no bank
// conflict. `warp_row0` is the warp's first row in the warpgroup (a multiple of 16).
template <typename Element, int kDTiles>
__device__ __forceinline__ void stage_output(uint32_t o_wg_addr, const float (&o_reg)[kDTiles][4],
                                             const float (&inv_l)[2], float bias, int warp_row0, int lane) {
  constexpr int kChunkBytes = 64 * 128;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp_row0 + lane / 4 + 8 * r;  // row % 8 == lane / 4
    const uint32_t row_addr = o_wg_addr + row * 128 + 4 * (lane % 4);
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      const uint32_t unit = (dt % 8) ^ (lane / 4);
      const uint32_t packed = Element::pack(o_reg[dt][2 * r] * inv_l[r] + bias, o_reg[dt][2 * r + 1] * inv_l[r] + bias);
      // st.shared: the aligned smem pointer lost its address space, and a generic store costs an address check.
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(row_addr + (dt / 8) * kChunkBytes + unit * 16), "r"(packed)
                   : "memory");
    }
  }
}

template <int kHeadDim, typename Element, int kDTiles>
__device__ __forceinline__ void write_output(const KernelParams& p, float (&o_reg)[kDTiles][4], const float (&inv_l)[2],
                                             const float (&lse)[2], int batch, int q_off, const ThreadRows& rows,
                                             int lane, bool skip_first_row) {
  const float bias = fault_bias(p);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!rows.valid[r]) continue;
    if (skip_first_row && r == 0 && lane / 4 == 0) continue;
    const int64_t row = q_off + rows.row[r];  // packed layouts: o_stride[0] is 0, q_off the sequence's first row
    const int head_q = rows.head[r];
    uint16_t* o_row = static_cast<uint16_t*>(p.o) + batch * p.o_stride[0] + head_q * p.o_stride[2] + row * p.o_stride[1];
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      const int col = dt * 8 + 2 * (lane % 4);
      if (col >= p.head_dim_v) break;  // head dims below the kernel's: the padding columns are never written
      const uint32_t packed = Element::pack(o_reg[dt][2 * r] * inv_l[r] + bias, o_reg[dt][2 * r + 1] * inv_l[r] + bias);
      *reinterpret_cast<uint32_t*>(o_row + col) = packed;
    }
  }
  write_lse(p, lse, batch, q_off, rows, lane);
}

// One fp32 partial row's O (split-KV's and the stream-K tail's): the thread's columns of row `r` of its fragment,
// normalized by inv_l, as float2s. The caller writes the row's LSE (keeping its address inside the caller's
// lane test keeps ptxas's schedule of every kernel as it was).
template <int kDTiles>
__device__ __forceinline__ void store_partial_row(float* o_row, const float (&o_reg)[kDTiles][4], int r, float inv_l,
                                                  int lane) {
#pragma unroll
  for (int dt = 0; dt < kDTiles; ++dt) {
    *reinterpret_cast<float2*>(o_row + dt * 8 + 2 * (lane % 4)) =
        make_float2(o_reg[dt][2 * r] * inv_l, o_reg[dt][2 * r + 1] * inv_l);
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
    store_partial_row(p.o_accum + row * kHeadDim, o_reg, r, inv_l[r], lane);
    if (lane % 4 == 0) p.lse_accum[row] = lse[r];
  }
}

}  // namespace flashcore
