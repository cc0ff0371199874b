// The default points of the kernel head dims FC_HEAD_DIMS_APART lists, in an object of their own: kernel/head_dims.h
// says why they are not in flashcore.cu, which declares them extern and dispatches to them.
#include "head_dims.h"
#include "run_tiles.cuh"

namespace flashcore {

// Each of these head dims compiles one tile for every call (kernel/tile_choice.h BlockNChoice: the short and long
// points are one); 32 also has the one-warpgroup decode point (hopper_config.h kOneWgDecode), 160 and 224 do not
// (their decode point is the short one). A head dim that breaks this fails here, or at the link (--no-undefined).
#define FC_COMPILE_DEFAULT_POINT(hd)                                                                     \
  static_assert(DefaultPoints<hd>::kShort == DefaultPoints<hd>::kLong,                                   \
                "head dim " #hd ": a short and a long default point; instantiate both here");            \
  static_assert((DefaultPoints<hd>::kDecode != DefaultPoints<hd>::kShort) == ((hd) == 32),               \
                "head dim " #hd ": its decode point is instantiated below for 32 only");                 \
  FC_POINT_INSTANCES(, hd, DefaultPoints<hd>::kShort)
FC_HEAD_DIMS_APART(FC_COMPILE_DEFAULT_POINT)
FC_POINT_INSTANCES(, 32, DefaultPoints<32>::kDecode)
#undef FC_COMPILE_DEFAULT_POINT

}  // namespace flashcore
