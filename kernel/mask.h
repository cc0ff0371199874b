// Score masking shared by every kernel version. Key j of a sequence with q_len queries and k_len keys is visible
// to query row i iff
//   j < k_len,  j <= i + diag + window_right (when p.causal: causal, window_right 0, or a right window bound),
//   j >= i + diag - window_left (when window_left >= 0),   with diag = k_len - q_len (bottom-right alignment),
//   j >= floor (a left-padded paged cache: its keys are rows [floor, k_len) of the sequence's pages),
//   c <= j < c + C with c the start of the chunk of i + diag (FA3's attention_chunk C > 0; chunks from floor);
// other scores get -inf. Fragment layout: s[nt][e] holds row g + 8*(e/2), column 8*nt + 2*(lane%4) + e%2 of a
// 16-row slab (mma.sync C fragments and wgmma accumulators share it).
#pragma once
#include <cmath>
#include <cstdint>

#include "common.h"
#include "params.h"

namespace flashcore {

// The key extent of one sequence: what the mask needs besides the call's window.
struct SeqMask {
  int k_len;
  int diag;   // k_len - q_len
  int batch;  // the sequence: its paged cache's left pad, where there is one, is read where a mask needs it
};

__device__ __forceinline__ SeqMask seq_mask(int q_len, int k_len, int batch = 0) {
  return SeqMask{k_len, k_len - q_len, batch};
}

// Keys below it are not the sequence's: a paged cache's left pad (its pages keep the pad's rows, so the page walk
// keeps page-aligned boxes), 0 elsewhere. Read when needed, not kept: a register held across the key loop made the
// 16-bit hdim 256 kernels spill.
__device__ __forceinline__ int key_floor(const KernelParams& p, const SeqMask& m) {
  return p.leftpad_k != nullptr && p.page_table != nullptr ? __ldg(p.leftpad_k + m.batch) : 0;
}

// The first key of the chunk holding key-aligned position x (FA3's attention_chunk: chunks of p.attention_chunk keys
// counted from the sequence's first key, `floor`). A position left of the keys is in a chunk left of them, which
// holds no key whichever it is: the one just left of floor stands for all (no signed division). The division is
// FastDiv's multiply-shift: a `/` by a runtime value spilled the 16-bit hdim 256 kernels.
__device__ __forceinline__ int chunk_start(const KernelParams& p, int floor, int x) {
  const int d = x - floor;
  return d >= 0 ? floor + p.div_chunk(d) * p.attention_chunk : floor - p.attention_chunk;
}

// Whether rows can have a left bound: a window, a paged cache's left pad or chunks (the call's, not the row's). The
// launch picks a kLocal kernel by it (run_tiles.cuh).
__host__ __device__ __forceinline__ bool has_left_bound(const KernelParams& p) {
  return p.window_left >= 0 || p.attention_chunk > 0 || (p.leftpad_k != nullptr && p.page_table != nullptr);
}

// One past the last key that exists (widened by one under the planted tail-mask fault).
__device__ __forceinline__ int key_end(const KernelParams& p, const SeqMask& m) {
  return p.fault == kFaultTailMaskOffByOne ? m.k_len + 1 : m.k_len;
}

// Scores of columns 8 nt and 8 nt + 1 (past the thread's first column) of one row: each keeps its value where the
// row's half (both halves of row_h2) >= its column's half, else becomes -inf. Integers 1024..2047 are exact in f16,
// so the row's half is 1025 + hi (f16 bits 0x6401 + hi, hi clamped to [-1, 1022]) and the columns' are 1025 + 8 nt
// and 1026 + 8 nt: one setp.f16x2 (HSETP2) sets a predicate for each score, where two ISETPs did.
__device__ __forceinline__ void mask_pair(float& s0, float& s1, uint32_t row_h2, int nt) {
  const uint32_t cols = (0x6401u + 8 * nt) | (0x6402u + 8 * nt) << 16;
  asm("{\n\t.reg .pred lo, hi;\n\t"
      "setp.ge.f16x2 lo|hi, %2, %3;\n\t"
      "selp.f32 %0, %0, 0fFF800000, lo;\n\t"
      "selp.f32 %1, %1, 0fFF800000, hi;\n\t}"
      : "+f"(s0), "+f"(s1)
      : "r"(row_h2), "r"(cols));
}

// Without a left window bound (causal and tail blocks of dense calls), kPairs tests the first kPairTiles column tiles
// of a row two scores at a time (mask_pair), the rest one at a time. FP8 kernels take it: with every tile paired,
// ptxas moved FP8 hdim 128's unmasked loop (its turn's BAR.SYNC after 83 of 98 exponentials, not 5) and that cost
// 1.3-2.7 %; at 16 paired tiles the loop is head's, instruction for instruction. The 16-bit
// kernels keep one compare per score: pairs moved the unmasked loops of 16-bit hdim 64 and 256.
constexpr int kPairTiles = 16;
static_assert(kPairTiles * 8 <= 1022, "paired columns must stay below hi's clamp, exact in f16");

// Every score whose column (past the thread's first) lies outside [lo, hi] of its row becomes -inf.
template <int kNTiles, int kLive>
__device__ __forceinline__ void mask_outside(float (&s)[kNTiles][4], const int (&lo)[2], const int (&hi)[2]) {
#pragma unroll
  for (int nt = 0; nt < kLive; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = nt * 8 + (e % 2);
      if (col > hi[e / 2] || col < lo[e / 2]) s[nt][e] = -INFINITY;
    }
  }
}

// `rows.row` are the query indices of the thread's two fragment rows; `key0` the block's first key.
// Row i sees keys [lo(i), hi(i)]: a score costs a compare of its compile-time column offset against hi(i) minus this
// thread's first column and a select (kPairs: half a compare); a left window bound adds a compare against lo(i).
// kLive: the tiles past it are not read again (a narrow last block), so they take no mask. kLeftBound false: the
// kernel never runs with a left bound (has_left_bound false on every call: kernel_wgmma.cuh kLocal), so its branch
// is compiled out.
template <int kNTiles, int kLive = kNTiles, bool kPairs = false, bool kLeftBound = true>
__device__ __forceinline__ void mask_scores(float (&s)[kNTiles][4], const KernelParams& p, const SeqMask& m,
                                            const ThreadRows& rows, int key0, int lane) {
  const int end = key_end(p, m);
  const int first_col = key0 + 2 * (lane % 4);
  int hi[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int limit = p.causal ? min(end - 1, rows.row[r] + m.diag + p.window_right) : end - 1;
    hi[r] = limit - first_col;
  }
  if (!kLeftBound || !has_left_bound(p)) {  // no left bound: one compare per score, or per two (kPairs)
    uint32_t row_h2[2] = {0, 0};
    if constexpr (kPairs) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint32_t h = 0x6401u + static_cast<uint32_t>(min(max(hi[r], -1), 1022));
        row_h2[r] = h | h << 16;
      }
    }
#pragma unroll
    for (int nt = 0; nt < kLive; ++nt) {
      if (kPairs && nt < kPairTiles) {
        mask_pair(s[nt][0], s[nt][1], row_h2[0], nt);
        mask_pair(s[nt][2], s[nt][3], row_h2[1], nt);
        continue;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (nt * 8 + (e % 2) > hi[e / 2]) s[nt][e] = -INFINITY;
      }
    }
    return;
  }
  int lo[2];
  const int floor = key_floor(p, m);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    lo[r] = max(p.window_left >= 0 ? rows.row[r] + m.diag - p.window_left : floor, floor) - first_col;
  }
  mask_outside<kNTiles, kLive>(s, lo, hi);
  // FA3's chunks, a pass of their own: folded into the bounds above, the chunk's two bounds spilled the soft-capped
  // 16-bit hdim 256 kernels (4 B); as a second pass only calls with chunks pay for it.
  if (p.attention_chunk > 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      lo[r] = chunk_start(p, floor, rows.row[r] + m.diag) - first_col;
      hi[r] = lo[r] + p.attention_chunk - 1;
    }
    mask_outside<kNTiles, kLive>(s, lo, hi);
  }
}

// The block bounds below take a left bound (a window, chunks, a paged cache's left pad) where kLocal: kernels that
// never see one (kernel_wgmma.cuh kLocal) compile it out; their 24-32-register producers spilled 8-100 B with it.

// One past the last key that any query row <= last_row sees (widened by the planted tail fault, as mask_scores is).
template <bool kLocal = true>
__device__ __forceinline__ int visible_key_end(const KernelParams& p, const SeqMask& m, int last_row) {
  const int end = key_end(p, m);
  const int right = p.causal ? min(end, max(0, last_row + m.diag + p.window_right + 1)) : end;
  if (!kLocal || p.attention_chunk <= 0) return right;
  return max(0, min(right, chunk_start(p, key_floor(p, m), last_row + m.diag) + p.attention_chunk));
}

// The first key that the query row `row` sees (0 without a left bound).
template <bool kLocal = true>
__device__ __forceinline__ int visible_key_begin(const KernelParams& p, const SeqMask& m, int row) {
  // The window's term stays in kernels without kLocal (0 there: no call gives them a window): taken out, it moved
  // ptxas's allocation of the FP8 hdim 256 kernels, whose spills went from 40 to 80 B.
  const int window = p.window_left >= 0 ? max(0, row + m.diag - p.window_left) : 0;
  if (!kLocal || !has_left_bound(p)) return window;
  const int floor = key_floor(p, m);
  const int left = max(window, floor);
  return p.attention_chunk > 0 ? max(left, chunk_start(p, floor, row + m.diag)) : left;
}

// Keys below this limit are visible (from the right) to every row of a tile whose first query row is row_first;
// 0 under the planted tail-mask fault, which masks every block.
template <bool kLocal = true>
__device__ __forceinline__ int unmasked_key_limit(const KernelParams& p, const SeqMask& m, int row_first) {
  if (p.fault == kFaultTailMaskOffByOne) return 0;
  const int right = p.causal ? min(m.k_len, max(0, row_first + m.diag + p.window_right + 1)) : m.k_len;
  if (!kLocal || p.attention_chunk <= 0) return right;
  return max(0, min(right, chunk_start(p, key_floor(p, m), row_first + m.diag) + p.attention_chunk));
}

}  // namespace flashcore
