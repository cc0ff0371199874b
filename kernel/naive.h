// Reference implementation (version 1, kept as the baseline every faster version is checked against):
// fp32 math, one thread per query row, same layout and masking rules as flashcore.h.
#pragma once
#include <cuda_runtime.h>

#include "flashcore.h"

// Writes o_ref [B, Sq, Hq, D] and lse_ref [B, Hq, Sq] as float32, contiguous. Inputs as in fc_params (16-bit).
// round_p_e4m3: FP8's "same rounding" baseline instead (P rounded to E4M3, output rounded to bf16; no LSE, lse_ref
// unused): the driver's FP8 --check bound (kernel/naive.cu).
cudaError_t fc_naive_forward(const fc_params* params, float* o_ref, float* lse_ref, cudaStream_t stream,
                             bool round_p_e4m3 = false);
