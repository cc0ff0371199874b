// FP8's compile-time points per head dim (kernel/tile_choice.h Fp8Choice): the default tile, compiled twice (V^T from
// the copy the kernel writes, or transposed in shared memory), and the decode point (one consumer warpgroup).
// The decode points of head dims 64 and 256 are compiled in kernel/fp8_decode.cu, not in flashcore.cu: added to
// flashcore.cu's translation unit they changed nvcc's code for 91 of its other kernels (bf16 ones among them;
// cicc's inlining looks at the whole module), so a tuned table could no longer carry over to them unchanged
// (python -m harness tune rekey compares the SASS). hdim 128's stays in flashcore.cu, where it was first built:
// moving it out would change that module just the same.
#pragma once

#include "tile_choice.h"
#include "tile_point.h"

namespace flashcore {

// FP8's default tile per head dim, ping-pong, compiled twice: V^T from a copy in the workspace that the kernel
// writes itself, and (vt_smem) transposed in shared memory for every query tile, each with its own producer
// registers.
template <int kHeadDim, bool kVtSmem>
constexpr int fp8_point() {
  using C = Fp8Choice<kHeadDim>;
  return point_code(C::kBlockN, C::kStages, C::kConsumerWGs, 1, C::kRescaleEarly,
                    kVtSmem ? C::kVtSmemProducerRegs : C::kProducerRegs) |
         (kVtSmem ? kPointVtSmem : 0);
}

// FP8's decode point where the head dim has one (Fp8Choice::kOneWgDecode): one consumer warpgroup, V transposed in
// shared memory; else the shared-memory default point (the decode choice then never differs).
template <int kHeadDim>
constexpr int fp8_decode_point() {
  using C = Fp8Choice<kHeadDim>;
  if constexpr (C::kOneWgDecode) {
    return point_code(C::kDecodeBlockN, C::kDecodeStages, 1, 0, C::kRescaleEarly, C::kDecodeProducerRegs) |
           kPointVtSmem;
  } else {
    return fp8_point<kHeadDim, true>();
  }
}

// The head dims whose FP8 decode point kernel/fp8_decode.cu compiles: X(hd) for each. flashcore.cu declares them
// (FC_FP8_DECODE_POINT with `extern`), fp8_decode.cu instantiates them (without): one list for both.
#define FC_FP8_DECODE_APART(X) X(64) X(256)

// The plan and launch of head dim hd's FP8 decode point; `ext`: extern (declared here, compiled elsewhere) or empty.
#define FC_FP8_DECODE_POINT(ext, hd)                                                                                \
  ext template int make_plan<hd, fp8_decode_point<hd>()>(const fc_params*, const KernelParams&, LaunchPlan*);       \
  ext template int run_tiles<hd, fp8_decode_point<hd>(), E4m3>(const fc_params*, const KernelParams&, cudaStream_t);
#define FC_EXTERN_FP8_DECODE_POINT(hd) FC_FP8_DECODE_POINT(extern, hd)
#define FC_COMPILE_FP8_DECODE_POINT(hd) FC_FP8_DECODE_POINT(, hd)

}  // namespace flashcore
