// The words a launch needs at 0 (the dynamic order's tile counter, the FP8 V^T copy's claim counter and flags), cleared
// by a kernel of their own that the attention kernel follows as a programmatic dependent launch: its CTAs launch and
// set up as this kernel's blocks exit, without waiting for the grid's completion, and only the producer warpgroup,
// the one that reads those words, waits for that (grid_dependency_wait). Against a cudaMemsetAsync before a plain
// launch: +0.2-0.5 % on FP8 S4K/S8K causal calls. This kernel never triggers the
// dependent launch early: a trigger at its start cost those calls 11-14 us.
// The same kernel writes the sequences' longest-first order where the plan asks for it (BatchOrder below): the host
// never sees per-sequence lengths, so the device sorts them where it already has a launch.
#pragma once

#include <algorithm>

#include "grid_dependency.h"
#include "heuristics.h"

namespace flashcore {

constexpr int kZeroThreads = 256;

// Ragged decode's sequence order (kernel/tile_scheduler.h tile_coord): out[rank] = the sequence of that rank, longest
// first by its used keys (seqused, else cu[b + 1] - cu[b]); equal lengths keep their order. out nullptr: none.
// The attention kernel checks the length values themselves (kernel/seqlens.h).
struct BatchOrder {
  int* out;
  const int* seqused;
  const int* cu;
  int batch;  // <= kOrderMaxBatch
};

__device__ __forceinline__ int order_key(const BatchOrder& o, int b) {
  return o.seqused != nullptr ? __ldg(o.seqused + b) : __ldg(o.cu + b + 1) - __ldg(o.cu + b);
}

// Blocks that cover sequences rank them: each thread one sequence, against every key in shared memory (B <= 2048:
// at most 2048 compares a thread, a few microseconds at that batch, which a decode of 2048 sequences
// runs for milliseconds).
__device__ __forceinline__ void write_order(const BatchOrder& o) {
  __shared__ int keys[kOrderMaxBatch];
  if (o.out == nullptr || static_cast<int>(blockIdx.x) * kZeroThreads >= o.batch) return;  // uniform per block
  for (int b = static_cast<int>(threadIdx.x); b < o.batch; b += kZeroThreads) keys[b] = order_key(o, b);
  __syncthreads();
  const int b = static_cast<int>(blockIdx.x) * kZeroThreads + static_cast<int>(threadIdx.x);
  if (b >= o.batch) return;
  o.out[order_rank(keys, o.batch, b)] = b;
}

// Blocks for `words` zeroed words and an order of `batch` sequences (0: none).
inline int zero_blocks(int words, int batch) {
  const int zero = std::min((words + kZeroThreads - 1) / kZeroThreads, 64);
  return std::max(zero, (batch + kZeroThreads - 1) / kZeroThreads);
}

// static: one copy per translation unit (every point object that launches attention kernels has one).
static __global__ void __launch_bounds__(kZeroThreads) zero_words_kernel(int* words, int count, BatchOrder order) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < count;
       i += static_cast<int>(gridDim.x * blockDim.x)) {
    words[i] = 0;
  }
  write_order(order);
}

}  // namespace flashcore
