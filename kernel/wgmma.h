// Warpgroup MMA plumbing: shared-memory matrix descriptors, fences, commit/wait (PTX ISA 9.7.15).
#pragma once
#include <cstdint>

#include "barriers.h"
#include "wgmma_ops.h"

namespace flashcore {

// Shared-memory matrix descriptor for a 128-byte-swizzled tile (bits: 0-13 start >> 4, 16-29 LBO >> 4,
// 32-45 SBO >> 4, 49-51 base offset (0: atoms are 1024-byte aligned), 62-63 swizzle mode (1 = 128B)).
//  K-major (Q, K: rows of 64 16-bit elements = 128 B): SBO = 1024 B between 8-row groups, LBO unused (1).
//  MN-major (V as B of P V): SBO = 1024 B between 8-key groups along K, LBO = bytes between 64-column
//  chunks along N (cute's canonical layout ((8,n),(8,k)):((1,LBO),(8,SBO)) in 16-byte units); with the 64-byte
//  swizzle (16-bit hdim 96) 32-column chunks, SBO 512.
// swizzle_mode 1: 128-byte swizzle; 2: 64-byte (FP8 V^T's 64-key chunk: rows of 64 bytes, SBO 512).
__host__ __device__ constexpr uint64_t smem_descriptor(uint32_t smem_byte_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                                       uint32_t swizzle_mode = 1) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((smem_byte_addr & 0x3FFFF) >> 4);
  desc |= static_cast<uint64_t>((lbo_bytes >> 4) & 0x3FFF) << 16;
  desc |= static_cast<uint64_t>((sbo_bytes >> 4) & 0x3FFF) << 32;
  desc |= static_cast<uint64_t>(swizzle_mode) << 62;
  return desc;
}

// A descriptor kept as its two 32-bit words, advanced by adding byte offsets to the start-address field: shared
// memory addresses stay below 2^18, so start >> 4 stays below 2^14 and an offset never carries into LBO. Each
// k-step then costs one integer add instead of rebuilding the descriptor (ncu, hdim 128: rebuilding took ~150
// uniform-datapath instructions per warp and K/V block).
struct SmemDesc {
  uint32_t lo, hi;
  static __device__ __forceinline__ SmemDesc make(uint32_t smem_byte_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                                  uint32_t swizzle_mode = 1) {
    const uint64_t d = smem_descriptor(smem_byte_addr, lbo_bytes, sbo_bytes, swizzle_mode);
    return {static_cast<uint32_t>(d), static_cast<uint32_t>(d >> 32)};
  }
  __device__ __forceinline__ uint64_t at(uint32_t byte_offset) const {
    return (static_cast<uint64_t>(hi) << 32) | (lo + (byte_offset >> 4));
  }
};

// Orders this thread's register writes (accumulators, A fragments) before the next wgmma reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }

__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

// Waits until at most kPending committed wgmma groups of this warpgroup are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across wgmma issue and wait points.
template <int kN>
__device__ __forceinline__ void fence_operands(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Register reallocation between warpgroups (needs a register cap at entry: __launch_bounds__(threads, 1)).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

}  // namespace flashcore
