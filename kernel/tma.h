// Tensor memory accelerator (TMA) loads into shared memory, completing on an mbarrier (PTX ISA
// cp.async.bulk.tensor, mbarrier expect_tx). Tensor maps come from the host (tensor_maps.h).
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

// Loads the box at coordinates {c0 (head dim), c1 (sequence), c2 (head), c3 (batch)} of a 4-D tensor map.
// Elements outside the tensor are zero-filled and still count towards the transaction bytes.
__device__ __forceinline__ void tma_load_4d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];" ::"r"(smem_addr(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}

__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace flashcore
