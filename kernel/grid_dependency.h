// Programmatic dependent launch (PDL): a kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may
// start while the kernel before it on the stream is still running; it reads what that kernel wrote only after
// grid_dependency_wait. The attention kernel follows zero_words_kernel so (kernel/zero_words.cuh), and the split
// combine follows the attention kernel so (kernel/run_tiles.cuh): its launch and set-up overlap the attention grid's
// last CTAs instead of starting after the grid's completion.
#pragma once
#include <cuda_runtime.h>

namespace flashcore {

// Waits until the grid this launch depends on programmatically has completed and its writes are visible; returns at
// once in a launch without such a dependency.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// The launch attribute that makes a launch a programmatic dependent of the kernel before it on the stream.
inline cudaLaunchAttribute programmatic_dependency() {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}

}  // namespace flashcore
