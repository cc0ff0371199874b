// Input element types of the kernels: 16-bit (bf16, fp16) and FP8 E4M3, with their byte size, output type and
// register packing.
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

}  // namespace flashcore
