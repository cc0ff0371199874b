// FP8 V transposed in shared memory, for calls with few query rows per K/V head (decode, short prefill; the host rule
// is kernel/tile_choice.h use_fp8_vt_smem). TMA loads V as it is into a raw ring (K's boxes and swizzle), and warps
// 1-3 of the producer warpgroup, idle otherwise, transpose each block into the V stage the consumers read, in
// kernel/fp8_vt.cuh's key order (FA3 transposes in its producer warpgroup too). No copy of V: decode no longer reads
// and writes the whole V cache per call (B64 H32/8 S8K D128: 0.76 -> 0.41 ms against a pre-pass kernel that wrote the copy). Long
// prefill takes the copy (kernel/fp8_vt_fused.cuh, the same transposing step once per block): there every block is
// read by many query tiles, and transposing it for each costs more.
//
// V^T stage: kBlockN / 128 chunks [kHeadDim rows][128 keys] (128-byte swizzle), then at most one [kHeadDim][64 keys]
// (64-byte swizzle), as the consumers' descriptors read it (hopper_mainloop.h pv_issue). ldmatrix.trans hands the
// transposing threads their keys in vt_key's order, so the permutation costs nothing. Keys past seqlen_k are zeros:
// TMA fills rows outside the tensor with them (their P is 0, and 0 * NaN would not be); a sequence's rows past its
// keys inside the tensor (a cache's, the next packed sequence's) the consumers zero (consumer_mainloop.cuh scrub_vt).
#pragma once
#include <cstdint>

#include "barriers.h"
#include "fp8_vt.cuh"
#include "tma.h"

namespace flashcore {

constexpr int kVtWarps = 3;    // warps 1..3 of the producer warpgroup (warp 0's thread 0 issues the TMA loads)
constexpr int kVtStop = -1;    // the producer's word for "no more blocks"; otherwise its O-over-V wait word
                               // (o_empty_wait below; set for the tile's first block only)

// Whether a point runs paged caches: the 16-bit 2-consumer points (hopper_config.h kPagedCapable) and FP8's hdim-128
// ones with V transposed here whose producer warpgroup keeps 40 registers for the page walk beside 1 or 2 consumers
// (its default and decode points; hdim 256's 24-register default spilled 108-188 B with it). Paged FP8 runs at hdim
// 128 only (validate.cu check_fp8), so the hdim-64 and -256 decode points, whose producers have the registers,
// compile no page walk. The transposing warps read the raw ring either way.
template <typename Cfg>
inline constexpr bool kRunsPages =
    Cfg::kPagedCapable || (Cfg::kVtSmem && Cfg::kRowBytes == 128 && Cfg::kConsumerWGs <= 2 &&
                           Cfg::Registers::kPagedProducer >= 40);

// The O-over-V wait word that the producer thread computes for a tile's V(0) and V(1) (hopper_mainloop.h): bit w
// (w < 3), wait for consumer warpgroup w's kOEmpty + w phase, whose parity is bit 3. The producer thread waits on it
// before it loads V; with V transposed in shared memory, the transposing warps wait on it (the word beside the raw
// stage) before they write the V stage.
template <typename Cfg>
__device__ __forceinline__ void o_empty_wait(uint64_t* bars, int word) {
  for (int w = 0; w < Cfg::kConsumerWGs; ++w) {
    if (word & (1 << w)) mbarrier_wait_sleep(&bars[Cfg::Slots::kOEmpty + w], (word >> 3) & 1);
  }
}

// The word beside raw stage s: slot `slot` of the barrier array (8 bytes, not a barrier). 32-bit shared addresses:
// a generic pointer kept for it made the 32-register producer spill.
__device__ __forceinline__ void vt_flags_store(uint64_t* bars, int slot, int flags) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(smem_addr(bars + slot)), "r"(flags) : "memory");
}
__device__ __forceinline__ int vt_flags_load(const uint64_t* bars, int slot) {
  int flags;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(flags) : "r"(smem_addr(bars + slot)) : "memory");
  return flags;
}

// Four 8x8 matrices of 16-bit elements, transposed: register i gets elements (2 (lane % 4), lane / 4) and
// (2 (lane % 4) + 1, lane / 4) of matrix i, whose row r lane 8 i + r addresses (PTX ISA ldmatrix .trans).
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// Four 8x8 matrices of 16-bit elements: register i holds elements (lane / 4, 2 (lane % 4)) and (.., + 1) of matrix
// i, whose row r lane 8 i + r addresses (16 bytes).
__device__ __forceinline__ void stsm_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}

// One block: raw V [kChunks][kBlockN keys][kSpan bytes] (TMA's swizzle) at shared address `raw` into V^T at `vt`, by
// one of the kVtWarps warps. A step is 32 keys x 16 d: ldmatrix.trans of the four 8-key x 16-byte matrices gives
// lane (c = lane / 4, q = lane % 4) keys {2q, 2q+1}, {8+2q, 9+2q}, {16+2q, ..}, {24+2q, ..} of d pair (2c, 2c + 1);
// two byte permutes per pair of registers split them into the 4-key words of rows 2c and 2c + 1 at positions 4q and
// 16 + 4q, and stmatrix stores them (matrix j: rows from word j of lanes 4r..4r+3). Lanes 16-31 put the odd row in
// word 0, so each store matrix holds rows 2r + (r >= 4) (or the others): 8 distinct residues mod 8, 8 distinct
// swizzled 16-byte slots, no bank conflict. The loads' 8 keys are consecutive: distinct swizzled slots too.
template <typename Cfg>
__device__ __forceinline__ void transpose_v_block(uint32_t raw, uint32_t vt, int warp, int lane) {
  constexpr int kHeadDim = Cfg::kRowBytes;  // one byte per element
  constexpr int kUnits = kHeadDim / 16;     // 16-byte units of a key row
  constexpr int kSpanUnits = Cfg::kSpan / 16;
  constexpr int kSteps = Cfg::kBlockN / 32 * kUnits;
  // Steps in flight per warp: their loads are all issued before the first store (the asm statements keep their
  // order), so a warp waits for one shared-memory round trip per kIlp steps, not per step. 4 needs the 40-register
  // producer. The 24-register one (hdim 256) takes 1: at 2 it spilled 72-96 B and ran 5 % slower.
  constexpr int kIlp = Cfg::Registers::kProducer >= 40 ? 4 : 1;
  // Per lane: the load's key row is 32 g + lane, whose swizzle (key % 8, or (key / 2) % 4 for 64-byte rows) does not
  // depend on g; the store's row is 16 u + d_lane, whose swizzle does not depend on u either. The swizzles XOR
  // address bits 4-6 (4-5), which the terms added per step (multiples of 128, or of 1024) leave alone.
  const int j = lane / 8, d_lane = 2 * (lane % 8) + ((j & 1) ^ (lane % 8 >= 4 ? 1 : 0));
  const uint32_t src_lane = raw + lane * Cfg::kSpan;
  const uint32_t src_swz = (Cfg::kSpan == 128 ? lane % 8 : (lane >> 1) % 4) << 4;
  const uint32_t dst_full = vt + d_lane * 128 + ((((j >> 1) ^ d_lane) % 8) << 4);
  const uint32_t dst_tail = vt + Cfg::kVtFull * kHeadDim * 128 + d_lane * 64 + ((((j >> 1) ^ (d_lane >> 1)) % 4) << 4);
  const uint32_t sel_even = lane >= 16 ? 0x7531 : 0x6420;  // bytes 0, 2 of each register, or 1, 3
#pragma unroll 1
  for (int base = warp; base < kSteps; base += kVtWarps * kIlp) {
    uint32_t v[kIlp][4];
#pragma unroll
    for (int t = 0; t < kIlp; ++t) {
      const int step = base + kVtWarps * t, g = step / kUnits, u = step % kUnits;  // 32-key group, 16 d
      if (kSteps % (kVtWarps * kIlp) == 0 || step < kSteps) {
        ldsm_x4_trans(src_lane + g * 32 * Cfg::kSpan + (u / kSpanUnits) * Cfg::kBlockN * Cfg::kSpan +
                          (((u % kSpanUnits) << 4) ^ src_swz),
                      v[t]);
      }
    }
#pragma unroll
    for (int t = 0; t < kIlp; ++t) {
      const int step = base + kVtWarps * t, g = step / kUnits, u = step % kUnits;
      if (kSteps % (kVtWarps * kIlp) == 0 || step < kSteps) {
        const uint32_t w[4] = {__byte_perm(v[t][0], v[t][1], sel_even), __byte_perm(v[t][0], v[t][1], sel_even ^ 0x1111),
                               __byte_perm(v[t][2], v[t][3], sel_even), __byte_perm(v[t][2], v[t][3], sel_even ^ 0x1111)};
        // V^T row 16 u + d_lane; 16-key unit 2 (g % 4) + j / 2 of chunk g / 4 (the swizzle XORs the unit's bits).
        const int chunk = g / 4;
        const uint32_t dst = (chunk < Cfg::kVtFull ? dst_full + chunk * kHeadDim * 128 + u * 16 * 128
                                                   : dst_tail + u * 16 * 64) ^ ((2 * (g % 4)) << 4);
        stsm_x4(dst, w);
      }
    }
  }
}

// Warps 1..3 of the producer warpgroup: for every V block the producer thread loads (in its order), wait for the raw
// stage and for the V stage to be free (and for kOEmpty where the producer says so), transpose, release the raw
// stage, make the stores visible to wgmma (async proxy) and arrive on the V stage's full barrier (one arrival per
// warp). Leaves on kVtStop.
template <typename Cfg>
__device__ void transpose_v_ring(const uint8_t* raw_smem, const uint8_t* v_smem, uint64_t* bars, int warp,
                                 int lane) {
  using Slots = typename Cfg::Slots;
  const uint32_t raw0 = smem_addr(raw_smem), vt0 = smem_addr(v_smem);
  for (int b = 0;; ++b) {
    const int s = b % Cfg::kStages;
    const uint32_t parity = (b / Cfg::kStages) & 1;
    mbarrier_wait_sleep(&bars[Slots::kVRawFull + s], parity);
    // Lane 0 reads the word and is the lane that releases the stage: the read is ordered before that arrival
    // without relying on __syncwarp (compute-sanitizer racecheck did not credit it when every lane read).
    const int flags = __shfl_sync(0xffffffffu, lane == 0 ? vt_flags_load(bars, Slots::kVtFlags + s) : 0, 0);
    if (flags == kVtStop) break;
    if (Cfg::kOAliasV) o_empty_wait<Cfg>(bars, flags);  // the last tile's stores (every warpgroup's bit is set)
    mbarrier_wait_sleep(&bars[Slots::kVEmpty + s], parity ^ 1);  // the first pass finds every stage free
    transpose_v_block<Cfg>(raw0 + s * Cfg::kKVBytes, vt0 + s * Cfg::kKVBytes, warp, lane);
    __syncwarp();
    if (lane == 0) mbarrier_arrive(&bars[Slots::kVRawEmpty + s]);
    fence_proxy_async_shared();
    __syncwarp();
    if (lane == 0) mbarrier_arrive(&bars[Slots::kVFull + s]);
  }
}

}  // namespace flashcore
