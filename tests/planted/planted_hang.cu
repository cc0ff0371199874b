// Planted hang (test-only): a kernel whose consumer warp never arrives on the mbarrier every thread waits on, the
// classic Hopper deadlock. The harness's watchdog must end it (gates/watchdog.yaml, harness/gate_worker.py).
// Build: make planted   (-> build/libplanted_hang.so)   Used by: harness/planted_hang.py, `make selftest`.
// Kept out of kernel/: the library's kernel id hashes kernel/ sources, and this file must never reach the library.
#include <cuda_runtime.h>

#include <cstdint>

constexpr int kThreads = 128;  // four warps: three producers that arrive, one consumer that never does

// ---- mbarrier helpers (PTX, sm_90) ---------------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ bool mbarrier_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// ---- kernel --------------------------------------------------------------------------------------------

// The barrier expects every thread; the last warp (the "consumer") forgets to arrive, so phase 0 never completes
// and every thread spins in try_wait for as long as the process lives.
__global__ void consumer_never_arrives(int* out) {
  __shared__ __align__(8) uint64_t full_bar;
  const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&full_bar));
  if (threadIdx.x == 0) mbarrier_init(bar, blockDim.x);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncthreads();
  const bool consumer = threadIdx.x >= blockDim.x - 32;
  if (!consumer) mbarrier_arrive(bar);
  while (!mbarrier_try_wait(bar, 0)) {
  }
  out[threadIdx.x] = 1;  // never reached
}

// ---- C entry point -------------------------------------------------------------------------------------

// Launches the kernel on this thread's current device and waits for it: returns only if the launch fails (its
// cudaError_t); on a working GPU it never returns.
extern "C" int fc_planted_hang(void) {
  int* out = nullptr;
  cudaError_t err = cudaMalloc(&out, kThreads * sizeof(int));
  if (err != cudaSuccess) return static_cast<int>(err);
  consumer_never_arrives<<<1, kThreads>>>(out);
  err = cudaGetLastError();
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  cudaFree(out);
  return static_cast<int>(err);
}
