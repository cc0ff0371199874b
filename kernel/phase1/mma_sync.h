// Warp-level tensor-core primitives for phase 1: ldmatrix and mma.sync.m16n8k16 (fp32 accumulate).
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), with g = lane / 4 and t = lane % 4:
//   A 16x16: a0 (row g, cols 2t..2t+1), a1 (row g+8, 2t), a2 (row g, 2t+8), a3 (row g+8, 2t+8)
//   B 16x8 : b0 (k 2t..2t+1, col g), b1 (k 2t+8.., col g)
//   C 16x8 : c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8, cols 2t, 2t+1)
// so the C fragments of two adjacent 8-column tiles are, packed to 16 bits, exactly one A fragment.
#pragma once
#include <cstdint>

#include "../element.h"

namespace flashcore {

// Four 8x8 16-bit matrices; lane l gives the shared-memory address of row (l % 8) of matrix (l / 8).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// As ldmatrix_x4, each matrix transposed: used for V, stored [key][d] but consumed as B[k = key][n = d].
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a * b on one 16x8x16 tile, fp32 accumulators.
template <typename Element>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_16x8x16<Bf16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                  uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16x8x16<Fp16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                  uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Shared-memory tiles are [rows][kHeadDim] 16-bit, 16-byte chunks XOR-swizzled by (row % 8), so the
// 8 rows one ldmatrix matrix reads (same logical chunk) fall in 8 different bank groups.
template <int kHeadDim>
__device__ __forceinline__ uint32_t swizzled_offset_bytes(int row, int chunk) {
  return static_cast<uint32_t>((row * kHeadDim + ((chunk ^ (row & 7)) * 8)) * 2);
}

}  // namespace flashcore
