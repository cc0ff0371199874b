// FlashCore forward attention: launchers, kernel choice and the C ABI entry point.
// Build: make build   (nvcc -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xptxas=--warn-on-spills)
// Hopper features used: TMA (cp.async.bulk.tensor) + mbarrier expect_tx, wgmma.mma_async, setmaxnreg
// (kernel_wgmma.cuh) for every shape, decode included. The phase-1 mma.sync kernel (kernel_mma_sync.cuh)
// stays reachable through fc_attention_forward_phase1 as a second reference and for comparisons.
// Requires SM 9.0.
#include <cuda_runtime.h>

#include "flashcore.h"
#include "hopper_config.h"
#include "kernel_mma_sync.cuh"
#include "kernel_wgmma.cuh"
#include "launch.h"
#include "params.h"
#include "tensor_maps.h"

namespace flashcore {

// ---------------------------------------------------------------------------------------------
// Launchers: one instantiation per (kernel, head dim, dtype).
template <int kHeadDim, typename Element>
cudaError_t launch_mma_sync(const KernelParams& p, cudaStream_t stream) {
  using Cfg = TileConfig<kHeadDim>;
  auto kernel = attention_forward_kernel<kHeadDim, Element>;
  // Above 48 KB of dynamic shared memory a kernel must opt in (per device, so on every call: it is cheap).
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid((p.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM, p.heads_q, p.batch);
  kernel<<<grid, kThreads, Cfg::kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <int kHeadDim, typename Element>
cudaError_t launch_wgmma(const KernelParams& p, const TmaParams& tma, cudaStream_t stream) {
  using Cfg = HopperTileConfig<kHeadDim>;
  auto kernel = attention_forward_wgmma_kernel<kHeadDim, Element>;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  // Packed GQA: one tile per (K/V head, batch); otherwise one per (query tile, query head, batch).
  const dim3 grid = p.pack_gqa ? dim3(1, p.heads_kv, p.batch)
                               : dim3((p.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM, p.heads_q, p.batch);
  kernel<<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p, tma);
  return cudaGetLastError();
}

template <int kHeadDim, typename Element>
int run(const fc_params* in, const KernelParams& params, cudaStream_t stream) {
  using Cfg = HopperTileConfig<kHeadDim>;
  KernelParams p = params;
  // GQA with short queries (decode): all query heads of a K/V head fit in one tile, so pack them and read
  // each K/V head once instead of once per query head.
  p.pack_gqa = p.group > 1 && p.seqlen_q * p.group <= Cfg::kBlockM;
  TmaParams tma;
  int status = FC_OK;
  if ((status = encode_tensor_map(&tma.q, "q", in->q, kHeadDim, in->seqlen_q, in->heads_q, in->batch, in->q_stride,
                                  p.pack_gqa ? p.seqlen_q : Cfg::kBlockM, p.pack_gqa ? p.group : 1)) != FC_OK ||
      (status = encode_tensor_map(&tma.k, "k", in->k, kHeadDim, in->seqlen_k, in->heads_kv, in->batch, in->k_stride,
                                  Cfg::kBlockN)) != FC_OK ||
      (status = encode_tensor_map(&tma.v, "v", in->v, kHeadDim, in->seqlen_k, in->heads_kv, in->batch, in->v_stride,
                                  Cfg::kBlockN)) != FC_OK) {
    return status;
  }
  return report_cuda(launch_wgmma<kHeadDim, Element>(p, tma, stream), "attention kernel");
}

template <int kHeadDim, typename Element>
int run_phase1(const fc_params*, const KernelParams& p, cudaStream_t stream) {
  return report_cuda(launch_mma_sync<kHeadDim, Element>(p, stream), "phase-1 kernel");
}

int dispatch(const fc_params* in, const KernelParams& p, cudaStream_t stream, bool phase1) {
  const bool bf16 = in->dtype == FC_BF16;
  if (phase1) {
    switch (in->head_dim) {
      case 64: return bf16 ? run_phase1<64, Bf16>(in, p, stream) : run_phase1<64, Fp16>(in, p, stream);
      case 128: return bf16 ? run_phase1<128, Bf16>(in, p, stream) : run_phase1<128, Fp16>(in, p, stream);
      default: return bf16 ? run_phase1<256, Bf16>(in, p, stream) : run_phase1<256, Fp16>(in, p, stream);
    }
  }
  switch (in->head_dim) {
    case 64: return bf16 ? run<64, Bf16>(in, p, stream) : run<64, Fp16>(in, p, stream);
    case 128: return bf16 ? run<128, Bf16>(in, p, stream) : run<128, Fp16>(in, p, stream);
    case 256: return bf16 ? run<256, Bf16>(in, p, stream) : run<256, Fp16>(in, p, stream);
    default: return report_error(FC_ERR_INVALID_ARGUMENT, "head_dim %lld", static_cast<long long>(in->head_dim));
  }
}

}  // namespace flashcore

extern "C" int fc_attention_forward(const fc_params* params, void* stream) {
  flashcore::KernelParams kp;
  const int status = flashcore::validate_and_convert(params, &kp);
  if (status != FC_OK) return status;
  return flashcore::dispatch(params, kp, static_cast<cudaStream_t>(stream), false);
}

extern "C" int fc_attention_forward_phase1(const fc_params* params, void* stream) {
  flashcore::KernelParams kp;
  const int status = flashcore::validate_and_convert(params, &kp);
  if (status != FC_OK) return status;
  return flashcore::dispatch(params, kp, static_cast<cudaStream_t>(stream), true);
}
