// One extra compiled point of the Hopper kernel: kernel/kernel.mk compiles this file once per FC_POINT line of the
// points file (kernel/tuned_points.inc for make build, the candidates for make tune), each in its own object so the
// points compile in parallel, with -DFC_POINT_HD=... -DFC_POINT_BN=... and so on (nvcc's -D splits at commas).
// kernel/flashcore.cu declares these instantiations extern and dispatches to them.
#include "run_tiles.cuh"
#include "tile_point.h"

#if !defined(FC_POINT_HD) || !defined(FC_POINT_BN) || !defined(FC_POINT_STAGES) || !defined(FC_POINT_WGS) || \
    !defined(FC_POINT_PINGPONG) || !defined(FC_POINT_RESCALE) || !defined(FC_POINT_PRODUCER)
#error "kernel/point.cu is compiled per point by kernel/kernel.mk (FC_POINT_* macros)"
#endif

namespace flashcore {

constexpr int kPointHd = FC_POINT_HD;
constexpr int kPointCode = point_code(FC_POINT_BN, FC_POINT_STAGES, FC_POINT_WGS, FC_POINT_PINGPONG, FC_POINT_RESCALE,
                                      FC_POINT_PRODUCER);
FC_POINT_INSTANCES(, kPointHd, kPointCode)

}  // namespace flashcore
