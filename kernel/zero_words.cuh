// The words a launch needs at 0 (the dynamic order's tile counter, the FP8 V^T copy's claim counter and flags), cleared
// by a kernel of their own that the attention kernel follows as a programmatic dependent launch: its CTAs launch and
// set up as this kernel's blocks exit, without waiting for the grid's completion, and only the producer warpgroup,
// the one that reads those words, waits for that (grid_dependency_wait). Against a cudaMemsetAsync before a plain
// launch: +0.2-0.5 % on FP8 S4K/S8K causal calls. This kernel never triggers the
// dependent launch early: a trigger at its start cost those calls 11-14 us.
#pragma once

#include "grid_dependency.h"

namespace flashcore {

constexpr int kZeroThreads = 256;

// static: one copy per translation unit (every point object that launches attention kernels has one).
static __global__ void __launch_bounds__(kZeroThreads) zero_words_kernel(int* words, int count) {
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < count;
       i += static_cast<int>(gridDim.x * blockDim.x)) {
    words[i] = 0;
  }
}

}  // namespace flashcore
