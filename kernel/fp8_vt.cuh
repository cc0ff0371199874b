// FP8 V, transposed for the P V GEMM. wgmma takes FP8 operands K-major only, and P V's K is the key: V [B, Sk, Hkv, D]
// (d contiguous) must reach it as V^T (keys contiguous). Two ways, chosen per call (kernel/tile_choice.h
// use_fp8_vt_smem), both by the producer warpgroup's warps 1-3 with the same transposing step
// (kernel/fp8_vt_smem.cuh transpose_v_block): a copy V^T [B][Hkv][D][vt_keys] in the workspace, each block written once
// per call while the consumers compute (kernel/fp8_vt_fused.cuh: long prefill), or each block transposed in shared
// memory for every query tile that reads it (kernel/fp8_vt_smem.cuh: decode and short prefill).
//
// Key order: inside each 32-key group, position 4t + j (and 16 + 4t + j) holds key 2t + (j & 1) + 8 (j >> 1) (and
// 16 + that). That is the order in which a thread's softmaxed S registers (C layout: columns 2t, 2t+1, 8+2t, 9+2t of
// each 16) fill a k32 A fragment (columns 4t..4t+3), so P needs no shuffle (hopper_mainloop.h pack_p). Keys past
// seqlen_k are zeros (TMA fills the raw block's rows past the tensor with them; their P is 0, and 0 * NaN would not
// be).
#pragma once

namespace flashcore {

constexpr int kVtKeys = 128;  // the copy's row length vt_keys is seqlen_k rounded up to a multiple of this

// The key stored at position `pos` (0..31) of a 32-key group of V^T.
__host__ __device__ constexpr int vt_key(int pos) {
  return (pos & 16) + 2 * ((pos & 15) >> 2) + (pos & 1) + 8 * ((pos >> 1) & 1);
}

}  // namespace flashcore
