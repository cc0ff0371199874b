// FP8 descale factors: q_descale, k_descale and v_descale are per (batch, K/V head) fp32 arrays; S is in units of
// q x k descale and O in units of v descale, so the tile's softmax scale and O's normalization take them. Where the
// consumers read them (global memory at the tile's start or in the epilogue, or a slot the producer fills beside the
// tile info) is tile_choice.h Fp8Choice::kDescales.
#pragma once
#include <cstdint>

#include "params.h"
#include "tile_scheduler.h"

namespace flashcore {

// FP8 descale factors ([batch, K/V head] fp32 with strides; nullptr: 1) of tile `c`'s batch and K/V head.
__device__ __forceinline__ float descale(const float* f, const int64_t (&stride)[2], const KernelParams& p,
                                         const TileCoord& c) {
  return f == nullptr ? 1.f : __ldg(f + c.batch * stride[0] + kv_head(p, c) * stride[1]);
}
__device__ __forceinline__ float qk_descale(const KernelParams& p, const TileCoord& c) {
  return descale(p.q_descale, p.q_descale_stride, p, c) * descale(p.k_descale, p.k_descale_stride, p, c);
}

// FP8 (Fp8Choice kDescalesProducer): the tile's q_descale x k_descale and v_descale, loaded by the producer thread
// when it reaches the tile and stored in an 8-byte slot per TileInfo slot, after both (hopper_config.h
// kTileSlotBytes); kQFull's arrive releases them with the tile info.
__device__ __forceinline__ uint32_t descale_slot(const void* slots, int k) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(slots)) + 2 * kTileInfoBytes + (k & 1) * 8;
}
__device__ __forceinline__ void store_descales(void* slots, int k, float qk, float v) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(descale_slot(slots, k)), "f"(qk), "f"(v) : "memory");
}
__device__ __forceinline__ void load_descales(const void* slots, int k, float& qk, float& v) {
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(qk), "=f"(v) : "r"(descale_slot(slots, k)) : "memory");
}

}  // namespace flashcore
