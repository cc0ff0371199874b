// Consumer warps: per K/V block, S = Q K^T (mma.sync), mask, online softmax, O += P V.
// Each warp owns 16 query rows; a thread holds rows g and g+8 of the slab (see mma.h).
#pragma once
#include "../barriers.h"
#include "config.h"
#include "../mask.h"
#include "mma_sync.h"
#include "../params.h"
#include "../softmax.h"

namespace flashcore {

template <int kHeadDim, typename Element, typename Cfg>
struct Consumer {
  static constexpr int kNTiles = Cfg::kBlockN / 8;  // 8-column tiles of S
  static constexpr int kDTiles = kHeadDim / 8;      // 8-column tiles of O

  float o_reg[kDTiles][4];
  OnlineSoftmax<kNTiles> softmax;

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) o_reg[dt][0] = o_reg[dt][1] = o_reg[dt][2] = o_reg[dt][3] = 0.f;
    softmax.init();
  }

  // S[16 x kBlockN] = Q[slab rows] K^T. Q comes from smem each block (ldmatrix is cheap next to
  // keeping 4 * kHeadDim / 16 registers of Q alive through the loop).
  __device__ __forceinline__ void qk(float (&s)[kNTiles][4], uint32_t q_slab_addr, uint32_t k_addr, int lane) {
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      uint32_t a[4];
      // Matrices: rows 0-7 / 8-15 of the slab at d chunk 2kk, then the same rows at chunk 2kk+1.
      ldmatrix_x4(a, q_slab_addr + swizzled_offset_bytes<kHeadDim>(lane % 16, 2 * kk + lane / 16));
#pragma unroll
      for (int nt2 = 0; nt2 < kNTiles / 2; ++nt2) {
        uint32_t b[4];
        // Matrices: keys 16nt2+0..7 at chunks 2kk, 2kk+1, then keys 16nt2+8..15 at the same chunks.
        const int key = 16 * nt2 + (lane % 8) + (lane / 16) * 8;
        ldmatrix_x4(b, k_addr + swizzled_offset_bytes<kHeadDim>(key, 2 * kk + (lane / 8) % 2));
        mma_16x8x16<Element>(s[2 * nt2], a, b[0], b[1]);
        mma_16x8x16<Element>(s[2 * nt2 + 1], a, b[2], b[3]);
      }
    }
  }

  // O = O * alpha + P V, P taken from the S registers (C fragments repacked as A fragments).
  __device__ __forceinline__ void pv(float (&s)[kNTiles][4], const float (&alpha)[2], uint32_t v_addr, int lane) {
    rescale_rows(o_reg, alpha);
#pragma unroll
    for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk) {
      const uint32_t a[4] = {Element::pack(s[2 * kk][0], s[2 * kk][1]), Element::pack(s[2 * kk][2], s[2 * kk][3]),
                             Element::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             Element::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dt2 = 0; dt2 < kDTiles / 2; ++dt2) {
        uint32_t b[4];
        // Transposed matrices: keys 16kk+0..7 / +8..15 at d chunk 2dt2, then the same keys at chunk 2dt2+1.
        const int key = 16 * kk + (lane % 8) + ((lane / 8) % 2) * 8;
        ldmatrix_x4_trans(b, v_addr + swizzled_offset_bytes<kHeadDim>(key, 2 * dt2 + lane / 16));
        mma_16x8x16<Element>(o_reg[2 * dt2], a, b[0], b[1]);
        mma_16x8x16<Element>(o_reg[2 * dt2 + 1], a, b[2], b[3]);
      }
    }
  }
};

}  // namespace flashcore
