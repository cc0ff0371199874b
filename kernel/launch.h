// Host-side checks shared by the launcher and the C ABI: argument validation and error text.
#pragma once
#include <cuda_runtime.h>

#include "flashcore.h"
#include "params.h"

namespace flashcore {

// Checks every field of `in` (shapes, head dim, dtype, strides, alignment, scale, device) and fills `out`.
// Returns FC_OK or an fc_status with the reason stored for fc_last_error().
int validate_and_convert(const fc_params* in, KernelParams* out);

// Whether a call uses a serving field (packed rows, per-sequence keys, cache slots, window, soft-capping), which
// only the Hopper kernel implements.
bool uses_serving(const fc_params* in);

// Stores a printf-style message for fc_last_error() and returns `status`.
int report_error(int status, const char* fmt, ...);

// FC_OK for cudaSuccess; otherwise FC_ERR_CUDA with "<what>: <cuda error text>" stored.
int report_cuda(cudaError_t err, const char* what);

}  // namespace flashcore
