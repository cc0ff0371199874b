// Where one sequence of a call lives: its query and key rows, for dense batches (every sequence seqlen_q x
// seqlen_k, no memory read) and for the serving layouts (packed varlen rows and their used counts, per-sequence
// KV-cache lengths, a cache slot per sequence). The producer reads the arrays once per tile and hands q_len, k_len
// and q_off to the consumers with the tile (tile_scheduler.h TileInfo); a paged cache's left pad is the masks'
// (kernel/mask.h key_floor).
// Every value read is checked against its bound (kernel/index_errors.h): a bad one is recorded in the error word,
// clamped so that no load or store leaves its tensor, and marks the sequence bad: k_len kBadSeq, so the sequence
// loads no key and its o rows and LSE come out NaN (the consumers' epilogue). A bad page id does the same in the
// paged producer (hopper_mainloop.h).
#pragma once
#include "index_errors.h"
#include "params.h"

namespace flashcore {

// k_len of a sequence whose index data is bad: no K/V block is loaded, and the epilogue writes NaN.
constexpr int kBadSeq = -1;

struct SeqLens {
  int q_off;     // first query row in q/o's sequence dim (packed: cu_seqlens_q[b]; else 0)
  int q_len;     // query rows of the sequence
  int k_off;     // first key row in k/v's sequence dim (packed: cu_seqlens_k[b]; else 0)
  int k_len;     // keys the sequence attends to (kBadSeq: bad index data)
  int kv_batch;  // k/v batch coordinate (packed: 0; else kv_batch_idx[b] or b)
};

// Packed offsets cu[b], cu[b + 1] into rows [off, off + len) of `total`: a bad value (cu[b] below cu[b - 1], cu[b + 1]
// below cu[b], either past total) is recorded and clamped into [cu[b - 1], total], len >= 0: two sequences next to
// each other never share rows (farther ones may, under several bad values; each is NaN then).
__device__ __forceinline__ bool packed_rows(const KernelParams& p, const int* cu, IndexTensor tensor, int batch,
                                            int total, int& off, int& len) {
  const int prev = batch > 0 ? __ldg(cu + batch - 1) : 0;
  const int lo = __ldg(cu + batch), hi = __ldg(cu + batch + 1);
  bool ok = true;
  if (lo < prev || lo > total) {
    report_index_error(p.errors, tensor, batch, lo, total);
    ok = false;
  }
  if (hi < lo || hi > total) {
    report_index_error(p.errors, tensor, batch + 1, hi, total);
    ok = false;
  }
  off = min(max(max(lo, prev), 0), total);
  len = min(max(hi, off), total) - off;
  return ok;
}

// Whether value (element `index` of `tensor`) lies in [0, limit]; a bad one is recorded with `limit` as its bound.
__device__ __forceinline__ bool index_within(const KernelParams& p, IndexTensor tensor, int index, int value,
                                             int limit) {
  if (value >= 0 && value <= limit) return true;
  report_index_error(p.errors, tensor, index, value, limit);
  return false;
}

// The cold path of seq_lens, for a sequence whose values failed its quick test: every value checked, reported and
// clamped. Not inlined: inlined, the checks made the 24-40-register producers spill in every instantiation (p is
// __grid_constant__, so the reference needs no copy).
template <bool kPaged>
__device__ __noinline__ SeqLens seq_lens_checked(const KernelParams& p, int batch) {
  SeqLens s{0, p.seqlen_q, 0, p.seqlen_k, batch};
  bool ok = true;
  if (p.cu_seqlens_q != nullptr) {
    ok = packed_rows(p, p.cu_seqlens_q, kIndexCuSeqlensQ, batch, p.total_q, s.q_off, s.q_len);
    // A used count replaces the length everywhere (tile rows, masks, the bottom-right diagonal), as in FA3.
    if (p.seqused_q != nullptr) {
      const int used = __ldg(p.seqused_q + batch);
      ok &= index_within(p, kIndexSequsedQ, batch, used, s.q_len);
      s.q_len = min(max(used, 0), s.q_len);
    }
  }
  if (p.cu_seqlens_k != nullptr) {
    ok &= packed_rows(p, p.cu_seqlens_k, kIndexCuSeqlensK, batch, p.total_k, s.k_off, s.k_len);
    s.kv_batch = 0;
  } else {
    s.k_len = p.kv_capacity;  // seqused_k (a cache's lengths) may use all of it
    if (p.kv_batch_idx != nullptr) {
      const int slot = __ldg(p.kv_batch_idx + batch);
      const bool in = static_cast<unsigned>(slot) < static_cast<unsigned>(p.kv_slots);
      if (!in) report_index_error(p.errors, kIndexCacheBatchIdx, batch, slot, p.kv_slots);
      s.kv_batch = in ? slot : 0;
      ok &= in;
    }
  }
  if (p.seqused_k != nullptr) {
    const int used = __ldg(p.seqused_k + batch);
    ok &= index_within(p, p.cu_seqlens_k != nullptr ? kIndexSequsedK : kIndexCacheSeqlens, batch, used, s.k_len);
    s.k_len = used;
  } else if (p.cu_seqlens_k == nullptr) {
    s.k_len = p.seqlen_k;
  }
  // A left-padded cache: rows [leftpad, seqused_k) hold the keys (FA3's). Paged, they stay at their positions (the
  // page walk keeps its page-aligned boxes) and the masks drop rows [0, leftpad) (kernel/mask.h key_floor).
  if (p.leftpad_k != nullptr) {
    const int pad = __ldg(p.leftpad_k + batch);
    ok &= index_within(p, kIndexCacheLeftpad, batch, pad, s.k_len);
    if (!kPaged) {
      s.k_off += pad;
      s.k_len -= pad;
    }
  }
  if (!ok) s.k_len = kBadSeq;
  return s;
}

// The sequence's rows: the values as read, one unsigned compare each (a negative value wraps past every bound); a
// value out of range takes seq_lens_checked. kPaged: the paged producer's (kernel/hopper_mainloop.h), which the
// kernel runs exactly when p.page_table is set.
template <bool kPaged>
__device__ __forceinline__ SeqLens seq_lens(const KernelParams& p, int batch) {
  SeqLens s{0, p.seqlen_q, 0, p.seqlen_k, batch};
  bool bad = false;
  if (p.cu_seqlens_q != nullptr) {
    const int prev = batch > 0 ? __ldg(p.cu_seqlens_q + batch - 1) : 0;
    s.q_off = __ldg(p.cu_seqlens_q + batch);
    const int end = __ldg(p.cu_seqlens_q + batch + 1);
    bad |= s.q_off < prev || end < s.q_off || end > p.total_q || prev < 0;
    s.q_len = end - s.q_off;
    if (p.seqused_q != nullptr) {
      const int used = __ldg(p.seqused_q + batch);
      bad |= static_cast<unsigned>(used) > static_cast<unsigned>(s.q_len);
      s.q_len = used;
    }
  }
  if (p.cu_seqlens_k != nullptr) {
    const int prev = batch > 0 ? __ldg(p.cu_seqlens_k + batch - 1) : 0;
    s.k_off = __ldg(p.cu_seqlens_k + batch);
    const int end = __ldg(p.cu_seqlens_k + batch + 1);
    bad |= s.k_off < prev || end < s.k_off || end > p.total_k || prev < 0;
    s.k_len = end - s.k_off;
    s.kv_batch = 0;
  } else {
    s.k_len = p.kv_capacity;
    if (p.kv_batch_idx != nullptr) {
      s.kv_batch = __ldg(p.kv_batch_idx + batch);
      bad |= static_cast<unsigned>(s.kv_batch) >= static_cast<unsigned>(p.kv_slots);
    }
  }
  if (p.seqused_k != nullptr) {
    const int used = __ldg(p.seqused_k + batch);
    bad |= static_cast<unsigned>(used) > static_cast<unsigned>(s.k_len);
    s.k_len = used;
  } else if (p.cu_seqlens_k == nullptr) {
    s.k_len = p.seqlen_k;
  }
  if (p.leftpad_k != nullptr) {  // as in seq_lens_checked: paged, the masks drop the pad
    const int pad = __ldg(p.leftpad_k + batch);
    bad |= static_cast<unsigned>(pad) > static_cast<unsigned>(s.k_len);
    if (!kPaged) {
      s.k_off += pad;
      s.k_len -= pad;
    }
  }
  if (bad) s = seq_lens_checked<kPaged>(p, batch);
  return s;
}

// The batch coordinate of q and o in their tensor maps (packed rows: one batch entry).
__device__ __forceinline__ int q_batch_coord(const KernelParams& p, int batch) {
  return p.cu_seqlens_q != nullptr ? 0 : batch;
}

}  // namespace flashcore
