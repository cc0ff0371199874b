// The default points of the kernel head dims FC_HEAD_DIMS_APART lists, in an object of their own: kernel/head_dims.h
// says why they are not in flashcore.cu, which declares them extern and dispatches to them.
#include "head_dims.h"
#include "run_tiles.cuh"

namespace flashcore {

// One point per head dim: these head dims compile one tile for every call (kernel/tile_choice.h BlockNChoice) and no
// one-warpgroup decode point (hopper_config.h kOneWgDecode), so the short, long and decode points are one.
#define FC_COMPILE_DEFAULT_POINT(hd)                                                                                \
  static_assert(DefaultPoints<hd>::kShort == DefaultPoints<hd>::kLong &&                                            \
                    DefaultPoints<hd>::kShort == DefaultPoints<hd>::kDecode,                                        \
                "head dim " #hd ": more than one default point; instantiate each here");                           \
  template int make_plan<hd, DefaultPoints<hd>::kShort>(const fc_params*, const KernelParams&, LaunchPlan*);        \
  template int run_tiles<hd, DefaultPoints<hd>::kShort, Bf16>(const fc_params*, const KernelParams&, cudaStream_t); \
  template int run_tiles<hd, DefaultPoints<hd>::kShort, Fp16>(const fc_params*, const KernelParams&, cudaStream_t);
FC_HEAD_DIMS_APART(FC_COMPILE_DEFAULT_POINT)
#undef FC_COMPILE_DEFAULT_POINT

}  // namespace flashcore
