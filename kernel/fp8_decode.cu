// FP8's decode points of head dims 64 and 256 (kernel/tile_choice.h Fp8Choice::kOneWgDecode), in an object of their
// own: kernel/fp8_points.h says why they are not in flashcore.cu, which declares them extern and dispatches to them.
#include "fp8_points.h"
#include "run_tiles.cuh"

namespace flashcore {

template int make_plan<64, fp8_decode_point<64>()>(const fc_params*, const KernelParams&, LaunchPlan*);
template int run_tiles<64, fp8_decode_point<64>(), E4m3>(const fc_params*, const KernelParams&, cudaStream_t);
template int make_plan<256, fp8_decode_point<256>()>(const fc_params*, const KernelParams&, LaunchPlan*);
template int run_tiles<256, fp8_decode_point<256>(), E4m3>(const fc_params*, const KernelParams&, cudaStream_t);

}  // namespace flashcore
