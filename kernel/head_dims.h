// Head dims: FC_HEAD_DIM_TABLE (flashcore.h) says which ones a call may use, KernelHeadDims which kernels are
// compiled; every head-dim decision on the host goes through here, so a head dim the table does not list is an
// error everywhere, never a fall-through to some kernel.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "flashcore.h"

namespace flashcore {

// The head dims a Hopper kernel is compiled for, ascending (each has its HeadDimTraits and BlockNChoice, and those FP8
// runs an Fp8Choice: kernel/hopper_config.h, kernel/tile_choice.h). A table entry runs on the smallest one that holds
// it. vLLM's FA3 backend lists 32, 64, 96, 128, 160, 192, 224 and 256; FA3 runs 32 on its 64 kernel, 160 on its 192
// one and 224 on its 256 one, so half, a sixth and an eighth of every GEMM multiply zero columns, which 32's, 160's
// and 224's own kernels do not compute.
using KernelHeadDims = std::integer_sequence<int, 32, 64, 96, 128, 160, 192, 224, 256>;

// The kernel head dims whose default points kernel/head_dims_apart.cu compiles, X(hd) each: flashcore.cu declares
// them extern (as the FP8 decode points, kernel/fp8_points.h): instantiated in flashcore.cu's module they would change
// cicc's code for its other kernels, and a tuned table could no longer carry over to them (harness/tune/rekey.py).
#define FC_HEAD_DIMS_APART(X) X(32) X(160) X(224)

template <int... kDims>
constexpr bool in_sequence(int head_dim, std::integer_sequence<int, kDims...>) {
  return ((head_dim == kDims) || ...);
}
constexpr bool is_kernel_head_dim(int head_dim) { return in_sequence(head_dim, KernelHeadDims{}); }

// The smallest of kDims that holds `head_dim` and that `accept` (when given) takes; 0 when none does.
template <int... kDims>
constexpr int64_t smallest_kernel_at_least(int64_t head_dim, std::integer_sequence<int, kDims...>,
                                           bool (*accept)(int) = nullptr) {
  int64_t found = 0;
  for (int k : {kDims...}) {
    if (found == 0 && head_dim <= k && (accept == nullptr || accept(k))) found = k;
  }
  return found;
}

// Whether (head_dim, head_dim_v) is an entry of FC_HEAD_DIM_TABLE; head_dim_v 0 means head_dim.
constexpr bool listed_head_dims(int64_t head_dim, int64_t head_dim_v) {
  const int64_t v = head_dim_v != 0 ? head_dim_v : head_dim;
  bool found = false;
#define FC_LISTED(hd, hd_v, fp8) found = found || (head_dim == (hd) && v == (hd_v));
  FC_HEAD_DIM_TABLE(FC_LISTED)
#undef FC_LISTED
  return found;
}

// Whether FP8 inputs take head_dim (the table's fp8_supported of its entry with v of the same head dim).
constexpr bool fp8_head_dim(int64_t head_dim) {
  bool found = false;
#define FC_FP8(hd, hd_v, fp8) found = found || (head_dim == (hd) && (hd) == (hd_v) && (fp8) != 0);
  FC_HEAD_DIM_TABLE(FC_FP8)
#undef FC_FP8
  return found;
}

// The kernel head dim that runs `head_dim`, the smallest that holds it (8..24 on 32, 40..56 on 64, 72..88 on 96,
// 104..120 on 128, 136..152 on 160, 168..184 on 192, 200..216 on 224, 232..248 on 256: TMA zero-fills the missing
// columns); 0 for a head dim the table does not list. A paged call runs on a kernel of 128-byte spans
// (paged_kernel_head_dim, kernel/validate.cu launch_head_dim).
constexpr int64_t kernel_head_dim(int64_t head_dim) {
  bool listed = false;
#define FC_ANY_V(hd, hd_v, fp8) listed = listed || head_dim == (hd);
  FC_HEAD_DIM_TABLE(FC_ANY_V)
#undef FC_ANY_V
  return listed ? smallest_kernel_at_least(head_dim, KernelHeadDims{}) : 0;
}

// The kernel that runs a paged call whose head dim runs on `kernel_hd`: the smallest from 128 up whose rows are whole
// 128-byte swizzle spans (hdim 32's and 64's three consumer warpgroups run no pages; the small-page gather copies
// 128-byte spans, and the page walk's boxes are built and tested on them): 32, 64 and 96 on 128, 160 on 192, 224 on
// 256. 0 for 0.
constexpr bool runs_pages(int kernel_hd) { return kernel_hd >= 128 && kernel_hd % 64 == 0; }
constexpr int64_t paged_kernel_head_dim(int64_t kernel_hd) {
  return kernel_hd == 0 ? 0 : smallest_kernel_at_least(kernel_hd, KernelHeadDims{}, runs_pages);
}

// FA3's rule, which the table spells out: q's head dim a multiple of kHeadDimAlign (a row is whole 16-byte chunks
// of 16-bit elements, what TMA and the cp.async gather copy) up to kMaxHeadDim. Error messages state the rule.
constexpr int kHeadDimAlign = 8, kMaxHeadDim = 256;
constexpr bool table_follows_rule() {
  for (int64_t d = 1; d <= 2 * kMaxHeadDim; ++d) {
    if ((kernel_head_dim(d) != 0) != (d % kHeadDimAlign == 0 && d <= kMaxHeadDim) ||
        (kernel_head_dim(d) != 0 && !listed_head_dims(d, d))) {
      return false;
    }
  }
  return true;
}
static_assert(table_follows_rule(), "FC_HEAD_DIM_TABLE: lists every multiple of kHeadDimAlign up to kMaxHeadDim (with "
              "head_dim_v == head_dim), and no other head dim");

// Every entry runs on a compiled kernel that holds both of its head dims, paged calls too; FP8 runs unpadded kernels
// only.
#define FC_CHECK_ENTRY(hd, hd_v, fp8)                                                                              \
  static_assert(kernel_head_dim(hd) != 0 && (hd_v) <= kernel_head_dim(hd), "FC_HEAD_DIM_TABLE: no kernel holds " \
                "head dims " #hd " / " #hd_v);                                                                   \
  static_assert(paged_kernel_head_dim(kernel_head_dim(hd)) >= kernel_head_dim(hd), "FC_HEAD_DIM_TABLE: no kernel " \
                "of 128-byte spans runs paged calls of head dim " #hd);                                          \
  static_assert(!(fp8) || kernel_head_dim(hd) == (hd), "FC_HEAD_DIM_TABLE: FP8 at " #hd " needs a kernel of it");
FC_HEAD_DIM_TABLE(FC_CHECK_ENTRY)
#undef FC_CHECK_ENTRY

int report_error(int status, const char* fmt, ...);  // kernel/validate.cu

// Calls f(std::integral_constant<int, kernel head dim>) with the kernel of `kernel_hd` (kernel_head_dim's answer),
// or reports FC_ERR_INVALID_ARGUMENT naming `head_dim` when no kernel is compiled for it. The one place that turns
// a run-time head dim into a compiled one.
template <typename F, int... kDims>
int with_kernel_head_dim(int64_t head_dim, int64_t kernel_hd, F&& f, std::integer_sequence<int, kDims...>) {
  int status = FC_ERR_INVALID_ARGUMENT;
  const bool found = ((kernel_hd == kDims && (status = f(std::integral_constant<int, kDims>{}), true)) || ...);
  if (!found) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "head_dim %lld is not supported: fc_head_dims() lists the head dims "
                        "(kernel/flashcore.h FC_HEAD_DIM_TABLE)", static_cast<long long>(head_dim));
  }
  return status;
}
template <typename F>
int with_kernel_head_dim(int64_t head_dim, int64_t kernel_hd, F&& f) {
  return with_kernel_head_dim(head_dim, kernel_hd, static_cast<F&&>(f), KernelHeadDims{});
}

}  // namespace flashcore
