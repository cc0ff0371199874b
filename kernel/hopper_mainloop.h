// The Hopper kernel's two roles: the TMA producer and the wgmma consumer warpgroups.
// Shared-memory tiles are [kChunks][rows][64] 16-bit, each chunk 128-byte swizzled by TMA.
#pragma once
#include "barriers.h"
#include "hopper_config.h"
#include "mask.h"
#include "mma.h"
#include "params.h"
#include "softmax.h"
#include "tma.h"
#include "wgmma.h"

namespace flashcore {

// One thread: Q once, then K and V of blocks [n_begin, n_begin + n_blocks) through the stage ring.
template <int kHeadDim>
__device__ void tma_producer(const KernelParams& p, const TmaParams& tma, uint8_t* q_smem, uint8_t* k_smem,
                             uint8_t* v_smem, uint64_t* bars, int batch, int head, int m_block, int n_begin,
                             int n_blocks) {
  using Cfg = HopperTileConfig<kHeadDim>;
  using Slots = HopperSlots<Cfg::kStages>;
  // Packed GQA: `head` is the K/V head and the Q box spans its `group` query heads x all query rows.
  const int head_kv = p.pack_gqa ? head : head / p.group;
  const int q_head = p.pack_gqa ? head * p.group : head;
  const int q_rows = p.pack_gqa ? p.group * p.seqlen_q : Cfg::kBlockM;  // rows one Q box brings
  tma_prefetch_descriptor(&tma.q);
  tma_prefetch_descriptor(&tma.k);
  tma_prefetch_descriptor(&tma.v);
  mbarrier_arrive_expect_tx(&bars[Slots::kQFull], Cfg::kChunks * q_rows * 128);
#pragma unroll
  for (int c = 0; c < Cfg::kChunks; ++c) {
    tma_load_4d(q_smem + c * Cfg::kBlockM * 128, &tma.q, &bars[Slots::kQFull], 64 * c,
                p.pack_gqa ? 0 : m_block * Cfg::kBlockM, q_head, batch);
  }
  for (int n_block = 0; n_block < n_blocks; ++n_block) {
    const int stage = n_block % Cfg::kStages;
    const uint32_t empty_parity = ((n_block / Cfg::kStages) & 1) ^ 1;  // the first pass finds every slot free
    const int row0 = (n_begin + n_block) * Cfg::kBlockN;
    uint64_t* k_full = &bars[Slots::kKFull + stage];
    mbarrier_wait(&bars[Slots::kKEmpty + stage], empty_parity);
    if (p.fault == kFaultSlow) __nanosleep(20000);  // test-only: the producer waits 20 us after every tile
    mbarrier_arrive_expect_tx(k_full, Cfg::kKVBytes);
#pragma unroll
    for (int c = 0; c < Cfg::kChunks; ++c) {
      tma_load_4d(k_smem + stage * Cfg::kKVBytes + c * Cfg::kBlockN * 128, &tma.k, k_full, 64 * c, row0, head_kv,
                  batch);
    }
    uint64_t* v_full = &bars[Slots::kVFull + stage];
    mbarrier_wait(&bars[Slots::kVEmpty + stage], empty_parity);
    mbarrier_arrive_expect_tx(v_full, Cfg::kKVBytes);
#pragma unroll
    for (int c = 0; c < Cfg::kChunks; ++c) {
      tma_load_4d(v_smem + stage * Cfg::kKVBytes + c * Cfg::kBlockN * 128, &tma.v, v_full, 64 * c, row0, head_kv,
                  batch);
    }
  }
}

// One consumer warpgroup: 64 query rows, S = Q K^T and O += P V on wgmma, online softmax in registers.
template <int kHeadDim, typename Element>
struct WgmmaConsumer {
  using Cfg = HopperTileConfig<kHeadDim>;
  static constexpr int kNTiles = Cfg::kBlockN / 8;
  static constexpr int kDTiles = kHeadDim / 8;

  float o_reg[kDTiles][4];  // wgmma accumulator layout == mma.sync C layout per 16-row warp slab
  OnlineSoftmax<kNTiles> softmax;

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) o_reg[dt][0] = o_reg[dt][1] = o_reg[dt][2] = o_reg[dt][3] = 0.f;
    softmax.init();
  }

  // Issues S[64 x kBlockN] = Q[64 rows of this warpgroup] K^T (both K-major) as one wgmma group; no wait.
  __device__ __forceinline__ void qk_issue(float (&s)[kNTiles][4], uint32_t q_wg_addr, uint32_t k_addr) {
    auto& s_flat = reinterpret_cast<float(&)[Cfg::kBlockN / 2]>(s);
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      // k-step kk: 64-column chunk kk / 4, 32 bytes (16 columns) per step inside the 128-byte swizzled row.
      const uint32_t q_off = (kk / 4) * Cfg::kBlockM * 128 + (kk % 4) * 32;
      const uint32_t k_off = (kk / 4) * Cfg::kBlockN * 128 + (kk % 4) * 32;
      wgmma_ss<Cfg::kBlockN, Element>(s_flat, smem_descriptor(q_wg_addr + q_off, 16, 1024),
                                      smem_descriptor(k_addr + k_off, 16, 1024), kk > 0);
    }
    wgmma_commit();
  }

  // Issues O += P V (P from registers, V MN-major) as one wgmma group; no wait.
  __device__ __forceinline__ void pv_issue(const uint32_t (&p_frag)[Cfg::kBlockN / 16][4], uint32_t v_addr) {
    auto& o_flat = reinterpret_cast<float(&)[kHeadDim / 2]>(o_reg);
#pragma unroll
    for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk) {
      // Keys 16kk..16kk+15: two 8-key groups of 128-byte rows (SBO 1024); 64-column chunks LBO apart.
      wgmma_rs<kHeadDim, Element>(o_flat, p_frag[kk],
                                  smem_descriptor(v_addr + kk * 16 * 128, Cfg::kBlockN * 128, 1024));
    }
    wgmma_commit();
  }

  __device__ __forceinline__ void rescale_o(const float (&alpha)[2]) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
      o_reg[dt][0] *= alpha[0];
      o_reg[dt][1] *= alpha[0];
      o_reg[dt][2] *= alpha[1];
      o_reg[dt][3] *= alpha[1];
    }
  }

  // P (16-bit A fragments of the P V GEMM) from the softmaxed S registers: C layout repacked as A layout.
  static __device__ __forceinline__ void pack_p(const float (&s)[kNTiles][4], uint32_t (&p_frag)[Cfg::kBlockN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk) {
      p_frag[kk][0] = Element::pack(s[2 * kk][0], s[2 * kk][1]);
      p_frag[kk][1] = Element::pack(s[2 * kk][2], s[2 * kk][3]);
      p_frag[kk][2] = Element::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      p_frag[kk][3] = Element::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
  }

  __device__ __forceinline__ void fence_o() { fence_operands(reinterpret_cast<float(&)[kHeadDim / 2]>(o_reg)); }
};

}  // namespace flashcore
