// Host-side validation of the serving fields (flashcore.h): packed rows, per-sequence key counts, cache slots,
// pages, window, soft-capping, chunks, sinks. check_serving refuses their bad combinations and sizes (the values of
// their device arrays are the kernel's to check: kernel/seqlens.h); convert_serving copies them into KernelParams
// with the bounds the kernel checks those values against. validate_and_convert (kernel/validate.cu) calls both.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "flashcore.h"
#include "head_dims.h"
#include "launch.h"

namespace flashcore {

int check_serving(const fc_params* in) {
  const int64_t kMaxRows = int64_t{1} << 30;
  if (in->cu_seqlens_q != nullptr && (in->total_q < 1 || in->total_q > kMaxRows)) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "total_q = %lld: packed queries (cu_seqlens_q) need 1 .. 2^30 rows",
                        static_cast<long long>(in->total_q));
  }
  if (in->cu_seqlens_k != nullptr && (in->total_k < 1 || in->total_k > kMaxRows)) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "total_k = %lld: packed keys (cu_seqlens_k) need 1 .. 2^30 rows",
                        static_cast<long long>(in->total_k));
  }
  if (in->seqused_q != nullptr && in->cu_seqlens_q == nullptr) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "seqused_q limits packed query sequences: it needs cu_seqlens_q");
  }
  if (in->leftpad_k != nullptr && in->seqused_k == nullptr) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "leftpad_k needs seqused_k (each sequence's end)");
  }
  if (in->attention_chunk < 0) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "attention_chunk = %d: 0 (off) or the chunk's keys (> 0)",
                        in->attention_chunk);
  }
  if (in->sinks != nullptr && reinterpret_cast<uintptr_t>(in->sinks) % 4 != 0) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "sinks: a float array [heads_q], 4-byte aligned (got %p)",
                        static_cast<const void*>(in->sinks));
  }
  if (in->cu_seqlens_k != nullptr && in->kv_batch_idx != nullptr) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "kv_batch_idx indexes a batched cache: it cannot be combined with "
                        "packed keys (cu_seqlens_k)");
  }
  if (in->page_table == nullptr &&
      (in->kv_batch < 0 || in->kv_batch > 65535 || (in->kv_batch != 0 && in->kv_batch != in->batch &&
                                                    in->kv_batch_idx == nullptr && in->cu_seqlens_k == nullptr))) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "kv_batch = %lld: 0 (= batch), or with kv_batch_idx 1 .. 65535",
                        static_cast<long long>(in->kv_batch));
  }
  if (in->window != 0 && (in->window != 1 || in->window_left < -1 || in->window_right < -1)) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "window = %d, window_left = %d, window_right = %d: window is 0 or 1 "
                        "and each bound >= -1 (-1: unbounded)", in->window, in->window_left, in->window_right);
  }
  if (in->page_table != nullptr) {
    if (in->seqused_k == nullptr || in->cu_seqlens_k != nullptr) {  // kv_batch_idx: the row of page_table
      return report_error(FC_ERR_INVALID_ARGUMENT, "page_table needs seqused_k (each sequence's keys) and does not "
                          "take cu_seqlens_k");
    }
    if (in->page_size < 1 || in->page_size > 65536) {
      return report_error(FC_ERR_INVALID_ARGUMENT, "page_size = %lld: a paged cache needs 1 .. 65536 keys per page",
                          static_cast<long long>(in->page_size));
    }
    if (in->kv_batch < 1 || in->kv_batch > (int64_t{1} << 31) - 1) {
      return report_error(FC_ERR_INVALID_ARGUMENT, "kv_batch = %lld: with page_table it is the number of pages of k "
                          "and v, 1 .. 2^31 - 1", static_cast<long long>(in->kv_batch));
    }
    // kv_batch_idx picks any of page_table's rows: the table index row * stride + page stays in 32 bits.
    const int64_t rows = in->page_table_rows != 0 ? in->page_table_rows : in->batch;
    if (in->page_table_rows < 0 || in->page_table_rows > INT32_MAX) {
      return report_error(FC_ERR_INVALID_ARGUMENT, "page_table_rows = %lld: page_table's rows (0: batch)",
                          static_cast<long long>(in->page_table_rows));
    }
    if (in->page_table_stride < 1 || in->page_table_stride * rows > INT32_MAX ||
        in->page_table_stride * in->page_size < in->seqlen_k) {
      return report_error(FC_ERR_INVALID_ARGUMENT, "page_table_stride = %lld: each sequence's row of page_table needs "
                          "room for seqlen_k = %lld keys (%lld-key pages), and the table below 2^31 entries",
                          static_cast<long long>(in->page_table_stride), static_cast<long long>(in->seqlen_k),
                          static_cast<long long>(in->page_size));
    }
  } else if (in->page_size != 0 || in->page_table_stride != 0 || in->page_table_rows != 0) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "page_size = %lld, page_table_stride = %lld, page_table_rows = %lld "
                        "without page_table: leave them 0", static_cast<long long>(in->page_size),
                        static_cast<long long>(in->page_table_stride), static_cast<long long>(in->page_table_rows));
  }
  if (!(std::isfinite(in->softcap) && in->softcap >= 0.f)) {
    return report_error(FC_ERR_INVALID_ARGUMENT, "softcap = %g must be finite and >= 0 (0: off)", in->softcap);
  }
  return FC_OK;
}

bool uses_serving(const fc_params* in) {
  return in->cu_seqlens_q != nullptr || in->cu_seqlens_k != nullptr || in->seqused_q != nullptr ||
         in->seqused_k != nullptr || in->leftpad_k != nullptr ||
         in->kv_batch_idx != nullptr || in->window != 0 || in->softcap != 0.f || in->attention_chunk != 0 ||
         in->sinks != nullptr || (in->kv_batch != 0 && in->kv_batch != in->batch) || in->page_table != nullptr ||
         kernel_head_dim(in->head_dim) != in->head_dim || (in->head_dim_v != 0 && in->head_dim_v != in->head_dim);
}

bool rows_per_sequence(const fc_params* in) {
  return in->cu_seqlens_q != nullptr || in->cu_seqlens_k != nullptr || in->seqused_q != nullptr ||
         in->seqused_k != nullptr || in->leftpad_k != nullptr || in->kv_batch_idx != nullptr ||
         (in->kv_batch != 0 && in->kv_batch != in->batch) || in->page_table != nullptr;
}

void convert_serving(const fc_params* in, KernelParams* out) {
  // Packed layouts have no batch stride (flashcore.h: unused): the kernel steps by batch * stride[0] there, which
  // must not move a caller's pointer (a C caller's packed [total, H, D] stride[0] made the register epilogue write
  // past o: compute-sanitizer memcheck through flashcore_driver).
  if (in->cu_seqlens_q != nullptr) out->q_stride[0] = out->o_stride[0] = 0;
  if (in->cu_seqlens_k != nullptr) out->k_stride[0] = out->v_stride[0] = 0;
  out->page_table = in->page_table;
  out->page_table_stride = in->page_table_stride;
  out->page_size = static_cast<int>(in->page_size);
  out->page_box = 0;  // the launcher's: it depends on BLOCK_N (run_tiles.cuh), as does page_gather
  out->page_gather = 0;
  out->kv_pages = in->page_table != nullptr ? static_cast<int>(in->kv_batch) : 0;
  out->head_dim_k = static_cast<int>(in->head_dim);
  out->div_page = make_fast_div(out->page_size);
  out->cu_seqlens_q = in->cu_seqlens_q;
  out->cu_seqlens_k = in->cu_seqlens_k;
  out->seqused_q = in->seqused_q;
  out->seqused_k = in->seqused_k;
  out->kv_batch_idx = in->kv_batch_idx;
  out->leftpad_k = in->leftpad_k;
  out->errors = in->errors;
  out->total_q = static_cast<int>(in->total_q);
  out->total_k = static_cast<int>(in->total_k);
  const bool paged = in->page_table != nullptr;  // kv_batch_idx then picks a row of page_table, kv_batch counts pages
  const int64_t table_rows = in->page_table_rows > 0 ? in->page_table_rows : in->batch;
  out->kv_slots = static_cast<int>(paged ? table_rows : (in->kv_batch > 0 ? in->kv_batch : in->batch));
  out->kv_capacity = static_cast<int>(paged ? std::min<int64_t>(in->page_table_stride * in->page_size, INT32_MAX)
                                            : in->seqlen_k);  // the keys seqused_k may name
  if (in->cu_seqlens_q != nullptr) {
    out->lse_stride[0] = 0;
    out->lse_stride[1] = in->total_q;
  } else {
    out->lse_stride[0] = in->heads_q * in->seqlen_q;
    out->lse_stride[1] = in->seqlen_q;
  }
}

}  // namespace flashcore
