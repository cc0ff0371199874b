// Division by a runtime divisor as a multiply-high, an add and a shift (Granlund and Montgomery, "Division by
// invariant integers using multiplication", 1994: the round-up method), for the tile decode of the producer thread.
// A plain `/` by a runtime value compiles to I2F, MUFU.RCP and F2I, which queue on the SM sub-partition's MUFU
// unit behind the consumers' exponentials; the producer's decode sits on the path of the next tile's Q load.
// Host and device: the host builds the constants, tests check them on the host.
#pragma once
#include <cstdint>

namespace flashcore {

// Functions of this header and of kernel/stream_tail.h's host half: host and device under nvcc, plain inline C++ for
// the system compiler (tests).
#ifdef __CUDACC__
#define FC_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FC_HOST_DEVICE inline
#endif

// n / d for 0 <= n < 2^31 and 1 <= d < 2^31: with l = ceil(log2 d) and mul = floor(2^32 (2^l - d) / d) + 1
// (below 2^32 since 2^l < 2d), n / d = (mulhi(n, mul) + n) >> l, and the sum stays below 2^32 for n < 2^31.
// d = 1 gives mul 1 and l 0: mulhi(n, 1) = 0, so n comes back.
struct FastDiv {
  uint32_t mul = 1;
  uint32_t shift = 0;

  FC_HOST_DEVICE int operator()(int n) const {
    const uint32_t u = static_cast<uint32_t>(n);
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(u, mul);
#else
    const uint32_t hi = static_cast<uint32_t>((uint64_t{u} * mul) >> 32);
#endif
    return static_cast<int>((hi + u) >> shift);
  }
};

// The constants for divisor d (d < 1 is taken as 1: a divisor the launch never uses).
inline FastDiv make_fast_div(int d) {
  FastDiv f;
  if (d <= 1) return f;
  uint32_t l = 0;
  while ((uint64_t{1} << l) < static_cast<uint64_t>(d)) ++l;
  f.mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << l) - static_cast<uint64_t>(d))) /
                                    static_cast<uint64_t>(d) + 1);
  f.shift = l;
  return f;
}

}  // namespace flashcore
