// Tensor memory accelerator (TMA) loads into shared memory, completing on an mbarrier, and stores from shared
// memory as bulk groups (PTX ISA cp.async.bulk.tensor, mbarrier expect_tx, cp.async.bulk.commit/wait_group).
// Tensor maps come from the host (tensor_maps.h).
#pragma once
#include <cuda.h>

#include <cstdint>

#include "barriers.h"

namespace flashcore {

// Arrives on `bar` and raises its expected transaction count by `bytes` (the TMA loads of this phase).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// L2 eviction priority of a TMA transfer (PTX createpolicy.fractional + .L2::cache_hint). The FP8 V^T copy's
// transfers take one (raw V evict_first, the V^T stores evict_last): measured on the H100, +1.5-1.9 % at FP8 hdim
// 128 S4K causal, +0.2-0.3 % at S4K, 0 elsewhere. The attention loads keep the normal priority: K and V evict_last
// with Q evict_first measured -0.2..-1.3 % at FP8 hdim 128 and made FP8 hdim 256 spill more.
enum L2Hint : int { kL2Normal = 0, kL2EvictFirst = 1, kL2EvictLast = 2 };
constexpr int kKvHint = kL2Normal;
constexpr int kQHint = kL2Normal;
constexpr int kVtRawHint = kL2EvictFirst;
constexpr int kVtStoreHint = kL2EvictLast;
// No side effects (plain asm, not volatile): the compiler may reuse one policy across a loop's transfers.
template <int kHint>
__device__ __forceinline__ uint64_t l2_policy() {
  uint64_t policy;
  if constexpr (kHint == kL2EvictFirst) {
    asm("createpolicy.fractional.L2::evict_first.b64 %0;" : "=l"(policy));
  } else {
    asm("createpolicy.fractional.L2::evict_last.b64 %0;" : "=l"(policy));
  }
  return policy;
}

// Loads the box at coordinates {c0 (head dim), c1 (sequence), c2 (head), c3 (batch)} of a 4-D tensor map into
// shared-memory address `smem_dst`, completing on the mbarrier at shared-memory address `bar` (32-bit addresses:
// fewer registers than pointers where a caller keeps them). Elements outside the tensor are zero-filled and still
// count towards the transaction bytes. kHint: the L2 eviction priority of the read.
template <int kHint = kL2Normal>
__device__ __forceinline__ void tma_load_4d(uint32_t smem_dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            int c2, int c3) {
  if constexpr (kHint == kL2Normal) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
        "[%6];" ::"r"(smem_dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, "
        "%3, %4, %5}], [%6], %7;" ::"r"(smem_dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "l"(l2_policy<kHint>())
        : "memory");
  }
}

// The same with shared-memory pointers.
template <int kHint = kL2Normal>
__device__ __forceinline__ void tma_load_4d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2, int c3) {
  tma_load_4d<kHint>(smem_addr(smem_dst), map, smem_addr(bar), c0, c1, c2, c3);
}

// Stores the shared-memory box at `smem_src` to coordinates {c0, c1, c2, c3} of a 4-D tensor map as one bulk
// group of this thread; elements outside the tensor are not written (a partial last tile is clipped). kHint: the L2
// eviction priority of the written lines.
template <int kHint = kL2Normal>
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, const void* smem_src, int c0, int c1, int c2,
                                             int c3) {
  if constexpr (kHint == kL2Normal) {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];" ::"l"(
            reinterpret_cast<uint64_t>(map)),
        "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(smem_src))
        : "memory");
  } else {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%1, %2, %3, %4}], [%5], %6;" ::"l"(
            reinterpret_cast<uint64_t>(map)),
        "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(smem_src)), "l"(l2_policy<kHint>())
        : "memory");
  }
}

__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Waits until this thread's committed bulk stores have finished reading shared memory (the global writes may
// still be in flight; they complete before the kernel ends).
__device__ __forceinline__ void bulk_wait_group_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// Waits until this thread's committed bulk stores are complete (shared memory read and global memory written).
__device__ __forceinline__ void bulk_wait_group_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Orders this thread's generic-proxy shared-memory writes before later async-proxy (TMA, wgmma) reads of them.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace flashcore
