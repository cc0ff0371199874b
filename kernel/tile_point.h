// A compile-time point of the Hopper kernel: keys per K/V tile, K/V ring stages, consumer warpgroups, ping-pong,
// early rescale, producer registers (the setmaxnreg split). Packed in one int so it can be a template argument
// (C++17) and travel in fc_params.point; flashcore/points.py packs the same bits (tests/test_points.py checks).
// The library compiles the head dims' default points (kernel/tile_choice.h) plus those of its points file
// (kernel/tuned_points.inc, which make tune writes); fc_points() lists them.
#pragma once

namespace flashcore {

constexpr int kPointFlag = 1 << 24;  // set in every code, so 0 can mean "the default"
// FP8 only: V is transposed in shared memory by the producer warpgroup for every query tile (kernel/fp8_vt_smem.cuh),
// not read from the copy the kernel writes once per call (kernel/fp8_vt_fused.cuh). The host picks per call
// (kernel/tile_choice.h use_fp8_vt_smem); the 16-bit points and make tune's table never set it.
constexpr int kPointVtSmem = 1 << 22;

constexpr int point_code(int block_n, int stages, int consumer_wgs, int pingpong, int rescale_early,
                         int producer_regs) {
  return block_n | stages << 9 | consumer_wgs << 13 | pingpong << 15 | rescale_early << 16 |
         (producer_regs / 8) << 17 | kPointFlag;
}

template <int kCode>
struct TilePoint {
  static_assert(kCode & kPointFlag, "not a point code (kernel/tile_point.h)");
  static constexpr int kBlockN = kCode & 511;
  static constexpr int kStages = (kCode >> 9) & 15;
  static constexpr int kConsumerWGs = (kCode >> 13) & 3;
  static constexpr bool kPingPong = (kCode >> 15) & 1;
  static constexpr bool kRescaleEarly = (kCode >> 16) & 1;
  static constexpr int kProducerRegs = ((kCode >> 17) & 31) * 8;
  static constexpr bool kVtSmem = (kCode & kPointVtSmem) != 0;
};

}  // namespace flashcore
