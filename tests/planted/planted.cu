// Planted-bug kernels (test-only): each mode hides one bug a sanitizer tool must catch; "clean" has none.
// Build: make planted   Run: build/planted MODE
// MODE: clean oob race divergent uninit leak mbar barcount
// Used by `make selftest` to prove the sanitizer gate fails on each bug and passes on clean code.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#define CUDA_CHECK(call)                                                                          \
  do {                                                                                            \
    cudaError_t err_ = (call);                                                                    \
    if (err_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      return 3;                                                                                   \
    }                                                                                             \
  } while (0)

constexpr int kN = 256;

// oob: thread i writes element i + 1, so the last write lands one past the end of `out`
// (inside the next allocation unless memcheck pads allocations).
__global__ void oob_write(float* out, int n, int shift) { out[threadIdx.x + shift] = 1.f * n; }

// race: each thread writes its smem slot and reads its neighbour's, with the barrier left out.
__global__ void smem_race(float* out, int with_barrier) {
  __shared__ float buf[kN];
  buf[threadIdx.x] = threadIdx.x;
  if (with_barrier) __syncthreads();
  out[threadIdx.x] = buf[(threadIdx.x + 1) % kN];
}

// divergent: half of every warp skips the CTA barrier (synccheck: "Divergent thread(s) in warp").
// A full-mask __syncwarp reached by half the lanes was NOT reported by compute-sanitizer 2025.3.1.
__global__ void divergent_barrier(float* out, int divergent) {
  if (!divergent || threadIdx.x % 32 < 16) __syncthreads();
  out[threadIdx.x] = threadIdx.x;
}

// barcount: a named barrier with a thread count that is not a multiple of 32: the launch dies with an
// illegal instruction and synccheck prints "0 errors", so only the exit code and log tell.
__global__ void bar_bad_count(float* out, int count) {
  asm volatile("bar.sync 1, %0;" ::"r"(count) : "memory");
  out[threadIdx.x] = threadIdx.x;
}

// mbar: arrival on an mbarrier that was never initialized (synccheck: "Missing init").
__global__ void mbarrier_uninit(float* out) {
  __shared__ unsigned long long bar;
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(addr) : "memory");  // never initialized
  out[threadIdx.x] = threadIdx.x;
}

// uninit: reads device memory that nothing wrote.
__global__ void copy(const float* in, float* out) { out[threadIdx.x] = in[threadIdx.x] + 1.f; }

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  const char* modes[] = {"clean", "oob", "race", "divergent", "uninit", "leak", "mbar", "barcount"};
  bool known = false;
  for (const char* m : modes) known = known || !std::strcmp(mode, m);
  if (!known) {
    std::fprintf(stderr, "usage: planted clean|oob|race|divergent|uninit|leak|mbar|barcount\n");
    return 2;
  }
  float *a, *b;
  CUDA_CHECK(cudaMalloc(&a, kN * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&b, kN * sizeof(float)));
  CUDA_CHECK(cudaMemset(a, 0, kN * sizeof(float)));
  CUDA_CHECK(cudaMemset(b, 0, kN * sizeof(float)));
  const bool clean = !std::strcmp(mode, "clean");
  if (clean || !std::strcmp(mode, "oob")) oob_write<<<1, kN>>>(a, kN, clean ? 0 : 1);
  if (clean || !std::strcmp(mode, "race")) smem_race<<<1, kN>>>(a, clean ? 1 : 0);
  if (clean || !std::strcmp(mode, "divergent")) divergent_barrier<<<1, kN>>>(a, clean ? 0 : 1);
  if (!std::strcmp(mode, "barcount")) bar_bad_count<<<1, kN>>>(a, 48);
  if (!std::strcmp(mode, "mbar")) mbarrier_uninit<<<1, kN>>>(a);
  float* fresh = nullptr;
  if (clean || !std::strcmp(mode, "uninit")) {
    CUDA_CHECK(cudaMalloc(&fresh, kN * sizeof(float)));
    if (clean) CUDA_CHECK(cudaMemset(fresh, 0, kN * sizeof(float)));
    copy<<<1, kN>>>(fresh, b);
  }
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaDeviceSynchronize());
  if (fresh) CUDA_CHECK(cudaFree(fresh));
  if (std::strcmp(mode, "leak") != 0) CUDA_CHECK(cudaFree(a));  // leak: `a` is never freed
  CUDA_CHECK(cudaFree(b));
  std::printf("planted %s: done\n", mode);
  return 0;
}
