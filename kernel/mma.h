// Warp-level tensor-core primitives for phase 1: ldmatrix and mma.sync.m16n8k16 (fp32 accumulate).
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"), with g = lane / 4 and t = lane % 4:
//   A 16x16: a0 (row g, cols 2t..2t+1), a1 (row g+8, 2t), a2 (row g, 2t+8), a3 (row g+8, 2t+8)
//   B 16x8 : b0 (k 2t..2t+1, col g), b1 (k 2t+8.., col g)
//   C 16x8 : c0,c1 (row g, cols 2t, 2t+1), c2,c3 (row g+8, cols 2t, 2t+1)
// so the C fragments of two adjacent 8-column tiles are, packed to 16 bits, exactly one A fragment.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace flashcore {

// Element types of the inputs: kBytes per element; Out is the output's element (the inputs' own for 16-bit types).
struct Bf16 {
  using type = __nv_bfloat16;
  using Out = Bf16;
  static constexpr int kBytes = 2;
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
};

struct Fp16 {
  using type = __half;
  using Out = Fp16;
  static constexpr int kBytes = 2;
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
};

// FP8 E4M3 inputs (descaled by the caller's factors), bf16 output. pack4 fills one 32-bit A-fragment register of a
// k32 wgmma: four consecutive columns, the first in the low byte (cvt ... d, a, b puts a in the upper half).
// satfinite: a value past 448 becomes 448, never NaN.
struct E4m3 {
  using Out = Bf16;
  static constexpr int kBytes = 1;
  static __device__ __forceinline__ uint32_t pack4(float c0, float c1, float c2, float c3) {
    uint32_t r;
    asm("{\n.reg .b16 lo, hi;\n"
        "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
        "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
        "mov.b32 %0, {lo, hi};\n}"
        : "=r"(r)
        : "f"(c0), "f"(c1), "f"(c2), "f"(c3));
    return r;
  }
};

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
