// FP8 V, transposed for the P V GEMM. wgmma takes FP8 operands K-major only, and P V's K is the key: V [B, Sk, Hkv, D]
// (d contiguous) must become V^T [B][Hkv][D][vt_keys] (keys contiguous) before TMA loads it. A pre-pass writes the
// copy into the workspace (FA3 transposes in its producer warpgroup with ldmatrix/stmatrix instead: no extra
// traffic, but a producer of 4 warps with more registers); the cost is one read and one write of V, measured in
// docs/perf-notes.md.
//
// Key order: inside each 32-key group, position 4t + j (and 16 + 4t + j) holds key 2t + (j & 1) + 8 (j >> 1) (and
// 16 + that). That is the order in which a thread's softmaxed S registers (C layout: columns 2t, 2t+1, 8+2t, 9+2t of
// each 16) fill a k32 A fragment (columns 4t..4t+3), so P needs no shuffle (hopper_mainloop.h pack_p). Keys past
// seqlen_k are written as zeros (their P is 0, and 0 * NaN would not be).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "params.h"

namespace flashcore {

constexpr int kVtKeys = 128;  // keys per CTA of the pre-pass; vt_keys (the copy's row length) is a multiple

// The key stored at position `pos` (0..31) of a 32-key group of V^T.
__host__ __device__ constexpr int vt_key(int pos) {
  return (pos & 16) + 2 * ((pos & 15) >> 2) + (pos & 1) + 8 * ((pos >> 1) & 1);
}

// V [batch, seqlen_k, heads_kv, kHeadDim] (p.v, p.v_stride: bytes = elements) into p.vt [batch][heads_kv][kHeadDim]
// [p.vt_keys]. grid (vt_keys / kVtKeys, heads_kv, batch), 256 threads: 128 keys x kHeadDim bytes through shared memory (rows of
// 32-bit words with one word of padding: the transposing reads of a warp hit 8 distinct words, no bank conflict).
template <int kHeadDim>
__global__ void __launch_bounds__(256) transpose_v_fp8_kernel(const __grid_constant__ KernelParams p) {
  constexpr int kWords = kHeadDim / 4 + 1;
  __shared__ uint32_t tile[kVtKeys][kWords];
  const int key0 = blockIdx.x * kVtKeys, head = blockIdx.y, batch = blockIdx.z;
  const uint8_t* src = static_cast<const uint8_t*>(p.v) + batch * p.v_stride[0] + head * p.v_stride[2];
  constexpr int kUnits = kHeadDim / 16;  // 16-byte loads per key
  for (int i = threadIdx.x; i < kVtKeys * kUnits; i += blockDim.x) {
    const int key = i / kUnits, unit = i % kUnits;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (key0 + key < p.seqlen_k) x = __ldg(reinterpret_cast<const uint4*>(src + (key0 + key) * p.v_stride[1]) + unit);
    tile[key][4 * unit] = x.x;
    tile[key][4 * unit + 1] = x.y;
    tile[key][4 * unit + 2] = x.z;
    tile[key][4 * unit + 3] = x.w;
  }
  __syncthreads();
  uint8_t* dst = static_cast<uint8_t*>(p.vt) + ((static_cast<int64_t>(batch) * p.heads_kv + head) * kHeadDim) * p.vt_keys +
                 key0;
  // One 32-key group of one d row per item (32 bytes: a whole sector); consecutive threads take consecutive d.
  for (int i = threadIdx.x; i < kHeadDim * (kVtKeys / 32); i += blockDim.x) {
    const int d = i % kHeadDim, group = i / kHeadDim;
    uint32_t w[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      uint32_t word = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = group * 32 + vt_key(4 * q + e);
        word |= ((tile[key][d / 4] >> (8 * (d % 4))) & 0xffu) << (8 * e);
      }
      w[q] = word;
    }
    uint4* out = reinterpret_cast<uint4*>(dst + static_cast<int64_t>(d) * p.vt_keys + group * 32);
    out[0] = make_uint4(w[0], w[1], w[2], w[3]);
    out[1] = make_uint4(w[4], w[5], w[6], w[7]);
  }
}

}  // namespace flashcore
