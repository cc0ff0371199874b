// Tile and register configuration of the Hopper kernel (TMA loads, wgmma GEMMs, warp specialization).
#pragma once
#include <cuda.h>

#include "config.h"

namespace flashcore {

// Tensor maps of Q, K and V, passed by value as a __grid_constant__ kernel parameter (TMA reads them there).
struct TmaParams {
  CUtensorMap q, k, v;
};

// Warpgroup 0 produces (one thread issues every TMA load); warpgroups 1..2 consume, 64 query rows each
// (one wgmma M). 384 threads.
constexpr int kHopperConsumerWGs = 2;
constexpr int kHopperThreads = 128 * (1 + kHopperConsumerWGs);
// setmaxnreg split: 24 x 128 + 240 x 256 = 64512 <= 65536 registers (FA3's split for 2 consumer warpgroups):
// the producer needs almost none, the consumers hold O (up to 128 fp32) and S (up to 64 fp32) per thread.
constexpr int kProducerRegs = 24;
constexpr int kConsumerRegs = 240;
static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kHopperConsumerWGs <= 65536, "register split too big");

// mbarrier slots: K and V have their own full/empty barriers, so K(n) is released as soon as S(n) is done
// while V(n) stays until P(n) V(n) is; the producer can refill K a full iteration ahead.
template <int kStages>
struct HopperSlots {
  static constexpr int kQFull = 0;
  static constexpr int kKFull = 1;
  static constexpr int kVFull = 1 + kStages;
  static constexpr int kKEmpty = 1 + 2 * kStages;
  static constexpr int kVEmpty = 1 + 3 * kStages;
  static constexpr int kCount = 1 + 4 * kStages;
};

// Named barrier ids (bar.sync / bar.arrive). 0 is __syncthreads; each consumer warpgroup owns one
// "may issue GEMMs" barrier for the ping-pong schedule (kernel_wgmma.cuh).
enum NamedBarrier : int {
  kBarrierSyncThreads = 0,
  kBarrierIssueWG1 = 1,
  kBarrierIssueWG2 = 2,
};

template <int kHeadDim>
struct HopperTileConfig {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head dim must be 64, 128 or 256");
  static constexpr int kBlockM = 64 * kHopperConsumerWGs;
  // BLOCK_N: 128 keys for hdim <= 128 (S is 64 fp32 registers per thread); hdim 256 takes 64 so that
  // Q (64 KB) + 2 stages of K and V (4 x 32 KB) fit in shared memory and O (128 registers) + S (32) fit in 240.
  static constexpr int kBlockN = kHeadDim == 256 ? 64 : 128;
  static constexpr int kStages = 2;
  // TMA boxes and wgmma atoms are 64 columns (128 bytes, the 128-byte swizzle span) wide.
  static constexpr int kChunks = kHeadDim / 64;
  static constexpr int kQBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVBytes = kBlockN * kHeadDim * 2;
  static constexpr int kBarrierBytes = 8 * (1 + 4 * kStages);
  static constexpr int kAlign = 1024;  // 128-byte-swizzled tiles start on 1024-byte boundaries
  static constexpr int kSmemBytes = kAlign + kQBytes + 2 * kStages * kKVBytes + kBarrierBytes;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory exceeds the 227 KB an H100 block may use");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "BLOCK_N must be a valid wgmma N");
  static_assert(kQBytes % kAlign == 0 && kKVBytes % kAlign == 0, "tiles must keep 1024-byte alignment");
};

}  // namespace flashcore
