// FlashCore forward attention: launchers, kernel choice and the C ABI entry point.
// Build: make build   (nvcc -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xptxas=--warn-on-spills)
// Hopper features used: TMA (cp.async.bulk.tensor) + mbarrier expect_tx, wgmma.mma_async, setmaxnreg
// (kernel_wgmma.cuh) for every shape, decode included. The phase-1 mma.sync kernel (kernel_mma_sync.cuh)
// stays reachable through fc_attention_forward_phase1 as a second reference and for comparisons.
// Requires SM 9.0.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "combine.cuh"
#include "flashcore.h"
#include "hopper_config.h"
#include "kernel_mma_sync.cuh"
#include "kernel_wgmma.cuh"
#include "launch.h"
#include "params.h"
#include "split_plan.h"
#include "tensor_maps.h"
#include "tile_choice.h"

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

// What one call launches: tile list, GQA packing, split-KV count, persistent grid and workspace (fc_plan_info).
// Sections of the tile order: `big` sections of heads + 1 (batch, head) pairs, then sections of `heads`.
struct Sections {
  int heads;
  int big;
};

struct LaunchPlan {
  bool pack_gqa;
  int m_tiles;     // query tiles per (head, batch); 1 when packed
  int grid_heads;  // heads_q, or heads_kv when packed
  int num_splits;
  int64_t tiles;   // m_tiles * num_splits * grid_heads * batch
  int64_t ctas;    // persistent CTAs: min(tiles, SMs - sm_margin)
  Sections sections;
  bool dynamic;    // tile order from an atomic counter (causal: uneven tiles)
  int64_t counter_offset;  // bytes into the workspace of the counter
  int64_t workspace_bytes;
};

// Bytes of L2 the K/V of the (batch, head) pairs in flight may take: `pct` percent of it, 0 = a third (step 4.12
// of docs/perf-notes.md: S = 1K causal 0.970 / 1.023 / 1.020x FA3 at a half / third / quarter), so Q, O and the
// other traffic keep their share.
int64_t l2_budget_bytes(int device, int pct) {
  int l2 = 0;
  if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess || l2 <= 0) l2 = 50 << 20;
  return pct > 0 ? int64_t{l2} * pct / 100 : l2 / 3;
}

// The sections of the tile order (kernel/tile_scheduler.h). Equal-cost tiles (static order) go one head at a time, query tiles side by side: the CTAs
// in flight then read the K/V of the fewest heads (B4 H16 S8K hdim 128: 6-head sections read 1.07 GB from DRAM,
// FA3's head-by-head order 0.41 GB; S = 2K +4 %). Uneven tiles (dynamic order) go longest-first inside sections
// whose K/V fit the L2 budget, all of one size but for a head: a short last section would end the launch on one
// wave of its tiles, longest included (S = 1K causal with sections of 50 and a last one of 6: SMs idle for 7 % of
// the kernel, ncu sm__cycles_active max vs avg).
Sections plan_sections(int64_t bh, int64_t kv_bytes, int64_t l2_budget, bool dynamic) {
  if (!dynamic) return {1, 0};
  int64_t fit = l2_budget / (kv_bytes > 0 ? kv_bytes : 1);
  if (fit < 1) fit = 1;
  const int64_t sections = (bh + fit - 1) / fit;
  return {static_cast<int>(bh / sections), static_cast<int>(bh % sections)};
}

template <int kHeadDim, int kBlockN>
int make_plan(const fc_params* in, const KernelParams& p, LaunchPlan* plan) {
  using Cfg = HopperTileConfig<kHeadDim, kBlockN>;
  // GQA with short queries (decode): all query heads of a K/V head fit in one tile, so pack them and read
  // each K/V head once instead of once per query head.
  plan->pack_gqa = p.group > 1 && static_cast<int64_t>(p.seqlen_q) * p.group <= Cfg::kBlockM;
  plan->m_tiles = plan->pack_gqa ? 1 : ceil_div(p.seqlen_q, Cfg::kBlockM);
  plan->grid_heads = plan->pack_gqa ? p.heads_kv : p.heads_q;
  const int64_t tiles = static_cast<int64_t>(plan->m_tiles) * plan->grid_heads * p.batch;
  const int n_blocks = ceil_div(p.seqlen_k, Cfg::kBlockN);
  int device = 0, sms = 0;
  int status = report_cuda(cudaGetDevice(&device), "cudaGetDevice");
  if (status == FC_OK) {
    status = report_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                         "cudaDeviceGetAttribute(MultiProcessorCount)");
  }
  if (status != FC_OK) return status;
  const int usable_sms = sms - in->sm_margin > 1 ? sms - in->sm_margin : 1;
  int splits = 1;
  if (in->num_splits > 0) {
    splits = in->num_splits < n_blocks ? in->num_splits : n_blocks;
    if (splits > kMaxSplits) splits = kMaxSplits;
  } else {
    // Deterministic mode plans for a nominal SM count: one split count per shape on any GPU and any sm_margin.
    splits = choose_num_splits(tiles, n_blocks, in->deterministic ? kNominalSms : usable_sms);
  }
  plan->num_splits = splits;
  plan->tiles = tiles * splits;
  if (plan->tiles > INT32_MAX) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "%lld tiles: at most %d per call", static_cast<long long>(plan->tiles),
                        INT32_MAX);
  }
  // Which CTA runs a tile never changes its result, so the grid may follow the GPU in deterministic mode too.
  plan->ctas = plan->tiles < usable_sms ? plan->tiles : usable_sms;
  // K/V bytes one (batch, head) pair of the tile list reads: query heads of one GQA group share theirs.
  const int64_t kv_bytes = int64_t{4} * kHeadDim * p.seqlen_k / (plan->pack_gqa ? 1 : p.group);
  const int64_t bh = static_cast<int64_t>(plan->grid_heads) * p.batch;
  const bool uneven = in->schedule == FC_SCHEDULE_DEFAULT ? p.causal : in->schedule == FC_SCHEDULE_DYNAMIC;
  plan->dynamic = uneven && plan->tiles > plan->ctas;
  plan->sections = plan_sections(bh, kv_bytes, l2_budget_bytes(device, in->l2_section_pct), plan->dynamic);
  const int64_t partial_bytes = splits > 1 ? int64_t{splits} * p.accum_rows * (kHeadDim + 1) * 4 : 0;
  plan->counter_offset = partial_bytes;
  plan->workspace_bytes = partial_bytes + (plan->dynamic ? 16 : 0);
  return FC_OK;
}

template <int kHeadDim, int kBlockN, typename Element>
cudaError_t launch_wgmma(const KernelParams& p, const LaunchPlan& plan, const TmaParams& tma, cudaStream_t stream) {
  using Cfg = HopperTileConfig<kHeadDim, kBlockN>;
  auto kernel = plan.num_splits > 1 ? attention_forward_wgmma_kernel<kHeadDim, kBlockN, Element, true>
                                    : attention_forward_wgmma_kernel<kHeadDim, kBlockN, Element, false>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  if (plan.dynamic && (err = cudaMemsetAsync(p.tile_counter, 0, sizeof(int), stream)) != cudaSuccess) return err;
  kernel<<<static_cast<unsigned>(plan.ctas), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p, tma);
  err = cudaGetLastError();
  if (err != cudaSuccess || plan.num_splits == 1) return err;
  const auto blocks = static_cast<unsigned>((p.accum_rows + kCombineWarps - 1) / kCombineWarps);
  combine_splits_kernel<kHeadDim, Element><<<blocks, 32 * kCombineWarps, 0, stream>>>(p);
  return cudaGetLastError();
}

template <int kHeadDim, int kBlockN, typename Element>
int run_tiles(const fc_params* in, const KernelParams& params, cudaStream_t stream) {
  using Cfg = HopperTileConfig<kHeadDim, kBlockN>;
  KernelParams p = params;
  LaunchPlan plan{};
  int status = make_plan<kHeadDim, kBlockN>(in, p, &plan);
  if (status != FC_OK) return status;
  if (plan.workspace_bytes > 0) {
    if (in->workspace == nullptr || in->workspace_bytes < plan.workspace_bytes ||
        reinterpret_cast<uintptr_t>(in->workspace) % 16 != 0) {
      return report_error(FC_ERR_INVALID_ARGUMENT,
                          "workspace: this call (%d K/V splits%s) needs %lld bytes of 16-byte aligned workspace, got "
                          "%lld bytes at %p (size it with fc_plan)", plan.num_splits,
                          plan.dynamic ? ", a tile counter" : "", static_cast<long long>(plan.workspace_bytes),
                          static_cast<long long>(in->workspace_bytes), in->workspace);
    }
  }
  p.pack_gqa = plan.pack_gqa;
  p.num_splits = plan.num_splits;
  p.o_accum = static_cast<float*>(in->workspace);
  p.lse_accum = p.o_accum + (plan.num_splits > 1 ? int64_t{plan.num_splits} * p.accum_rows * kHeadDim : 0);
  p.m_tiles = plan.m_tiles;
  p.grid_heads = plan.grid_heads;
  p.total_tiles = static_cast<int>(plan.tiles);
  p.section_heads = plan.sections.heads;
  p.section_big = plan.sections.big;
  p.tile_counter =
      plan.dynamic ? reinterpret_cast<int*>(static_cast<uint8_t*>(in->workspace) + plan.counter_offset) : nullptr;
  TmaParams tma;
  if ((status = encode_tensor_map(&tma.q, "q", in->q, kHeadDim, in->seqlen_q, in->heads_q, in->batch, in->q_stride,
                                  p.pack_gqa ? p.seqlen_q : Cfg::kBlockM, p.pack_gqa ? p.group : 1)) != FC_OK ||
      (status = encode_tensor_map(&tma.k, "k", in->k, kHeadDim, in->seqlen_k, in->heads_kv, in->batch, in->k_stride,
                                  Cfg::kBlockN)) != FC_OK ||
      (status = encode_tensor_map(&tma.v, "v", in->v, kHeadDim, in->seqlen_k, in->heads_kv, in->batch, in->v_stride,
                                  Cfg::kBlockN)) != FC_OK ||
      // O leaves one consumer warpgroup (64 rows) per store.
      (status = encode_tensor_map(&tma.o, "o", in->o, kHeadDim, in->seqlen_q, in->heads_q, in->batch, in->o_stride,
                                  64)) != FC_OK) {
    return status;
  }
  return report_cuda(launch_wgmma<kHeadDim, kBlockN, Element>(p, plan, tma, stream), "attention kernel");
}

// Calls f(std::integral_constant<int, BLOCK_N>) with the BLOCK_N of kernel/tile_choice.h for this call (one
// instantiation when the short and long tiles agree); the launch and fc_plan both choose through here.
// fc_params.block_n, when not 0, picks one of the compiled pair instead.
template <int kHeadDim, typename F>
int with_block_n(const fc_params* in, const KernelParams& p, F&& f) {
  using Choice = BlockNChoice<kHeadDim>;
  if (in->block_n != 0) {
    if (in->block_n == Choice::kShort) return f(std::integral_constant<int, Choice::kShort>{});
    if (in->block_n == Choice::kLong) return f(std::integral_constant<int, Choice::kLong>{});
    if (Choice::kShort == Choice::kLong) {
      return report_error(FC_ERR_INVALID_ARGUMENT, "block_n = %d: head dim %d is built for %d keys per tile only "
                          "(0: the default)", in->block_n, kHeadDim, Choice::kShort);
    }
    return report_error(FC_ERR_INVALID_ARGUMENT, "block_n = %d: head dim %d is built for %d or %d keys per tile "
                        "(0: the default choice)", in->block_n, kHeadDim, Choice::kShort, Choice::kLong);
  }
  if constexpr (Choice::kShort != Choice::kLong) {
    if (use_short_block_n(p.causal != 0, p.seqlen_k)) return f(std::integral_constant<int, Choice::kShort>{});
  }
  return f(std::integral_constant<int, Choice::kLong>{});
}

template <int kHeadDim>
int block_n_options(int32_t* out, int max) {
  using Choice = BlockNChoice<kHeadDim>;
  constexpr int kLow = Choice::kShort < Choice::kLong ? Choice::kShort : Choice::kLong;
  constexpr int kHigh = Choice::kShort < Choice::kLong ? Choice::kLong : Choice::kShort;
  const int n = kLow == kHigh ? 1 : 2;
  if (out != nullptr && max > 0) out[0] = kLow;
  if (out != nullptr && max > 1 && n == 2) out[1] = kHigh;
  return n;
}

template <int kHeadDim, typename Element>
int run(const fc_params* in, const KernelParams& p, cudaStream_t stream) {
  return with_block_n<kHeadDim>(
      in, p, [&](auto block_n) { return run_tiles<kHeadDim, decltype(block_n)::value, Element>(in, p, stream); });
}

template <int kHeadDim>
int plan_info(const fc_params* in, const KernelParams& p, fc_plan_info* out) {
  LaunchPlan plan{};
  int block_n = 0;
  const int status = with_block_n<kHeadDim>(in, p, [&](auto bn) {
    block_n = decltype(bn)::value;
    return make_plan<kHeadDim, decltype(bn)::value>(in, p, &plan);
  });
  if (status != FC_OK) return status;
  out->num_splits = plan.num_splits;
  out->pack_gqa = plan.pack_gqa ? 1 : 0;
  out->ctas = plan.ctas;
  out->workspace_bytes = plan.workspace_bytes;
  out->block_n = block_n;
  out->dynamic = plan.dynamic ? 1 : 0;
  out->section_heads = plan.sections.heads;
  return FC_OK;
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

extern "C" int fc_plan(const fc_params* params, fc_plan_info* plan) {
  if (plan == nullptr) return flashcore::report_error(FC_ERR_INVALID_ARGUMENT, "plan is NULL");
  flashcore::KernelParams kp;
  const int status = flashcore::validate_and_convert(params, &kp);
  if (status != FC_OK) return status;
  switch (params->head_dim) {
    case 64: return flashcore::plan_info<64>(params, kp, plan);
    case 128: return flashcore::plan_info<128>(params, kp, plan);
    default: return flashcore::plan_info<256>(params, kp, plan);
  }
}

extern "C" int fc_attention_forward_phase1(const fc_params* params, void* stream) {
  flashcore::KernelParams kp;
  const int status = flashcore::validate_and_convert(params, &kp);
  if (status != FC_OK) return status;
  return flashcore::dispatch(params, kp, static_cast<cudaStream_t>(stream), true);
}

extern "C" int fc_block_n_options(int head_dim, int32_t* out, int max) {
  switch (head_dim) {
    case 64: return flashcore::block_n_options<64>(out, max);
    case 128: return flashcore::block_n_options<128>(out, max);
    case 256: return flashcore::block_n_options<256>(out, max);
    default: return 0;
  }
}
