// FlashCore forward attention: launchers, kernel choice and the C ABI entry point.
// Build: make build   (nvcc -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xptxas=--warn-on-spills)
// Hopper features used: TMA (cp.async.bulk.tensor) + mbarrier expect_tx, wgmma.mma_async, setmaxnreg
// (kernel_wgmma.cuh) for every shape, decode included. The phase-1 mma.sync kernel (kernel/phase1/)
// stays reachable through fc_attention_forward_phase1 as a second reference and for comparisons.
// Requires SM 9.0.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "flashcore.h"
#include "fp8_points.h"
#include "head_dims.h"
#include "hopper_config.h"
#include "launch.h"
#include "params.h"
#include "phase1/kernel.cuh"
#include "run_tiles.cuh"
#include "tile_choice.h"
#include "tile_point.h"
#include "timeline.h"

namespace flashcore {

// The points file: FC_POINT(head_dim, block_n, stages, consumer_wgs, pingpong, rescale_early, producer_regs) lines,
// the points compiled besides each head dim's defaults, one object each (kernel/point.cu). make build reads
// kernel/tuned_points.inc (written by make tune: the points the tuned table names); the tune build its candidates.
#ifndef FLASHCORE_POINTS_FILE
#define FLASHCORE_POINTS_FILE "tuned_points.inc"
#endif
#define FC_POINT(hd, ...) FC_EXTERN_POINT(hd, point_code(__VA_ARGS__))
#include FLASHCORE_POINTS_FILE
#undef FC_POINT

// Calls f(std::integral_constant<int, point code>) with the point this call runs; the launch and fc_plan both
// choose through here. fc_params.point, when not 0, names a compiled point; else fc_params.block_n, when not 0,
// picks one of the default pair; else kernel/tile_choice.h's rules pick by the shape (use_one_wg_point: the decode
// point; use_short_block_n: the short or long one).
template <int kHeadDim, typename F>
int with_point(const fc_params* in, const KernelParams& p, F&& f) {
  using D = DefaultPoints<kHeadDim>;
  using Choice = BlockNChoice<kHeadDim>;
  // Soft-capping and left bounds (windows, chunks, left-padded pages) are compiled for the short default point only
  // (run_tiles.cuh launch_wgmma).
  if (p.softcap_prescale > 0.f || has_left_bound(p)) {
    if ((in->point != 0 && in->point != D::kShort) || (in->block_n != 0 && in->block_n != Choice::kShort)) {
      return report_error(FC_ERR_INVALID_ARGUMENT, "%s runs head dim %d's default point at %d keys per tile only: "
                          "leave point and block_n 0 (got point 0x%x, block_n %d)",
                          p.softcap_prescale > 0.f ? "softcap" : "a left window bound, attention_chunk or cache_leftpad",
                          kHeadDim, Choice::kShort, static_cast<unsigned>(in->point), in->block_n);
    }
    return f(std::integral_constant<int, D::kShort>{});
  }
  // Tiles of at most 64 query rows (decode) take the one-warpgroup point where the head dim has one.
  const bool one_wg = D::kHasDecode && use_one_wg_point(p.seqlen_q, p.group, D::kBlockM);
  if (in->page_table != nullptr && in->point == 0 && in->block_n == 0) {
    // A paged cache takes the short default point (or the decode point, at the same BLOCK_N): its BLOCK_N
    // (64 / 128 / 80) shares more factors with the page sizes in use (powers of two) than 176, so the TMA boxes are
    // larger (gcd(page_size, BLOCK_N) rows).
    if (one_wg) return f(std::integral_constant<int, D::kDecode>{});
    return f(std::integral_constant<int, D::kShort>{});
  }
  if (in->point != 0) {
    if (in->block_n != 0 && in->block_n != (in->point & 511)) {
      return report_error(FC_ERR_INVALID_ARGUMENT, "block_n = %d but point 0x%x has %d keys per tile (leave block_n 0 "
                          "with a point)", in->block_n, static_cast<unsigned>(in->point), in->point & 511);
    }
    if (in->point == D::kShort) return f(std::integral_constant<int, D::kShort>{});
    if (in->point == D::kLong) return f(std::integral_constant<int, D::kLong>{});
    if (in->point == D::kDecode) return f(std::integral_constant<int, D::kDecode>{});
#define FC_POINT(hd, ...)                                                            \
  if constexpr (hd == kHeadDim) {                                                    \
    constexpr int kCode = point_code(__VA_ARGS__);                                   \
    if (in->point == kCode) return f(std::integral_constant<int, kCode>{});          \
  }
#include FLASHCORE_POINTS_FILE
#undef FC_POINT
    const int c = in->point;
    return report_error(FC_ERR_INVALID_ARGUMENT, "point 0x%x (n%d-s%d-w%d-pp%d-re%d-r%d) is not compiled for head dim "
                        "%d: fc_points() lists the compiled ones (make tune builds candidates; make build compiles the "
                        "defaults and kernel/tuned_points.inc)", static_cast<unsigned>(c), c & 511, (c >> 9) & 15,
                        (c >> 13) & 3, (c >> 15) & 1, (c >> 16) & 1, ((c >> 17) & 31) * 8, kHeadDim);
  }
  if (in->block_n != 0) {
    if (in->block_n == Choice::kShort) return f(std::integral_constant<int, D::kShort>{});
    if (in->block_n == Choice::kLong) return f(std::integral_constant<int, D::kLong>{});
    if (Choice::kShort == Choice::kLong) {
      return report_error(FC_ERR_INVALID_ARGUMENT, "block_n = %d: head dim %d is built for %d keys per tile only "
                          "(0: the default)", in->block_n, kHeadDim, Choice::kShort);
    }
    return report_error(FC_ERR_INVALID_ARGUMENT, "block_n = %d: head dim %d is built for %d or %d keys per tile "
                        "(0: the default choice)", in->block_n, kHeadDim, Choice::kShort, Choice::kLong);
  }
  if (one_wg) return f(std::integral_constant<int, D::kDecode>{});
  if constexpr (Choice::kShort != Choice::kLong) {
    if (use_short_block_n(p.causal != 0, p.seqlen_k)) return f(std::integral_constant<int, D::kShort>{});
  }
  return f(std::integral_constant<int, D::kLong>{});
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

// The compiled points of a head dim: its defaults, then (with_file) the points file's, each once, into out[0 .. max).
template <int kHeadDim>
int point_options(int32_t* out, int max, bool with_file) {
  using D = DefaultPoints<kHeadDim>;
  constexpr int kMaxPoints = 256;
  int seen[kMaxPoints];
  int n = 0;
  auto add = [&](int code) {
    for (int i = 0; i < n; ++i) {
      if (seen[i] == code) return;
    }
    if (n == kMaxPoints) return;
    if (out != nullptr && n < max) out[n] = code;
    seen[n++] = code;
  };
  add(D::kShort);
  add(D::kLong);
  add(D::kDecode);
  if (!with_file) return n;
#define FC_POINT(hd, ...) \
  if constexpr (hd == kHeadDim) add(point_code(__VA_ARGS__));
#include FLASHCORE_POINTS_FILE
#undef FC_POINT
  return n;
}

// FP8's decode points compiled in kernel/fp8_decode.cu (kernel/fp8_points.h says why they are apart).
FC_FP8_DECODE_APART(FC_EXTERN_FP8_DECODE_POINT)
// The default points of the head dims compiled in kernel/head_dims_apart.cu (kernel/head_dims.h says why apart).
FC_HEAD_DIMS_APART(FC_EXTERN_DEFAULT_POINTS)

// with_point for FP8 inputs: f(std::integral_constant<int, one of the fp8_points>), by fp8_v_transpose (AUTO: by the
// shape, kernel/tile_choice.h use_fp8_vt_smem), then, V in shared memory, the decode point for tiles of at most 64
// query rows (use_one_wg_point, as with_point), after checking that the call names no other point.
template <int kHeadDim, typename F>
int with_fp8_point(const fc_params* in, const KernelParams& p, F&& f) {
  constexpr int kPass = fp8_point<kHeadDim, false>(), kSmem = fp8_point<kHeadDim, true>();
  constexpr int kDecode = fp8_decode_point<kHeadDim>();
  // A block_n beside a named point must be that point's own (the decode point's keys differ from the default's).
  const int keys = in->point != 0 ? in->point & 511 : kPass & 511;
  if ((in->point != 0 && in->point != kPass && in->point != kSmem && in->point != kDecode) ||
      (in->block_n != 0 && in->block_n != keys)) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "FP8 runs head dim %d at one tile (%d keys; points 0x%x and 0x%x, "
                        "V^T from a copy in the workspace or transposed in shared memory: fp8_v_transpose picks; "
                        "decode at 0x%x, %d keys): leave point and block_n 0 (got point 0x%x, block_n %d)", kHeadDim,
                        kPass & 511, static_cast<unsigned>(kPass), static_cast<unsigned>(kSmem),
                        static_cast<unsigned>(kDecode), kDecode & 511, static_cast<unsigned>(in->point), in->block_n);
  }
  // Sequences with rows of their own (packed, per-sequence lengths, cache slots) take the shared-memory transpose:
  // the copy is laid out per dense batch entry, seqlen_k keys each (kernel/fp8_vt_fused.cuh), and for a cache it
  // would transpose every entry's whole capacity on every call.
  const bool per_sequence = rows_per_sequence(in);
  bool smem = in->point != 0 ? in->point != kPass
                             : per_sequence || use_fp8_vt_smem<kHeadDim>(in->seqlen_q, in->seqlen_k,
                                                                          in->heads_q / in->heads_kv, in->causal != 0);
  if (in->fp8_v_transpose != FC_FP8_VT_AUTO) {
    const bool asked = in->fp8_v_transpose == FC_FP8_VT_SMEM;
    if (in->point != 0 && asked != smem) {
      return report_error(FC_ERR_INVALID_ARGUMENT, "point 0x%x transposes V %s, but fp8_v_transpose asks for %s",
                          static_cast<unsigned>(in->point), smem ? "in shared memory" : "into a copy",
                          asked ? "shared memory (FC_FP8_VT_SMEM)" : "a copy (FC_FP8_VT_PASS)");
    }
    smem = asked;
  }
  if (per_sequence && !smem) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "FP8 with packed rows or a KV cache transposes V in shared memory "
                        "only (the V^T copy is laid out per dense batch entry): leave point 0 and fp8_v_transpose "
                        "FC_FP8_VT_AUTO or FC_FP8_VT_SMEM (got point 0x%x, fp8_v_transpose %d)",
                        static_cast<unsigned>(in->point), in->fp8_v_transpose);
  }
  if (!smem) return f(std::integral_constant<int, kPass>{});
  if constexpr (kDecode != kSmem) {
    // Only the automatic choice takes it: a call that names where V is transposed keeps the default tile, so the
    // two ways still give the same bits (they differ only in where V^T comes from).
    constexpr int kDefaultRows = 64 * Fp8Choice<kHeadDim>::kConsumerWGs;
    const bool decode = in->point != 0 ? in->point == kDecode
                                       : in->block_n == 0 && in->fp8_v_transpose == FC_FP8_VT_AUTO &&
                                             use_one_wg_point(p.seqlen_q, p.group, kDefaultRows);
    if (decode) return f(std::integral_constant<int, kDecode>{});
  }
  return f(std::integral_constant<int, kSmem>{});
}

// with_fp8_point where FP8 has a kernel of the head dim: FC_HEAD_DIM_TABLE's fp8_supported ones. check_fp8 refuses FP8
// at the others (the kernel head dims without an Fp8Choice are 16-bit only) before a call gets here.
template <int kHeadDim, typename F>
int with_fp8_kernel_point(const fc_params* in, const KernelParams& p, F&& f) {
  if constexpr (fp8_head_dim(kHeadDim)) {
    return with_fp8_point<kHeadDim>(in, p, static_cast<F&&>(f));
  } else {
    return report_error(FC_ERR_INVALID_ARGUMENT, "head_dim %lld with FP8 inputs: no FP8 kernel of head dim %d",
                        static_cast<long long>(in->head_dim), kHeadDim);
  }
}

template <int kHeadDim>
int run_fp8(const fc_params* in, const KernelParams& p, cudaStream_t stream) {
  return with_fp8_kernel_point<kHeadDim>(
      in, p, [&](auto point) { return run_tiles<kHeadDim, decltype(point)::value, E4m3>(in, p, stream); });
}

template <int kHeadDim, typename Element>
int run(const fc_params* in, const KernelParams& p, cudaStream_t stream) {
  return with_point<kHeadDim>(
      in, p, [&](auto point) { return run_tiles<kHeadDim, decltype(point)::value, Element>(in, p, stream); });
}

// The Hopper kernel of one head dim for the call's dtype.
template <int kHeadDim>
int run_dtype(const fc_params* in, const KernelParams& p, cudaStream_t stream) {
  switch (in->dtype) {
    case FC_E4M3: return run_fp8<kHeadDim>(in, p, stream);
    case FC_BF16: return run<kHeadDim, Bf16>(in, p, stream);
    default: return run<kHeadDim, Fp16>(in, p, stream);
  }
}

template <int kHeadDim>
int plan_info(const fc_params* in, const KernelParams& p, fc_plan_info* out) {
  LaunchPlan plan{};
  int point = 0;
  auto plan_at = [&](auto pt) {
    point = decltype(pt)::value;
    return make_plan<kHeadDim, decltype(pt)::value>(in, p, &plan);
  };
  const int status = in->dtype == FC_E4M3 ? with_fp8_kernel_point<kHeadDim>(in, p, plan_at)
                                          : with_point<kHeadDim>(in, p, plan_at);
  if (status != FC_OK) return status;
  out->num_splits = plan.num_splits;
  out->pack_gqa = plan.pack_gqa ? 1 : 0;
  out->ctas = plan.ctas;
  out->workspace_bytes = plan.workspace_bytes;
  out->block_n = point & 511;
  out->point = point;
  out->fp8_v_transpose = in->dtype != FC_E4M3 ? 0 : (point & kPointVtSmem) ? FC_FP8_VT_SMEM : FC_FP8_VT_PASS;
  out->dynamic = plan.dynamic ? 1 : 0;
  out->section_heads = plan.sections.heads;
  out->tail_tiles = plan.tail.tiles;
  out->tail_pieces = plan.tail.pieces;
  return FC_OK;
}

template <int kHeadDim, typename Element>
int run_phase1(const fc_params*, const KernelParams& p, cudaStream_t stream) {
  return report_cuda(launch_mma_sync<kHeadDim, Element>(p, stream), "phase-1 kernel");
}

// The phase-1 kernel's head dims (kernel/phase1/config.h): it stays as it was when the Hopper kernel had these.
using Phase1HeadDims = std::integer_sequence<int, 64, 128, 256>;

// The phase-1 kernel takes its own head dims only (fc_attention_forward_phase1 refuses the others first).
int dispatch(const fc_params* in, const KernelParams& p, cudaStream_t stream, bool phase1) {
  if (phase1) {
    auto run_at = [&](auto hd) {
      constexpr int kHeadDim = decltype(hd)::value;
      return in->dtype == FC_BF16 ? run_phase1<kHeadDim, Bf16>(in, p, stream) : run_phase1<kHeadDim, Fp16>(in, p, stream);
    };
    return with_kernel_head_dim(in->head_dim, in->head_dim, run_at, Phase1HeadDims{});
  }
  return with_kernel_head_dim(in->head_dim, launch_head_dim(in),
                              [&](auto hd) { return run_dtype<decltype(hd)::value>(in, p, stream); });
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
  return flashcore::with_kernel_head_dim(params->head_dim, flashcore::launch_head_dim(params), [&](auto hd) {
    return flashcore::plan_info<decltype(hd)::value>(params, kp, plan);
  });
}

extern "C" int fc_attention_forward_phase1(const fc_params* params, void* stream) {
  flashcore::KernelParams kp;
  const int status = flashcore::validate_and_convert(params, &kp);
  if (status != FC_OK) return status;
  if (params->dtype == FC_E4M3) {
    return flashcore::report_error(FC_ERR_INVALID_ARGUMENT, "the phase-1 kernel takes 16-bit inputs only: FP8 needs "
                                   "fc_attention_forward");
  }
  if (flashcore::uses_serving(params)) {
    return flashcore::report_error(FC_ERR_INVALID_ARGUMENT, "the phase-1 kernel takes dense batches only: packed "
                                   "rows, per-sequence keys, cache slots, window and softcap need fc_attention_forward");
  }
  if (!flashcore::in_sequence(static_cast<int>(params->head_dim), flashcore::Phase1HeadDims{})) {
    return flashcore::report_error(FC_ERR_INVALID_ARGUMENT, "the phase-1 kernel takes head dims 64, 128 and 256 only "
                                   "(got %lld): fc_attention_forward runs the others",
                                   static_cast<long long>(params->head_dim));
  }
  return flashcore::dispatch(params, kp, static_cast<cudaStream_t>(stream), true);
}

// A head dim the table does not list has no options: 0, with fc_last_error() saying why.
extern "C" int fc_block_n_options(int head_dim, int32_t* out, int max) {
  int n = 0;
  flashcore::with_kernel_head_dim(head_dim, flashcore::kernel_head_dim(head_dim), [&](auto hd) {
    n = flashcore::block_n_options<decltype(hd)::value>(out, max);
    return FC_OK;
  });
  return n;
}

extern "C" int fc_points(int head_dim, int32_t* out, int max, int defaults_only) {
  int n = 0;
  flashcore::with_kernel_head_dim(head_dim, flashcore::kernel_head_dim(head_dim), [&](auto hd) {
    n = flashcore::point_options<decltype(hd)::value>(out, max, defaults_only == 0);
    return FC_OK;
  });
  return n;
}

#ifdef FLASHCORE_TIMELINE
// Experiment only: zero and copy out the timeline stamps (kernel/timeline.h) of this object's kernels: the default
// points and FP8's (the points file's extra points have their own copy in their objects).
extern "C" int fc_timeline_clear(void) {
  void* addr = nullptr;
  if (cudaGetSymbolAddress(&addr, flashcore::g_timeline) != cudaSuccess) return -1;
  return cudaMemset(addr, 0, sizeof(long long) * flashcore::kTlWords) == cudaSuccess ? 0 : -1;
}
extern "C" int fc_timeline_read(long long* out, int words) {
  if (words > flashcore::kTlWords) words = flashcore::kTlWords;
  return cudaMemcpyFromSymbol(out, flashcore::g_timeline, sizeof(long long) * words) == cudaSuccess ? words : -1;
}
#endif
