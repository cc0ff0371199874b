// FP8 V, transposed for the P V GEMM. wgmma takes FP8 operands K-major only, and P V's K is the key: V [B, Sk, Hkv, D]
// (d contiguous) must reach it as V^T (keys contiguous). Two ways, chosen per call (kernel/tile_choice.h
// use_fp8_vt_smem): this file's pre-pass writes V^T [B][Hkv][D][vt_keys] into the workspace before the attention
// kernel (one more read and write of V, 2-4 % of long prefill); kernel/fp8_vt_smem.cuh transposes each block in
// shared memory inside the kernel (no pass: decode and short prefill; measured in docs/perf-notes.md 8.14, 8.16).
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
// [p.vt_keys]. grid (vt_keys / kVtKeys, heads_kv, batch), 256 threads: 128 keys x kHeadDim bytes through shared memory
// (rows of 32-bit words with one word of padding, so the 16-byte stores of 4 keys by a warp fall in distinct banks).
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
  // One half (16 keys) of a 32-key group of 4 d rows per item: the word column c (d = 4c..4c+3) of those keys, one
  // LDS per key, transposed in 4x4 byte blocks by __byte_perm. Lanes 2t and 2t + 1 take the two halves of one group,
  // so each store instruction writes whole 32-byte sectors (one 16-byte store per lane and row), and a warp's reads
  // (16 columns x 2 halves 16 keys apart) hit 32 distinct banks. One byte per LDS and two half-sector stores per
  // thread left the pass at 80 % of L2 throughput and 43 % of DRAM (docs/perf-notes.md steps 8.3-8.5).
  constexpr int kCols = kHeadDim / 4;
  for (int i = threadIdx.x; i < 2 * kCols * (kVtKeys / 32); i += blockDim.x) {
    const int half = i & 1, c = (i >> 1) % kCols, group = (i >> 1) / kCols;
    const int base = group * 32 + 16 * half;  // vt_key(16 + x) = 16 + vt_key(x)
    uint32_t rows[4][4];  // rows[b][q]: d row 4c + b, key positions 16 half + 4q .. + 3
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t a0 = tile[base + vt_key(4 * q)][c], a1 = tile[base + vt_key(4 * q + 1)][c];
      const uint32_t a2 = tile[base + vt_key(4 * q + 2)][c], a3 = tile[base + vt_key(4 * q + 3)][c];
      const uint32_t lo01 = __byte_perm(a0, a1, 0x5140), hi01 = __byte_perm(a0, a1, 0x7362);  // interleave bytes
      const uint32_t lo23 = __byte_perm(a2, a3, 0x5140), hi23 = __byte_perm(a2, a3, 0x7362);
      rows[0][q] = __byte_perm(lo01, lo23, 0x5410);  // byte 0 of a0..a3
      rows[1][q] = __byte_perm(lo01, lo23, 0x7632);  // byte 1
      rows[2][q] = __byte_perm(hi01, hi23, 0x5410);  // byte 2
      rows[3][q] = __byte_perm(hi01, hi23, 0x7632);  // byte 3
    }
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      *reinterpret_cast<uint4*>(dst + static_cast<int64_t>(4 * c + b) * p.vt_keys + base) =
          make_uint4(rows[b][0], rows[b][1], rows[b][2], rows[b][3]);
    }
  }
}

}  // namespace flashcore
