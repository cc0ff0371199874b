// Tile and register configuration of the Hopper kernel (TMA loads, wgmma GEMMs, warp specialization).
#pragma once
#include <cuda.h>

#include "config.h"

namespace flashcore {

// Tensor maps of Q, K and V, passed by value as a __grid_constant__ kernel parameter (TMA reads them there).
struct TmaParams {
  CUtensorMap q, k, v;
};

// Warpgroup 0 produces (one thread issues every TMA load); the consumer warpgroups own 64 query rows each
// (one wgmma M). setmaxnreg splits (FA3's): 2 consumers 24 / 240, 3 consumers 32 / 160 registers.
template <int kConsumerWGs>
struct RegisterSplit {
  static_assert(kConsumerWGs == 2 || kConsumerWGs == 3, "2 or 3 consumer warpgroups");
  static constexpr int kProducer = kConsumerWGs == 2 ? 24 : 32;
  static constexpr int kConsumer = kConsumerWGs == 2 ? 240 : 160;
  static_assert(kProducer * 128 + kConsumer * 128 * kConsumerWGs <= 65536, "register split exceeds the SM's file");
};

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
  kBarrierIssueWG0 = 1,  // + consumer warpgroup index (up to 3 consumers: ids 1..3)
};

template <int kHeadDim>
struct HopperTileConfig {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head dim must be 64, 128 or 256");
  // hdim 64: 3 consumer warpgroups (BLOCK_M 192): each K/V tile serves more rows, and the short GEMMs
  // leave softmax as the long pole, which a third warpgroup in the ping-pong ring helps hide.
  static constexpr int kConsumerWGs = kHeadDim == 64 ? 3 : 2;
  static constexpr int kThreads = 128 * (1 + kConsumerWGs);
  using Registers = RegisterSplit<kConsumerWGs>;
  static constexpr int kBlockM = 64 * kConsumerWGs;
  // BLOCK_N: hdim 64: 128 keys (S is 64 fp32 registers per thread, 160 with 3 consumers). hdim 128: 176
  // (FA3's non-causal choice; 208 KB of shared memory, S 88 + O 64 + P 44 registers within 240). hdim 256:
  // 80, so that Q (64 KB) + 2 stages of K and V (4 x 40 KB) fit in 227 KB and O (128) + S (40) in 240.
  static constexpr int kBlockN = kHeadDim == 256 ? 80 : kHeadDim == 128 ? 176 : 128;
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
