// Reference implementation (version 1, kept as the baseline every faster version is checked against):
// fp32 math, one thread per query row, same layout and masking rules as flashcore.h.
#pragma once
#include <cuda_runtime.h>

#include "flashcore.h"

// Writes o_ref [B, Sq, Hq, D] and lse_ref [B, Hq, Sq] as float32, contiguous. Inputs as in fc_params.
cudaError_t fc_naive_forward(const fc_params* params, float* o_ref, float* lse_ref, cudaStream_t stream);
