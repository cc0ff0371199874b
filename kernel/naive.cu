// Naive reference attention: one thread per (batch, head, query row), fp32 online softmax.
// Slow on purpose and simple enough to check by reading; the driver validates the real kernel with it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "naive.h"

namespace {

__device__ float load16(const void* base, int64_t idx, int dtype) {
  if (dtype == FC_BF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[idx]);
  return __half2float(static_cast<const __half*>(base)[idx]);
}

__global__ void naive_kernel(fc_params p, float* o_ref, float* lse_ref) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int head = blockIdx.y, batch = blockIdx.z;
  if (row >= p.seqlen_q) return;
  const int head_kv = head / static_cast<int>(p.heads_q / p.heads_kv);
  const int d = static_cast<int>(p.head_dim);
  const int64_t q0 = batch * p.q_stride[0] + row * p.q_stride[1] + head * p.q_stride[2];
  const int64_t last_key = p.causal ? row + (p.seqlen_k - p.seqlen_q) : p.seqlen_k - 1;
  float m = -INFINITY, l = 0.f, acc[256];
  for (int i = 0; i < d; ++i) acc[i] = 0.f;
  for (int64_t j = 0; j < p.seqlen_k && j <= last_key; ++j) {
    const int64_t k0 = batch * p.k_stride[0] + j * p.k_stride[1] + head_kv * p.k_stride[2];
    const int64_t v0 = batch * p.v_stride[0] + j * p.v_stride[1] + head_kv * p.v_stride[2];
    float s = 0.f;
    for (int i = 0; i < d; ++i) s += load16(p.q, q0 + i, p.dtype) * load16(p.k, k0 + i, p.dtype);
    s *= p.softmax_scale;
    const float m_new = fmaxf(m, s);
    const float alpha = expf(m - m_new), w = expf(s - m_new);
    l = l * alpha + w;
    for (int i = 0; i < d; ++i) acc[i] = acc[i] * alpha + w * load16(p.v, v0 + i, p.dtype);
    m = m_new;
  }
  float* o_row = o_ref + ((batch * p.seqlen_q + row) * p.heads_q + head) * d;
  for (int i = 0; i < d; ++i) o_row[i] = l > 0.f ? acc[i] / l : 0.f;
  lse_ref[(batch * p.heads_q + head) * p.seqlen_q + row] = l > 0.f ? m + logf(l) : -INFINITY;
}

}  // namespace

cudaError_t fc_naive_forward(const fc_params* params, float* o_ref, float* lse_ref, cudaStream_t stream) {
  const dim3 block(128);
  const dim3 grid(static_cast<unsigned>((params->seqlen_q + 127) / 128), static_cast<unsigned>(params->heads_q),
                  static_cast<unsigned>(params->batch));
  naive_kernel<<<grid, block, 0, stream>>>(*params, o_ref, lse_ref);
  return cudaGetLastError();
}
