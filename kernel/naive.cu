// Naive reference attention: one thread per (batch, head, query row), fp32 online softmax.
// Slow on purpose and simple enough to check by reading; the driver validates the real kernel with it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>

#include "naive.h"

namespace {

__device__ float load16(const void* base, int64_t idx, int dtype) {
  if (dtype == FC_BF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[idx]);
  return __half2float(static_cast<const __half*>(base)[idx]);
}

// One thread per (batch, head, query row). kRoundP: FP8's "same rounding" baseline (FA3's FP8 test; the driver's
// --check bound, harness/support/fp8.py and flashcore/reference.py do the same in torch): P = 2^8 exp(s - row max)
// rounded to E4M3 against the row's final max (a first pass finds it) over the unrounded row sum, the output rounded
// to bf16 as the FP8 kernel's is; no LSE. Otherwise fp32 online softmax.
template <bool kRoundP>
__global__ void naive_kernel(fc_params p, float* o_ref, float* lse_ref) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int head = blockIdx.y, batch = blockIdx.z;
  if (row >= p.seqlen_q) return;
  const int head_kv = head / static_cast<int>(p.heads_q / p.heads_kv);
  const int d = static_cast<int>(p.head_dim);
  const int64_t q0 = batch * p.q_stride[0] + row * p.q_stride[1] + head * p.q_stride[2];
  const int64_t keys = min(p.seqlen_k, p.causal ? row + (p.seqlen_k - p.seqlen_q) + 1 : p.seqlen_k);
  auto score = [&](int64_t j) {
    const int64_t k0 = batch * p.k_stride[0] + j * p.k_stride[1] + head_kv * p.k_stride[2];
    float s = 0.f;
    for (int i = 0; i < d; ++i) s += load16(p.q, q0 + i, p.dtype) * load16(p.k, k0 + i, p.dtype);
    return s * p.softmax_scale;
  };
  float m = -INFINITY, l = 0.f, acc[256];
  for (int i = 0; i < d; ++i) acc[i] = 0.f;
  if (kRoundP) {
    for (int64_t j = 0; j < keys; ++j) m = fmaxf(m, score(j));
  }
  for (int64_t j = 0; j < keys; ++j) {
    const int64_t v0 = batch * p.v_stride[0] + j * p.v_stride[1] + head_kv * p.v_stride[2];
    const float s = score(j);
    float alpha = 1.f, w, pv;
    if (kRoundP) {
      w = 256.f * expf(s - m);
      pv = static_cast<float>(__nv_fp8_e4m3(w));
    } else {
      const float m_new = fmaxf(m, s);
      alpha = expf(m - m_new);
      w = pv = expf(s - m_new);
      m = m_new;
    }
    l = l * alpha + w;
    for (int i = 0; i < d; ++i) acc[i] = acc[i] * alpha + pv * load16(p.v, v0 + i, p.dtype);
  }
  float* o_row = o_ref + ((batch * p.seqlen_q + row) * p.heads_q + head) * d;
  for (int i = 0; i < d; ++i) {
    const float o = l > 0.f ? acc[i] / l : 0.f;
    o_row[i] = kRoundP ? __bfloat162float(__float2bfloat16(o)) : o;
  }
  if (!kRoundP) lse_ref[(batch * p.heads_q + head) * p.seqlen_q + row] = l > 0.f ? m + logf(l) : -INFINITY;
}

}  // namespace

cudaError_t fc_naive_forward(const fc_params* params, float* o_ref, float* lse_ref, cudaStream_t stream,
                             bool round_p_e4m3) {
  const dim3 block(128);
  const dim3 grid(static_cast<unsigned>((params->seqlen_q + 127) / 128), static_cast<unsigned>(params->heads_q),
                  static_cast<unsigned>(params->batch));
  if (round_p_e4m3) {
    naive_kernel<true><<<grid, block, 0, stream>>>(*params, o_ref, lse_ref);
  } else {
    naive_kernel<false><<<grid, block, 0, stream>>>(*params, o_ref, lse_ref);
  }
  return cudaGetLastError();
}
