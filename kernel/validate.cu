// Host-side validation: every fc_params field is checked before anything reaches the GPU (the serving fields by
// kernel/validate_serving.cu), with the error text fc_last_error() returns, the device check, and the small C entries
// that describe the build (head dims, version, kernel id). fc_kernel_id lives here, not in flashcore.cu, because its value changes with every kernel
// source: only this small object recompiles for it.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "common.h"
#include "flashcore.h"
#include "head_dims.h"
#include "launch.h"
#include "tile_point.h"

namespace flashcore {
namespace {

thread_local char g_last_error[512] = "";

int fail(int status, const char* fmt, va_list args) {
  vsnprintf(g_last_error, sizeof(g_last_error), fmt, args);
  return status;
}


bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// For error messages: FP8's head dims of FC_HEAD_DIM_TABLE, each once ("64, 128 or 256"), or the table's rule
// (kernel/head_dims.h table_follows_rule).
const char* head_dim_list(bool fp8) {
  static thread_local char text[2][128];
  char* out = text[fp8 ? 1 : 0];
  if (!fp8) {
    snprintf(out, sizeof(text[0]), "a multiple of %d up to %d (as FA3)", kHeadDimAlign, kMaxHeadDim);
    return out;
  }
  int dims[32] = {}, n = 0;
  auto add = [&](int hd) {
    for (int i = 0; i < n; ++i) {
      if (dims[i] == hd) return;
    }
    dims[n++] = hd;
  };
#define FC_COLLECT(hd, hd_v, fp8_ok) \
  if (!fp8 || ((fp8_ok) && (hd) == (hd_v))) add(hd);
  FC_HEAD_DIM_TABLE(FC_COLLECT)
#undef FC_COLLECT
  int at = 0;
  out[0] = '\0';
  for (int i = 0; i < n; ++i) {
    const char* sep = i == 0 ? "" : (i == n - 1 ? " or " : ", ");
    at += snprintf(out + at, sizeof(text[0]) - at, "%s%d", sep, dims[i]);
  }
  return out;
}

// Strides of a [B, S, H, D] tensor: each must be >= 0 and a multiple of 16 bytes (8 16-bit or 16 FP8 elements),
// since every row is copied in 16-byte chunks.
int check_strides(const char* name, const int64_t (&stride)[3], int elems = kChunkElems) {
  const char* dims[3] = {"batch", "seq", "head"};
  for (int i = 0; i < 3; ++i) {
    if (stride[i] < 0 || stride[i] % elems != 0) {
      return report_error(FC_ERR_INVALID_ARGUMENT,
                  "%s: %s stride %lld is not allowed: strides must be non-negative multiples of %d elements (16 bytes)",
                  name, dims[i], static_cast<long long>(stride[i]), elems);
    }
  }
  return FC_OK;
}

// FP8: head dims 64/128/256, pages at head dim 128 only, no window, softcap or chunks, descale arrays 4-byte aligned
// with non-negative strides, a known fp8_v_transpose; 16-bit: no descales, fp8_v_transpose 0.
int check_fp8(const fc_params* in) {
  const float* ptrs[3] = {in->q_descale, in->k_descale, in->v_descale};
  const int64_t* strides[3] = {in->q_descale_stride, in->k_descale_stride, in->v_descale_stride};
  const char* names[3] = {"q_descale", "k_descale", "v_descale"};
  if (in->dtype != FC_E4M3) {
    for (int i = 0; i < 3; ++i) {
      if (ptrs[i] != nullptr) {
        return report_error(FC_ERR_INVALID_ARGUMENT, "%s is for FP8 inputs (dtype FC_E4M3): leave it NULL with "
                            "16-bit inputs", names[i]);
      }
    }
    if (in->fp8_v_transpose != FC_FP8_VT_AUTO) {
      return report_error(FC_ERR_INVALID_ARGUMENT, "fp8_v_transpose %d is for FP8 inputs (dtype FC_E4M3): leave it 0 "
                          "with 16-bit inputs", in->fp8_v_transpose);
    }
    return FC_OK;
  }
  if (in->fp8_v_transpose != FC_FP8_VT_AUTO && in->fp8_v_transpose != FC_FP8_VT_PASS &&
      in->fp8_v_transpose != FC_FP8_VT_SMEM) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "fp8_v_transpose %d: use FC_FP8_VT_AUTO (0), FC_FP8_VT_PASS (1) or "
                        "FC_FP8_VT_SMEM (2)", in->fp8_v_transpose);
  }
  if (!fp8_head_dim(in->head_dim)) {  // FC_HEAD_DIM_TABLE's fp8_supported: no padded head dim
    return report_error(FC_ERR_INVALID_ARGUMENT, "head_dim %lld with FP8 inputs: FP8 runs head dims %s",
                        static_cast<long long>(in->head_dim), head_dim_list(true));
  }
  if (in->sinks != nullptr) {  // the FP8 epilogue's LSE carries P's offset: the sink is not joined there
    return report_error(FC_ERR_INVALID_ARGUMENT, "sinks (attention sinks) with FP8 inputs: sinks need 16-bit inputs");
  }
  // Packed rows, used counts and a contiguous cache (lengths, slots, a left pad) are run-time properties of the FP8
  // kernels (kernel/seqlens.h). A paged cache takes the hdim-128 point's page walk (kernel_wgmma.cuh kRunsPages) in
  // boxes of at least 16 rows (smaller pages are gathered for 16-bit inputs only). The rest is compiled for 16-bit
  // inputs only (kLocal: windows, chunks, a paged left pad; kSoftcap) or joins no FP8 epilogue (one head dim).
  const bool paged = in->page_table != nullptr;
  const char* refused = paged && in->head_dim != 128        ? "page_table (a paged cache) at a head dim other than 128"
                        : paged && in->page_size % 16 != 0  ? "page_table (a paged cache) with pages of other than a "
                                                              "multiple of 16 keys"
                        : paged && in->leftpad_k != nullptr ? "cache_leftpad with a paged cache"
                        : in->window != 0                   ? "window"
                        : in->softcap != 0.f                ? "softcap"
                        : in->attention_chunk != 0          ? "attention_chunk"
                        : in->head_dim_v != 0 && in->head_dim_v != in->head_dim ? "head_dim_v (a v head dim of its own)"
                                                                                : nullptr;
  if (refused != nullptr) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "%s with FP8 inputs: FP8 runs dense batches, packed rows (cu_seqlens, "
                        "seqused), contiguous KV caches (per-sequence lengths, slots, left pad) and, at head dim 128, "
                        "paged caches with pages of a multiple of 16 keys; that needs 16-bit inputs", refused);
  }
  for (int i = 0; i < 3; ++i) {
    if (ptrs[i] != nullptr && (reinterpret_cast<uintptr_t>(ptrs[i]) % 4 != 0 || strides[i][0] < 0 ||
                               strides[i][1] < 0)) {
      return report_error(FC_ERR_INVALID_ARGUMENT, "%s: a float array [batch, heads_kv], 4-byte aligned, with "
                          "non-negative strides (got %p, strides %lld, %lld)", names[i],
                          static_cast<const void*>(ptrs[i]), static_cast<long long>(strides[i][0]),
                          static_cast<long long>(strides[i][1]));
    }
  }
  return FC_OK;
}

}  // namespace

int64_t launch_head_dim(const fc_params* in) {
  const int64_t kernel_hd = kernel_head_dim(in->head_dim);
  return in->page_table != nullptr ? paged_kernel_head_dim(kernel_hd) : kernel_hd;
}

int report_error(int status, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fail(status, fmt, args);
  va_end(args);
  return status;
}

int report_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return FC_OK;
  return report_error(FC_ERR_CUDA, "%s failed: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
}

int validate_and_convert(const fc_params* in, KernelParams* out) {
  if (in == nullptr) return report_error(FC_ERR_INVALID_ARGUMENT, "params is NULL");
  if (in->q == nullptr || in->k == nullptr || in->v == nullptr || in->o == nullptr) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "q, k, v and o pointers must not be NULL");
  }
  if (!aligned16(in->q) || !aligned16(in->k) || !aligned16(in->v) || !aligned16(in->o)) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "q, k, v and o must start at 16-byte aligned addresses");
  }
  if (in->dtype != FC_FP16 && in->dtype != FC_BF16 && in->dtype != FC_E4M3) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "dtype %d is not supported: use FC_FP16 (0), FC_BF16 (1) or FC_E4M3 "
                        "(2)", in->dtype);
  }
  if (kernel_head_dim(in->head_dim) == 0) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "head_dim %lld is not supported: use %s",
                        static_cast<long long>(in->head_dim), head_dim_list(false));
  }
  if (!listed_head_dims(in->head_dim, in->head_dim_v)) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "head_dim_v %lld with head_dim %lld: v's head dim is q's (0), or "
                        "one of the (head_dim, head_dim_v) pairs fc_head_dims() lists",
                        static_cast<long long>(in->head_dim_v), static_cast<long long>(in->head_dim));
  }
  const int64_t sizes[5] = {in->batch, in->heads_q, in->heads_kv, in->seqlen_q, in->seqlen_k};
  const char* names[5] = {"batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k"};
  const int64_t limits[5] = {65535, 65535, 65535, int64_t{1} << 30, int64_t{1} << 30};  // grid.z, grid.y, int32 indexing
  for (int i = 0; i < 5; ++i) {
    if (sizes[i] < 1 || sizes[i] > limits[i]) {
      return report_error(FC_ERR_INVALID_ARGUMENT, "%s = %lld is out of range [1, %lld]", names[i],
                  static_cast<long long>(sizes[i]), static_cast<long long>(limits[i]));
    }
  }
  if (in->heads_q % in->heads_kv != 0) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "heads_q = %lld must be a multiple of heads_kv = %lld",
                static_cast<long long>(in->heads_q), static_cast<long long>(in->heads_kv));
  }
  if (!(std::isfinite(in->softmax_scale) && in->softmax_scale > 0.f)) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "softmax_scale = %g must be finite and > 0", in->softmax_scale);
  }
  if (in->debug_fault < kFaultNone || in->debug_fault > kFaultSlow) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "debug_fault = %d is not a known fault (0..4)", in->debug_fault);
  }
  if (in->num_splits < 0 || in->sm_margin < 0 || (in->deterministic != 0 && in->deterministic != 1)) {
    return report_error(FC_ERR_INVALID_ARGUMENT,
                        "num_splits = %d, sm_margin = %d, deterministic = %d: num_splits and sm_margin must be >= 0 "
                        "and deterministic 0 or 1", in->num_splits, in->sm_margin, in->deterministic);
  }
  if (in->point != 0 && (in->point & flashcore::kPointFlag) == 0) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "point = 0x%x is not a point code (kernel/tile_point.h; 0: default)",
                        static_cast<unsigned>(in->point));
  }
  if (in->block_n < 0 || in->schedule < FC_SCHEDULE_DEFAULT || in->schedule > FC_SCHEDULE_WHOLE ||
      in->l2_section_pct < 0 || in->l2_section_pct > 100) {
    return report_error(FC_ERR_INVALID_ARGUMENT,
                        "block_n = %d, schedule = %d, l2_section_pct = %d: block_n must be >= 0 (0: default), "
                        "schedule 0 (default), 1 (static), 2 (dynamic) or 3 (static, whole tiles), l2_section_pct 0 (default) .. 100",
                        in->block_n, in->schedule, in->l2_section_pct);
  }
  if (in->workspace_bytes < 0) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "workspace_bytes = %lld must be >= 0",
                        static_cast<long long>(in->workspace_bytes));
  }
  int status = FC_OK;
  if ((status = check_serving(in)) != FC_OK) return status;
  if ((status = check_fp8(in)) != FC_OK) return status;
  const int in_elems = in->dtype == FC_E4M3 ? 16 : kChunkElems;  // o is 16-bit either way
  if ((status = check_strides("q", in->q_stride, in_elems)) != FC_OK) return status;
  if ((status = check_strides("k", in->k_stride, in_elems)) != FC_OK) return status;
  if ((status = check_strides("v", in->v_stride, in_elems)) != FC_OK) return status;
  if ((status = check_strides("o", in->o_stride)) != FC_OK) return status;

  int device = 0;
  if ((status = report_cuda(cudaGetDevice(&device), "cudaGetDevice")) != FC_OK) return status;
  if (!fc_device_supported(device)) return FC_ERR_UNSUPPORTED_DEVICE;

  out->q = in->q;
  out->k = in->k;
  out->v = in->v;
  out->o = in->o;
  out->lse = in->lse;
  out->batch = static_cast<int>(in->batch);
  out->heads_q = static_cast<int>(in->heads_q);
  out->heads_kv = static_cast<int>(in->heads_kv);
  out->seqlen_q = static_cast<int>(in->seqlen_q);
  out->seqlen_k = static_cast<int>(in->seqlen_k);
  out->group = static_cast<int>(in->heads_q / in->heads_kv);
  for (int i = 0; i < 3; ++i) {
    out->q_stride[i] = in->q_stride[i];
    out->k_stride[i] = in->k_stride[i];
    out->v_stride[i] = in->v_stride[i];
    out->o_stride[i] = in->o_stride[i];
  }
  out->softmax_scale = in->softmax_scale;
  out->softmax_scale_log2 = in->softmax_scale * kLog2e;
  out->softcap_prescale = 0.f;
  if (in->softcap > 0.f) {  // scores tanh(scale q.k / softcap) in [-1, 1]; softcap becomes the softmax scale
    out->softcap_prescale = in->softmax_scale / in->softcap;
    out->softmax_scale = in->softcap;
    out->softmax_scale_log2 = in->softcap * kLog2e;
  }
  // A bound at least seqlen_q + seqlen_k away never masks a key: unbounded (keeps the kernel's sums in 32 bits).
  const int64_t reach = in->seqlen_q + in->seqlen_k;
  const int64_t left = in->window != 0 ? in->window_left : -1;
  const int64_t right = in->causal != 0 ? 0 : (in->window != 0 ? in->window_right : -1);
  out->window_left = left >= reach ? -1 : static_cast<int>(left);
  out->window_right = right >= reach ? -1 : static_cast<int>(right);
  out->causal = out->window_right >= 0;
  if (!out->causal) out->window_right = 0;
  // A chunk longer than both sequences together masks what one of their length does (rows left of the keys still
  // see none), and keeps chunk_start + chunk in 32 bits.
  out->attention_chunk = static_cast<int>(std::min<int64_t>(in->attention_chunk, reach));
  out->div_chunk = make_fast_div(out->attention_chunk);
  out->sinks = in->sinks;
  out->diag_offset = static_cast<int>(in->seqlen_k - in->seqlen_q);
  out->head_dim_v = static_cast<int>(in->head_dim_v != 0 ? in->head_dim_v : in->head_dim);
  convert_serving(in, out);
  out->fault = in->debug_fault;
  out->pack_gqa = 0;  // chosen per kernel by the launcher (flashcore.cu make_plan), as is split-KV
  out->num_splits = 1;
  out->accum_rows = in->batch * in->heads_q * in->seqlen_q;
  out->o_accum = nullptr;
  out->lse_accum = nullptr;
  out->q_descale = in->q_descale;
  out->k_descale = in->k_descale;
  out->v_descale = in->v_descale;
  for (int i = 0; i < 2; ++i) {
    out->q_descale_stride[i] = in->q_descale_stride[i];
    out->k_descale_stride[i] = in->k_descale_stride[i];
    out->v_descale_stride[i] = in->v_descale_stride[i];
  }
  out->vt = nullptr;  // the launcher's (run_tiles.cuh): in the workspace
  out->vt_keys = 0;
  out->tail_first = INT32_MAX;  // no stream-K tail unless the launcher plans one (run_tiles.cuh)
  out->tail_stride = out->tail_tiles = out->tail_pieces = out->tail_blocks = 0;
  out->tail_o = nullptr;
  out->batch_order = nullptr;
  return FC_OK;
}

}  // namespace flashcore

extern "C" const char* fc_last_error(void) { return flashcore::g_last_error; }

extern "C" int fc_device_supported(int device) {
  // Called before every launch: two attribute queries (cheap), the full properties only for the error text.
  int major = 0, minor = 0;
  if (flashcore::report_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                             "cudaDeviceGetAttribute(ComputeCapabilityMajor)") != FC_OK ||
      flashcore::report_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
                             "cudaDeviceGetAttribute(ComputeCapabilityMinor)") != FC_OK) {
    return 0;
  }
  if (major == 9 && minor == 0) return 1;
  cudaDeviceProp prop;
  if (flashcore::report_cuda(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties") != FC_OK) return 0;
  flashcore::report_error(FC_ERR_UNSUPPORTED_DEVICE,
                          "device %d (%s) is SM %d.%d: FlashCore's kernel is built for SM 9.0 (H100/H200) only", device,
                          prop.name, major, minor);
  return 0;
}

extern "C" const char* fc_version(void) { return "flashcore 0.1.0 phase1 sm_90a"; }

#ifndef FLASHCORE_KERNEL_ID
#define FLASHCORE_KERNEL_ID "unknown"
#endif
extern "C" const char* fc_kernel_id(void) { return FLASHCORE_KERNEL_ID; }

extern "C" int fc_head_dims(int32_t* out, int capacity) {
  int n = 0;
#define FC_WRITE(hd, hd_v, fp8)                 \
  if (out != nullptr && n < capacity) {         \
    out[3 * n] = (hd);                          \
    out[3 * n + 1] = (hd_v);                    \
    out[3 * n + 2] = (fp8);                     \
  }                                             \
  ++n;
  FC_HEAD_DIM_TABLE(FC_WRITE)
#undef FC_WRITE
  return n;
}
