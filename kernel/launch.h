// Host-side checks shared by the launcher and the C ABI: argument validation and error text.
#pragma once
#include <cuda_runtime.h>

#include "flashcore.h"
#include "head_dims.h"
#include "params.h"

namespace flashcore {

// Checks every field of `in` (shapes, head dim, dtype, strides, alignment, scale, device) and fills `out`.
// Returns FC_OK or an fc_status with the reason stored for fc_last_error().
int validate_and_convert(const fc_params* in, KernelParams* out);

// The serving fields (kernel/validate_serving.cu): check_serving refuses their bad combinations and sizes (FC_OK or
// an fc_status with the reason stored); convert_serving copies them into `out` with the bounds the kernel checks
// their device arrays' values against (kernel/seqlens.h).
int check_serving(const fc_params* in);
void convert_serving(const fc_params* in, KernelParams* out);

// Whether a call uses a serving field (packed rows, per-sequence keys, cache slots, paged keys, window,
// soft-capping, a head dim the phase-1 kernel has no tile of or a v head dim of its own), which only the Hopper kernel
// implements.
bool uses_serving(const fc_params* in);

// Whether a call's sequences have rows of their own (packed rows, used counts, cache lengths, slots, a left pad,
// pages) rather than one dense [batch, seqlen] block: FP8 runs those on V transposed in shared memory only.
bool rows_per_sequence(const fc_params* in);

// The kernel head dim a call launches: kernel_head_dim, but a paged cache runs on a kernel of 128-byte spans
// (kernel/head_dims.h paged_kernel_head_dim: 32, 64 and 96 on 128, 160 on 192, 224 on 256): the 32 and 64 kernels' 3
// consumer warpgroups leave their producer 32 registers, too few for the page walk, and kernels of 64-byte spans have
// no small-page gather (kernel/paged_gather.cuh); decode reads the same bytes either way: TMA zero-fills the missing
// columns without reading memory.
int64_t launch_head_dim(const fc_params* in);

// Stores a printf-style message for fc_last_error() and returns `status`.
int report_error(int status, const char* fmt, ...);

// FC_OK for cudaSuccess; otherwise FC_ERR_CUDA with "<what>: <cuda error text>" stored.
int report_cuda(cudaError_t err, const char* what);

}  // namespace flashcore
