// Where one sequence of a call lives: its query and key rows, for dense batches (every sequence seqlen_q x
// seqlen_k, no memory read) and for the serving layouts (packed varlen rows and their used counts, per-sequence
// KV-cache lengths, a cache slot per sequence). The producer reads the arrays once per tile and hands q_len, k_len
// and q_off to the consumers with the tile (tile_scheduler.h TileInfo); a paged cache's left pad is the masks'
// (kernel/mask.h key_floor).
// Every value read is checked against its bound (kernel/index_errors.h) with one compare; a sequence with a bad one
// gets k_len kBadSeq: it loads no key, its o rows and LSE come out NaN (the consumers' epilogue), and its query rows
// are clamped into the packed rows, so no load or store leaves a tensor. Which value was bad is recorded apart from
// the producer thread, which has 32-40 registers (a call there, even to a __noinline__ reporter, made every kernel
// spill): warps 1-3 of CTA 0's producer warpgroup check every sequence's values again (report_seq_values); a bad
// page id is recorded by the consumers' epilogue (the TMA page walk's from kBadPage, the gather's by reading the
// tile's page ids again).
#pragma once
#include "index_errors.h"
#include "params.h"

namespace flashcore {

// k_len of a sequence whose index data is bad: no K/V block is loaded, and the epilogue writes NaN (any k_len < 0).
constexpr int kBadSeq = -1;
// k_len of a tile whose page walk met a page id outside the cache (kernel/hopper_mainloop.h): kBadPage - e for the
// table entry e, which the consumers' epilogue records (report_tile_page): any record in the paged producer, even
// at the tile's end, made the 2-consumer hdim-128 kernels spill 4-8 B. e < 2^31 - 1 (validate_serving.cu): it fits.
constexpr int kBadPage = -2;

struct SeqLens {
  int q_off;     // first query row in q/o's sequence dim (packed: cu_seqlens_q[b]; else 0)
  int q_len;     // query rows of the sequence
  int k_off;     // first key row in k/v's sequence dim (packed: cu_seqlens_k[b]; else 0)
  int k_len;     // keys the sequence attends to (kBadSeq: bad index data)
  int kv_batch;  // k/v batch coordinate (packed: 0; else kv_batch_idx[b] or b)
};

// Packed offsets cu[b], cu[b + 1] of `total` rows: whether they are bad (cu[b - 1] <= cu[b] <= cu[b + 1] <= total
// fails, or cu[b - 1] < 0), reported as element b or b + 1 of `tensor`.
__device__ __forceinline__ bool report_packed(const KernelParams& p, const int* cu, IndexTensor tensor, int batch,
                                              int total) {
  const int prev = batch > 0 ? __ldg(cu + batch - 1) : 0;
  const int lo = __ldg(cu + batch), hi = __ldg(cu + batch + 1);
  if (prev < 0 || lo < prev || lo > total) {
    report_index_error(p.errors, tensor, batch, lo, total);
    return true;
  }
  if (hi < lo || hi > total) {
    report_index_error(p.errors, tensor, batch + 1, hi, total);
    return true;
  }
  return false;
}

// Whether `value` (element `index` of `tensor`) lies outside [0, limit]; reported if so.
__device__ __forceinline__ bool report_above(const KernelParams& p, IndexTensor tensor, int index, int value,
                                             int limit) {
  if (static_cast<unsigned>(value) <= static_cast<unsigned>(limit)) return false;
  report_index_error(p.errors, tensor, index, value, limit);
  return true;
}

// Sequence `batch`'s values checked again in seq_lens's order, and the first bad one recorded.
__device__ __forceinline__ void report_seq(const KernelParams& p, int batch) {
  int q_len = p.seqlen_q, k_len = p.seqlen_k;
  if (p.cu_seqlens_q != nullptr) {
    if (report_packed(p, p.cu_seqlens_q, kIndexCuSeqlensQ, batch, p.total_q)) return;
    q_len = __ldg(p.cu_seqlens_q + batch + 1) - __ldg(p.cu_seqlens_q + batch);
    if (p.seqused_q != nullptr && report_above(p, kIndexSequsedQ, batch, __ldg(p.seqused_q + batch), q_len)) return;
  }
  if (p.cu_seqlens_k != nullptr) {
    if (report_packed(p, p.cu_seqlens_k, kIndexCuSeqlensK, batch, p.total_k)) return;
    k_len = __ldg(p.cu_seqlens_k + batch + 1) - __ldg(p.cu_seqlens_k + batch);
  } else {
    k_len = p.kv_capacity;
    if (p.kv_batch_idx != nullptr) {
      const int slot = __ldg(p.kv_batch_idx + batch);
      if (static_cast<unsigned>(slot) >= static_cast<unsigned>(p.kv_slots)) {
        report_index_error(p.errors, kIndexCacheBatchIdx, batch, slot, p.kv_slots);
        return;
      }
    }
  }
  if (p.seqused_k != nullptr) {
    const int used = __ldg(p.seqused_k + batch);
    if (report_above(p, p.cu_seqlens_k != nullptr ? kIndexSequsedK : kIndexCacheSeqlens, batch, used, k_len)) return;
    k_len = used;
  } else if (p.cu_seqlens_k == nullptr) {
    k_len = p.seqlen_k;
  }
  if (p.leftpad_k != nullptr) report_above(p, kIndexCacheLeftpad, batch, __ldg(p.leftpad_k + batch), k_len);
}

// A tile's k_len as its epilogue reads it again: a page id the walk found bad (kBadPage), recorded by one thread.
__device__ __forceinline__ void report_tile_page(const KernelParams& p, int k_len) {
  if (k_len > kBadPage) return;
  const int entry = kBadPage - k_len;
  report_index_error(p.errors, kIndexPageTable, entry, __ldg(p.page_table + entry), p.kv_pages);
}

// A gathered tile whose O came out NaN (kernel/paged_gather.cuh copies a bad page id's row from NaNs): the page ids
// of its blocks read again and the first bad one recorded (NaN inputs find none; bad values of the sequence are
// report_seq_values's). One consumer thread, in the epilogue: records in the gather warps made them spill 12-32 B.
template <int kBlockN>
__device__ __forceinline__ void report_gathered_pages(const KernelParams& p, int batch, int kv_begin, int n_blocks) {
  const int row = p.kv_batch_idx != nullptr ? __ldg(p.kv_batch_idx + batch) : batch;
  const int keys = __ldg(p.seqused_k + batch);
  if (static_cast<unsigned>(row) >= static_cast<unsigned>(p.kv_slots) ||
      static_cast<unsigned>(keys) > static_cast<unsigned>(p.kv_capacity)) {
    return;
  }
  const int lo = kv_begin * kBlockN, hi = min(keys, (kv_begin + n_blocks) * kBlockN);
  if (hi <= lo) return;
  const int first = row * static_cast<int>(p.page_table_stride);
  for (int e = first + p.div_page(lo), last = first + p.div_page(hi - 1); e <= last; ++e) {
    const int page = __ldg(p.page_table + e);
    if (static_cast<unsigned>(page) >= static_cast<unsigned>(p.kv_pages)) {
      report_index_error(p.errors, kIndexPageTable, e, page, p.kv_pages);
      return;
    }
  }
}

// Warps 1-3 of the producer warpgroup (`t` in 0..95), once per launch in CTA 0: every sequence's values, recorded
// (seq_lens itself only marks the sequence). Their loads overlap the producer thread's first ones.
__device__ __forceinline__ void report_seq_values(const KernelParams& p, int t) {
  if (blockIdx.x != 0) return;
  for (int b = t; b < p.batch; b += 96) report_seq(p, b);
}

// The sequence's rows as read, unchecked: for FP8 kernels only, but their paged producer (packed rows and contiguous
// caches: their index values are checked on the host with debug_checks only, as in FA3). Their 24-32-register producers' allocation is
// fragile: the checks cost them 8 B more spill, and reading no array at all moved hdim 256's from 40 to 104 B, so
// they keep these reads as they were.
__device__ __forceinline__ SeqLens seq_lens_unchecked(const KernelParams& p, int batch) {
  SeqLens s{0, p.seqlen_q, 0, p.seqlen_k, batch};
  if (p.cu_seqlens_q != nullptr) {
    s.q_off = __ldg(p.cu_seqlens_q + batch);
    s.q_len = p.seqused_q != nullptr ? __ldg(p.seqused_q + batch) : __ldg(p.cu_seqlens_q + batch + 1) - s.q_off;
  }
  if (p.cu_seqlens_k != nullptr) {
    s.k_off = __ldg(p.cu_seqlens_k + batch);
    s.k_len = __ldg(p.cu_seqlens_k + batch + 1) - s.k_off;
    s.kv_batch = 0;
  } else if (p.kv_batch_idx != nullptr) {
    s.kv_batch = __ldg(p.kv_batch_idx + batch);
  }
  if (p.seqused_k != nullptr) s.k_len = __ldg(p.seqused_k + batch);
  if (p.leftpad_k != nullptr) {
    const int pad = __ldg(p.leftpad_k + batch);
    s.k_off += pad;
    s.k_len -= pad;
  }
  return s;
}

// The sequence's rows, one compare per value read (unsigned where a negative value must fail too). kPaged: the paged
// producer's (kernel/hopper_mainloop.h), which the kernel runs exactly when p.page_table is set. kChecked false:
// seq_lens_unchecked (FP8).
template <bool kPaged, bool kChecked = true>
__device__ __forceinline__ SeqLens seq_lens(const KernelParams& p, int batch) {
  if constexpr (!kChecked) return seq_lens_unchecked(p, batch);
  SeqLens s{0, p.seqlen_q, 0, p.seqlen_k, batch};
  bool bad = false;
  if (p.cu_seqlens_q != nullptr) {
    // Rows [cu[b], cu[b + 1]) clamped into [cu[b - 1], total_q] (the same rows when the offsets are good): a bad
    // sequence's NaN rows never reach the sequence before it, nor past the packed rows.
    const int prev = batch > 0 ? __ldg(p.cu_seqlens_q + batch - 1) : 0;
    const int lo = __ldg(p.cu_seqlens_q + batch), hi = __ldg(p.cu_seqlens_q + batch + 1);
    bad = prev < 0 || lo < prev || hi < lo || hi > p.total_q;
    s.q_off = min(max(max(lo, prev), 0), p.total_q);
    s.q_len = min(max(hi, s.q_off), p.total_q) - s.q_off;
    // A used count replaces the length everywhere (tile rows, masks, the bottom-right diagonal), as in FA3.
    if (p.seqused_q != nullptr) {
      const int used = __ldg(p.seqused_q + batch);
      bad |= static_cast<unsigned>(used) > static_cast<unsigned>(s.q_len);
      s.q_len = min(max(used, 0), s.q_len);
    }
  }
  // Key values need no clamp: a bad sequence loads no key.
  int k_cap = p.kv_capacity;  // what seqused_k may use: the cache's keys, or the packed sequence's
  if (p.cu_seqlens_k != nullptr) {
    const int prev = batch > 0 ? __ldg(p.cu_seqlens_k + batch - 1) : 0;
    s.k_off = __ldg(p.cu_seqlens_k + batch);
    const int hi = __ldg(p.cu_seqlens_k + batch + 1);
    bad |= prev < 0 || s.k_off < prev || hi < s.k_off || hi > p.total_k;
    s.k_len = k_cap = hi - s.k_off;
    s.kv_batch = 0;
  } else if (p.kv_batch_idx != nullptr) {
    s.kv_batch = __ldg(p.kv_batch_idx + batch);
    bad |= static_cast<unsigned>(s.kv_batch) >= static_cast<unsigned>(p.kv_slots);
  }
  if (p.seqused_k != nullptr) {
    s.k_len = __ldg(p.seqused_k + batch);
    bad |= static_cast<unsigned>(s.k_len) > static_cast<unsigned>(k_cap);
  }
  // A left-padded cache: rows [leftpad, seqused_k) hold the keys (FA3's). Paged, they stay at their positions (the
  // page walk keeps its page-aligned boxes) and the masks drop rows [0, leftpad) (kernel/mask.h key_floor).
  if (p.leftpad_k != nullptr) {
    const int pad = __ldg(p.leftpad_k + batch);
    bad |= static_cast<unsigned>(pad) > static_cast<unsigned>(s.k_len);
    if (!kPaged) {
      s.k_off += pad;
      s.k_len -= pad;
    }
  }
  if (bad) {  // recorded by report_seq_values
    s.k_len = kBadSeq;
    s.kv_batch = 0;
  }
  return s;
}

// The batch coordinate of q and o in their tensor maps (packed rows: one batch entry).
__device__ __forceinline__ int q_batch_coord(const KernelParams& p, int batch) {
  return p.cu_seqlens_q != nullptr ? 0 : batch;
}

}  // namespace flashcore
