// Experiment only (make build NVCC_EXTRA=-DFLASHCORE_TIMELINE): clock64 stamps of a tile's phases for the first
// kTlCtas CTAs' first kTlTiles tiles, [cta][tile][role][stamp]: roles 0..2 the consumer warpgroups (thread 0; stamps
// 0 before the Q wait, 1 Q in, 2 first S ready, 3 first softmax done, 4 before the last P V, 5 after it, 6 epilogue
// done, 7 the tile's block count), role 3 the producer thread (0 loop top, 1 K(0) out, 2 kQEmpty, 3 Q out, 4 V(0)
// out, 5 all loads out), roles 4..5 block kTlStep's step of consumer warpgroups 0..1 (0 entry, 1 K/V in, 2 its
// turn to issue, 3 issued, 4 S ready, 5 softmax done, 6 P V done, 7 P packed), roles 6..7 the epilogue of consumer
// warpgroups 0..1 (0 finalized, 1 staging slot free, 2 O staged, 3 store issued, 4 store read (O over V), 5 LSE
// written; 6 and 7 the next block's step 1: entry, K/V in). fc_timeline_clear / fc_timeline_read (kernel/flashcore.cu)
// zero and copy them; bench/tile_timeline.py runs and summarizes them. Without
// the macro it compiles to nothing.
#pragma once
#include <cstdint>

namespace flashcore {

constexpr int kTlCtas = 16, kTlTiles = 48, kTlRoles = 8, kTlStamps = 8;
// One step of the loop, block kTlStep of each tile, per consumer warpgroup w (2 at most) in role kTlStepRole + w.
constexpr int kTlStep = 4, kTlStepRole = 4, kTlEpilogueRole = 6;
constexpr int kTlWords = kTlCtas * kTlTiles * kTlRoles * kTlStamps;

#ifdef FLASHCORE_TIMELINE
static __device__ long long g_timeline[kTlWords];
__device__ __forceinline__ void tl_put(int k, int role, int s, long long v) {
  if (blockIdx.x < kTlCtas && k < kTlTiles) {
    g_timeline[((blockIdx.x * kTlTiles + k) * kTlRoles + role) * kTlStamps + s] = v;
  }
}
#define FC_TL(k, role, s) ::flashcore::tl_put((k), (role), (s), clock64())
#define FC_TL_VALUE(k, role, s, v) ::flashcore::tl_put((k), (role), (s), (v))
#else
#define FC_TL(k, role, s) ((void)0)
#define FC_TL_VALUE(k, role, s, v) ((void)0)
#endif

}  // namespace flashcore
