// The standalone driver's inputs (kernel/driver.cu): reproducible random values on the device, FP8's dequantized
// copies for the reference, the call's buffers. Not part of the library (nor of its kernel id).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../flashcore.h"

#define CUDA_CHECK(call)                                                                         \
  do {                                                                                           \
    cudaError_t err_ = (call);                                                                   \
    if (err_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::printf("RESULT status=error reason=cuda\n");                                          \
      std::exit(3);                                                                              \
    }                                                                                            \
  } while (0)

// Inputs: a counter-based hash gives reproducible uniform values in [-1.73, 1.73] (unit variance).
__device__ inline float random_value(int64_t i, uint32_t seed) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ (static_cast<uint32_t>(i >> 32) + seed * 0x9E3779B9u);
  h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
  return (static_cast<float>(h) * (1.0f / 4294967296.0f) * 2.f - 1.f) * 1.7320508f;
}

__global__ void fill_random(uint16_t* data, int64_t n, uint32_t seed, int dtype) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = random_value(i, seed);
    data[i] = dtype == FC_BF16 ? __bfloat16_as_ushort(__float2bfloat16(x)) : __half_as_ushort(__float2half(x));
  }
}

__global__ void fill_random_e4m3(uint8_t* data, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    data[i] = __nv_fp8_e4m3(random_value(i, seed)).__x;
  }
}

// FP8 x [B, S, H, D] (dense) times its descale [B, Hkv] (head h takes h / (H / Hkv)) as bf16: exact for powers of 2.
__global__ void dequantize_e4m3(const uint8_t* x, uint16_t* out, int64_t n, int64_t seq, int heads, int heads_kv,
                                int dim, const float* descale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t h = (i / dim) % heads, b = i / (static_cast<int64_t>(dim) * heads * seq);
    __nv_fp8_e4m3 v;
    v.__x = x[i];
    const float f = static_cast<float>(v) * descale[b * heads_kv + h / (heads / heads_kv)];
    out[i] = __bfloat16_as_ushort(__float2bfloat16(f));
  }
}

inline float to_float(uint16_t bits, int dtype) {
  if (dtype == FC_BF16) { uint32_t w = static_cast<uint32_t>(bits) << 16; float f; std::memcpy(&f, &w, 4); return f; }
  return __half2float(__ushort_as_half(bits));
}

// The call's device buffers: q, k, v (fresh random values; FP8: E4M3 with descales), o and lse poisoned, each its
// own cudaMalloc of exactly its size; p's pointers and strides point at them.
struct Buffers {
  void* in[3] = {nullptr, nullptr, nullptr};  // q, k, v
  int64_t counts[3] = {0, 0, 0};
  uint16_t* o = nullptr;
  float* lse = nullptr;
  float* descales[3] = {nullptr, nullptr, nullptr};
  int64_t no = 0, nlse = 0;
};

inline void free_buffers(const Buffers& b) {
  for (void* d : b.in) CUDA_CHECK(cudaFree(d));
  CUDA_CHECK(cudaFree(b.o));
  CUDA_CHECK(cudaFree(b.lse));
  for (float* d : b.descales) if (d != nullptr) CUDA_CHECK(cudaFree(d));
}

