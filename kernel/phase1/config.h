// Compile-time configuration of the phase-1 kernel: tile sizes, thread roles, constants.
// Every choice carries its reason. Shapes are in elements unless a name says bytes.
#pragma once
#include <cstdint>

#include "../common.h"

namespace flashcore {

// Thread roles (phase 1): warp 0 loads (producer), warps 1..kConsumerWarps compute (consumers).
// Each consumer warp owns 16 query rows: the M of one mma.sync.m16n8k16.
constexpr int kProducerWarps = 1;
constexpr int kConsumerWarps = 4;
constexpr int kRowsPerWarp = 16;
constexpr int kThreads = 32 * (kProducerWarps + kConsumerWarps);

template <int kHeadDim>
struct TileConfig {
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head dim must be 64, 128 or 256");
  static_assert(kHeadDim % 16 == 0, "head dim must be a multiple of the mma K (16)");
  // BLOCK_M: one 16-row slab per consumer warp.
  static constexpr int kBlockM = kConsumerWarps * kRowsPerWarp;
  // BLOCK_N: 64 keys keep S at 32 fp32 registers per thread; hdim 256 keeps 64 too, since its O
  // accumulator (128 fp32 registers) plus S (32) still fit under the 255-register cap without spills.
  static constexpr int kBlockN = 64;
  // Two K/V stages: the producer fills one while the consumers read the other (double buffering).
  static constexpr int kStages = 2;
  // Two CTAs per SM where shared memory allows it (hdim <= 128), so one CTA's softmax hides the
  // other's loads; hdim 256 needs 160 KB and runs one CTA per SM.
  static constexpr int kMinBlocksPerSm = kHeadDim <= 128 ? 2 : 1;

  static constexpr int kQTileBytes = kBlockM * kHeadDim * 2;
  static constexpr int kKVTileBytes = kBlockN * kHeadDim * 2;
  static constexpr int kBarrierBytes = 8 * (1 + 2 * kStages);
  static constexpr int kSmemBytes = kQTileBytes + 2 * kStages * kKVTileBytes + kBarrierBytes;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory exceeds the 227 KB an H100 block may use");
  static_assert(kSmemBytes * kMinBlocksPerSm <= 228 * 1024, "blocks per SM do not fit in shared memory");
  static_assert(kBlockN % 16 == 0 && kBlockM % 16 == 0, "tiles must be whole mma tiles");
};

}  // namespace flashcore
