// FP8's decode points of the head dims FC_FP8_DECODE_APART lists (kernel/tile_choice.h Fp8Choice::kOneWgDecode), in
// an object of their own: kernel/fp8_points.h says why they are not in flashcore.cu, which declares them extern and
// dispatches to them.
#include "fp8_points.h"
#include "run_tiles.cuh"

namespace flashcore {

FC_FP8_DECODE_APART(FC_COMPILE_FP8_DECODE_POINT)

}  // namespace flashcore
