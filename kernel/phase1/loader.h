// Producer warp: copies Q once and K/V tiles per step from global into swizzled shared memory with
// cp.async (16 bytes per lane per copy); each tile completes on its mbarrier. Rows past the sequence end are zero-filled (src-size 0), so
// consumers never read garbage: masked scores are -inf and the zero V rows add nothing.
#pragma once
#include "../barriers.h"
#include "config.h"
#include "mma_sync.h"
#include "../params.h"

namespace flashcore {

// Zero-filling 16-byte asynchronous copy: copies `valid` ? 16 : 0 bytes and fills the rest with zeros.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

// Copies rows [row0, row0 + kRows) of one head, clipped at `seqlen`, into a swizzled [kRows][kHeadDim] tile.
// `serial` (test-only kFaultSlow): lane 0 issues every copy, so the warp keeps few bytes in flight.
template <int kHeadDim, int kRows>
__device__ __forceinline__ void load_tile(uint8_t* tile_smem, const void* head_base, int64_t row_stride, int row0,
                                          int seqlen, int lane, bool serial = false) {
  constexpr int kChunksPerRow = kHeadDim / kChunkElems;
  constexpr int kChunks = kRows * kChunksPerRow;
  static_assert(kChunks % 32 == 0, "a tile must split evenly over the 32 producer lanes");
  const uint32_t tile_addr = smem_addr(tile_smem);
  const auto* base = static_cast<const uint16_t*>(head_base);
  auto copy_chunk = [&](int i) {
    const int row = i / kChunksPerRow;
    const int chunk = i % kChunksPerRow;
    const bool valid = row0 + row < seqlen;
    const uint16_t* src = valid ? base + (row0 + row) * row_stride + chunk * kChunkElems : base;
    cp_async_16(tile_addr + swizzled_offset_bytes<kHeadDim>(row, chunk), src, valid);
  };
  if (serial) {
    if (lane == 0) {
      for (int i = 0; i < kChunks; ++i) copy_chunk(i);
    }
    return;
  }
#pragma unroll 8
  for (int i = lane; i < kChunks; i += 32) copy_chunk(i);
}

// The producer's whole job for one query tile: Q, then K/V blocks [0, n_blocks) through the stage ring.
// Hand-off: after issuing a tile's copies each lane calls cp.async.mbarrier.arrive.noinc, which arrives
// on the tile's barrier once the lane's copies have landed, so the lane moves on without waiting.
template <int kHeadDim, typename Cfg>
__device__ void producer_loop(const KernelParams& p, uint8_t* q_smem, uint8_t* k_smem, uint8_t* v_smem,
                              uint64_t* bars, int batch, int head_q, int m_block, int n_blocks) {
  using Slots = BarrierSlots<Cfg::kStages>;
  const int lane = threadIdx.x % 32;
  const int head_kv = head_q / p.group;
  const auto* q_head = static_cast<const uint16_t*>(p.q) + batch * p.q_stride[0] + head_q * p.q_stride[2];
  const auto* k_head = static_cast<const uint16_t*>(p.k) + batch * p.k_stride[0] + head_kv * p.k_stride[2];
  const auto* v_head = static_cast<const uint16_t*>(p.v) + batch * p.v_stride[0] + head_kv * p.v_stride[2];

  load_tile<kHeadDim, Cfg::kBlockM>(q_smem, q_head, p.q_stride[1], m_block * Cfg::kBlockM, p.seqlen_q, lane);
  cp_async_arrive(&bars[Slots::kQFull]);

  // Test-only kFaultSlow: one lane issues the copies and each tile waits for the previous one to be released
  // (no prefetch). Single buffering alone can still saturate DRAM on decode, hence the single lane too.
  const bool slow = p.fault == kFaultSlow;
  for (int n_block = 0; n_block < n_blocks; ++n_block) {
    const int stage = n_block % Cfg::kStages;
    // Wait until the consumers released this stage; the first pass over the ring finds it free
    // (waiting on the parity of the phase before the first one returns at once).
    mbarrier_wait(&bars[Slots::kKVEmpty + stage], ((n_block / Cfg::kStages) & 1) ^ 1);
    const int row0 = n_block * Cfg::kBlockN;
    load_tile<kHeadDim, Cfg::kBlockN>(k_smem + stage * Cfg::kKVTileBytes, k_head, p.k_stride[1], row0, p.seqlen_k,
                                      lane, slow);
    load_tile<kHeadDim, Cfg::kBlockN>(v_smem + stage * Cfg::kKVTileBytes, v_head, p.v_stride[1], row0, p.seqlen_k,
                                      lane, slow);
    cp_async_arrive(&bars[Slots::kKVFull + stage]);
    if (slow) mbarrier_wait(&bars[Slots::kKVEmpty + stage], (n_block / Cfg::kStages) & 1);  // this tile released
  }
  // Keep the warp resident until its last copies have landed.
  asm volatile("cp.async.wait_all;" ::: "memory");
}

}  // namespace flashcore
