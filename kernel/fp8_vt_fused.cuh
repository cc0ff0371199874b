// FP8 V^T written by the attention kernel itself (Cfg::kVtFused), for long prefill: the same copy as the pre-pass
// (kernel/fp8_vt.cuh), without a kernel before the attention kernel. The pre-pass reads and writes all of V while no
// GEMM runs (B4 H16 S4K hdim 128: about 5 % of the call); here warps 1-3 of each CTA's producer warpgroup, idle
// otherwise, write it one K/V block at a time while the consumers compute, and each block is transposed once per
// call, not once per query tile as in kernel/fp8_vt_smem.cuh.
//
// Work items are (batch, K/V head, block of kBlockN keys), head-major (the tile order's): a claim counter in the
// workspace (p.vt_ready[0], zeroed before the launch) hands them out, so a waiting CTA only ever waits for a block that
// a running warp holds. Per item: TMA loads the raw block (K's boxes and swizzle, tma.v_raw) into a staging buffer,
// the three warps transpose it into a V^T staging buffer laid out as a V stage (fp8_vt_smem.cuh's transpose_v_block),
// and TMA stores that through the V^T maps the producer loads with (tma.v, tma.v_tail), so the producer reads back
// exactly the stage the warps wrote. Once the store has completed, p.vt_ready[1 + item] is set with release semantics;
// the producer thread waits for it (acquire) before its TMA load of the block (vt_block_wait), or, where
// Cfg::kVtHeadCount, for a per-head count of stored blocks once per tile (vt_head_ready).
#pragma once
#include <cstdint>

#include "barriers.h"
#include "fp8_vt_smem.cuh"
#include "params.h"
#include "tma.h"

namespace flashcore {

// Orders this thread's earlier accesses of global memory through one proxy before its later ones through the other
// (generic flag against TMA copies).
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }

// The producer thread, before its TMA load of V^T block `block` of (batch, head_kv): wait until a transposing warp has
// stored it. Usually ready: one L2 round trip.
__device__ __forceinline__ void vt_block_wait(const KernelParams& p, int batch, int head_kv, int block) {
  const int* flag = p.vt_ready + 1 + (batch * p.heads_kv + head_kv) * p.vt_blocks + block;
  for (;;) {
    int ready;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(ready) : "l"(flag) : "memory");
    if (ready != 0) break;
    __nanosleep(256);
  }
  fence_proxy_async_global();
}

// Cfg::kVtHeadCount: a count of stored blocks per (batch, K/V head) after the flags, p.vt_ready[1 + vt_items + batch *
// heads_kv + head], which the leader raises (release) after each block's flag; the producer thread reads it (acquire)
// at a tile's first V block and, once every block of the head is in, skips the per-block flags for the rest of the
// tile: one L2 round trip per tile instead of one per V block.
__device__ __forceinline__ int* vt_head_count(const KernelParams& p, int batch, int head_kv) {
  return p.vt_ready + 1 + p.vt_items + batch * p.heads_kv + head_kv;
}
__device__ __forceinline__ bool vt_head_ready(const KernelParams& p, int batch, int head_kv) {
  int done;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(done) : "l"(vt_head_count(p, batch, head_kv)) : "memory");
  if (done < p.vt_blocks) return false;
  fence_proxy_async_global();
  return true;
}

// Work item `item`'s first key and its K/V head and batch (items are head-major: item = (batch * heads_kv + head)
// * vt_blocks + block, vt_block_wait's flag index).
struct VtItem {
  int key0, head, batch;
};
template <int kBlockN>
__device__ __forceinline__ VtItem vt_item(const KernelParams& p, int item) {
  const int bh = p.div_vt_blocks(item);
  const int batch = p.div_heads_kv(bh);
  return VtItem{(item - bh * p.vt_blocks) * kBlockN, bh - batch * p.heads_kv, batch};
}

// Warps 1..3 of the producer warpgroup (warp 0..2 here): claim, load, transpose, store and publish V^T blocks until
// none is left. raw and vt: the staging buffers (Cfg::kKVBytes each).
template <typename Cfg>
__device__ void transpose_v_fused(const KernelParams& p, const TmaParams& tma, const uint8_t* raw, const uint8_t* vt,
                                  uint64_t* bars, int warp, int lane) {
  using Slots = typename Cfg::Slots;
  constexpr int kHeadDim = Cfg::kRowBytes;
  const bool leader = warp == 0 && lane == 0;
  const uint32_t raw_addr = smem_addr(raw), vt_addr = smem_addr(vt);
  for (uint32_t k = 0;; ++k) {
    if (leader) {
      const int item = atomicAdd(p.vt_ready, 1);
      vt_flags_store(bars, Slots::kVtItem, item);
      if (item < p.vt_items) {
        const VtItem at = vt_item<Cfg::kBlockN>(p, item);
        mbarrier_arrive_expect_tx(&bars[Slots::kVtLoad], Cfg::kKVBytes);
#pragma unroll
        for (int ch = 0; ch < Cfg::kChunks; ++ch) {
          tma_load_4d<kVtRawHint>(raw_addr + ch * Cfg::kBlockN * Cfg::kSpan, &tma.v_raw,
                                  smem_addr(&bars[Slots::kVtLoad]), Cfg::kChunkCols * ch, at.key0, at.head, at.batch);
        }
      }
    }
    named_barrier_sync(kBarrierVtFused, 32 * kVtWarps);  // the item word is written
    const int item = vt_flags_load(bars, Slots::kVtItem);
    if (item >= p.vt_items) break;
    mbarrier_wait_sleep(&bars[Slots::kVtLoad], k & 1);
    transpose_v_block<Cfg>(raw_addr, vt_addr, warp, lane);
    fence_proxy_async_shared();                          // the TMA store (async proxy) reads these stores
    named_barrier_sync(kBarrierVtFused, 32 * kVtWarps);  // every warp's part is in; the raw buffer is free again
    if (leader) {
      const VtItem at = vt_item<Cfg::kBlockN>(p, item);  // recomputed: not kept live across the transpose
#pragma unroll
      for (int ch = 0; ch < Cfg::kVtFull; ++ch) {
        tma_store_4d<kVtStoreHint>(&tma.v, vt + ch * kHeadDim * 128, at.key0 + 128 * ch, 0, at.head, at.batch);
      }
      if constexpr (Cfg::kVtTail > 0) {
        tma_store_4d<kVtStoreHint>(&tma.v_tail, vt + Cfg::kVtFull * kHeadDim * 128, at.key0 + 128 * Cfg::kVtFull, 0,
                                   at.head, at.batch);
      }
      bulk_commit_group();
      bulk_wait_group_all();  // written to global memory, not only read out of the staging buffer
      fence_proxy_async_global();
      asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(p.vt_ready + 1 + item), "r"(1) : "memory");
      if constexpr (Cfg::kVtHeadCount) {
        asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(vt_head_count(p, at.batch, at.head)) : "memory");
      }
    }
  }
}

}  // namespace flashcore
