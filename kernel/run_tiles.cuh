// The Hopper kernel's launch for one compiled point: the plan (tile list, GQA packing, split-KV count, persistent
// grid, tile-order sections, workspace), the tensor maps and the launch. Included by kernel/flashcore.cu (the
// default points) and by kernel/point.cu, which make compiles once per extra point of the points file, in
// parallel (kernel/kernel.mk).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "combine.cuh"
#include "flashcore.h"
#include "fp8_vt.cuh"
#include "heuristics.h"
#include "hopper_config.h"
#include "kernel_wgmma.cuh"
#include "launch.h"
#include "paged_gather.cuh"
#include "params.h"
#include "stream_tail.h"
#include "tensor_maps.h"
#include "tile_choice.h"
#include "tile_scheduler.h"

namespace flashcore {

// The default points of a head dim: kernel/tile_choice.h's short and long key tiles (equal for some), and the
// one-warpgroup decode point (hopper_config.h HeadDimTraits::decode_point; kShort where the head dim has none). The
// short one is also the only point compiled with soft-capping (kernel_wgmma.cuh kSoftcap).
template <int kHeadDim>
struct DefaultPoints {
  static constexpr int kShort = HeadDimTraits<kHeadDim>::point(BlockNChoice<kHeadDim>::kShort);
  static constexpr int kLong = HeadDimTraits<kHeadDim>::point(BlockNChoice<kHeadDim>::kLong);
  static constexpr bool kHasDecode = HeadDimTraits<kHeadDim>::kOneWgDecode;
  static constexpr int kDecode = kHasDecode ? HeadDimTraits<kHeadDim>::decode_point() : kShort;
  static constexpr int kBlockM = 64 * HeadDimTraits<kHeadDim>::kConsumerWGs;  // the short and long points'
};

// What one call launches: tile list, GQA packing, split-KV count, persistent grid and workspace (fc_plan_info).
struct LaunchPlan {
  bool pack_gqa;
  int m_tiles;     // query tiles per (head, batch); 1 when packed
  int grid_heads;  // heads_q, or heads_kv when packed
  int num_splits;
  int64_t tiles;   // m_tiles * num_splits * grid_heads * batch
  int64_t ctas;    // persistent CTAs: min(tiles, SMs - sm_margin)
  Sections sections;
  bool dynamic;    // tile order from an atomic counter (causal: uneven tiles)
  int64_t zero_offset;     // the words the launch zeroes, side by side (kernel/zero_words.cuh): the tile counter
  int64_t zero_bytes;      // (dynamic order: the first 16 bytes), then the V^T copy's claim counter and flags
  bool order;              // ragged decode's longest-first sequence order (heuristics.h orders_batches) ...
  int64_t order_offset;    // ... at these bytes into the workspace, one int per sequence
  int64_t vt_offset;       // FP8: bytes into the workspace of V's transposed copy (kernel/fp8_vt_fused.cuh)
  int64_t vt_keys;         // FP8: its row length (seqlen_k rounded up to kVtKeys); 0 otherwise
  int64_t vt_ready_offset; // FP8 V^T written by the kernel: bytes into the workspace of its claim counter and flags
  int vt_blocks;           // ... its K/V blocks per (batch, K/V head), and all of them; 0 otherwise
  int vt_items;
  TailPlan tail;              // the stream-K tail (kernel/stream_tail.h); tail.tiles 0: none
  int64_t tail_o_offset;      // bytes into the workspace of its partials
  int64_t workspace_bytes;
};

// Bytes of L2 the K/V of the (batch, head) pairs in flight may take: `pct` percent of it, 0 = a third (measured,
// S = 1K causal 0.970 / 1.023 / 1.020x FA3 at a half / third / quarter), so Q, O and the
// other traffic keep their share.
inline int64_t l2_budget_bytes(int device, int pct) {
  int l2 = 0;
  if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess || l2 <= 0) l2 = 50 << 20;
  return pct > 0 ? int64_t{l2} * pct / 100 : l2 / 3;
}

// Words of the FP8 V^T copy's ready area (kernel/fp8_vt_fused.cuh): the claim counter, a flag per block, then a
// count of stored blocks per (batch, K/V head). The plan bounds it and sizes the workspace with it; the launch
// zeroes it (kernel/zero_words.cuh).
inline int64_t vt_ready_words(int64_t items, int64_t pairs) { return 1 + items + pairs; }

// The tile shape a plan needs (not HopperTileConfig: the plan is the same for 16-bit and FP8 inputs at one point).
template <int kPoint>
struct PlanShape {
  static constexpr int kConsumerWGs = TilePoint<kPoint>::kConsumerWGs;
  static constexpr int kBlockM = 64 * kConsumerWGs;
  static constexpr int kBlockN = TilePoint<kPoint>::kBlockN;
};

template <int kHeadDim, int kPoint>
int make_plan(const fc_params* in, const KernelParams& p, LaunchPlan* plan) {
  using Cfg = PlanShape<kPoint>;
  if (p.page_table != nullptr && Cfg::kConsumerWGs > 2) {  // the kernel's paged producer (kernel_wgmma.cuh)
    return report_error(FC_ERR_INVALID_ARGUMENT, "point 0x%x has %d consumer warpgroups: a paged cache runs on points "
                        "with 1 or 2 (leave point 0)", static_cast<unsigned>(kPoint), Cfg::kConsumerWGs);
  }
  plan->pack_gqa = packs_gqa(p.seqlen_q, p.group, Cfg::kBlockM);  // the rule the point choice uses (tile_choice.h)
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
  // Keys per sequence differ (per-sequence cache lengths, packed keys; a paged cache always has seqused_k).
  const bool ragged_keys = p.seqused_k != nullptr || p.cu_seqlens_k != nullptr;
  // Packed queries split too: the partials are [split][sequence][head][row < seqlen_q] (seqlen_q the longest), and
  // the combine writes each row back to its packed position (combine.cuh).
  int splits = 1;
  if (in->num_splits > 0) {
    splits = in->num_splits < n_blocks ? in->num_splits : n_blocks;
    if (splits > kMaxSplits) splits = kMaxSplits;
  } else if (plan->m_tiles == 1 && ragged_keys) {
    splits = choose_ragged_splits(tiles, n_blocks, in->deterministic ? kNominalSms : usable_sms);
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
  // K/V bytes one (batch, head) pair of the tile list reads: K and V (FP8: K and V^T) at the inputs' element size;
  // query heads of one GQA group share theirs. Counting FP8 at 2 bytes halved its sections (S4K causal: 8 pairs,
  // 256 tiles for 132 CTAs) and its causal calls ended unevenly.
  const int64_t elem_bytes = in->dtype == FC_E4M3 ? 1 : 2;
  const int64_t kv_bytes = 2 * elem_bytes * kHeadDim * p.seqlen_k / (plan->pack_gqa ? 1 : p.group);
  const int64_t bh = static_cast<int64_t>(plan->grid_heads) * p.batch;
  // Uneven tiles: causal, windowed or chunked rows see different key counts; per-sequence lengths differ per sequence.
  const bool ragged = p.window_left >= 0 || p.attention_chunk > 0 || p.cu_seqlens_q != nullptr || ragged_keys;
  const bool uneven =
      in->schedule == FC_SCHEDULE_DEFAULT ? (p.causal != 0 || ragged) : in->schedule == FC_SCHEDULE_DYNAMIC;
  plan->dynamic = uneven && plan->tiles > plan->ctas;
  const int l2_pct = in->l2_section_pct > 0 ? in->l2_section_pct
                     : in->dtype == FC_E4M3  ? fp8_l2_section_pct(kHeadDim)
                                             : 0;
  plan->sections = plan_sections(bh, kv_bytes, l2_budget_bytes(device, l2_pct), plan->dynamic);
  const int64_t partial_bytes = splits > 1 ? int64_t{splits} * p.accum_rows * (kHeadDim + 1) * 4 : 0;
  // Layout: the split-KV partials, the zeroed words (tile counter, V^T claim counter and flags), V^T's copy, the
  // stream-K tail's partials.
  plan->zero_offset = (partial_bytes + 15) / 16 * 16;
  plan->vt_ready_offset = plan->zero_offset + (plan->dynamic ? 16 : 0);
  int64_t vt_ready_bytes = 0;
  const bool vt_pass = in->dtype == FC_E4M3 && !TilePoint<kPoint>::kVtSmem;  // V^T copy (kernel/fp8_vt_fused.cuh)
  // The kernel writes the copy itself (kernel/fp8_vt_fused.cuh): a claim counter, a flag per block after it, then a
  // count of stored blocks per (batch, K/V head).
  plan->vt_blocks = vt_pass ? n_blocks : 0;
  plan->vt_items = 0;
  if (plan->vt_blocks > 0) {
    const int64_t pairs = int64_t{p.batch} * p.heads_kv;
    const int64_t items = int64_t{plan->vt_blocks} * pairs;
    if (vt_ready_words(items, pairs) > INT32_MAX) {  // the kernel indexes the words with 32-bit ints
      return report_error(FC_ERR_INVALID_ARGUMENT, "%lld FP8 V blocks (batch x heads_kv x key blocks): at most %lld "
                          "per call at batch x heads_kv = %lld", static_cast<long long>(items),
                          static_cast<long long>(INT32_MAX - vt_ready_words(0, pairs)), static_cast<long long>(pairs));
    }
    plan->vt_items = static_cast<int>(items);
    vt_ready_bytes = 4 * vt_ready_words(items, pairs);
  }
  plan->zero_bytes = plan->vt_ready_offset - plan->zero_offset + vt_ready_bytes;
  plan->workspace_bytes = plan->zero_bytes > 0 ? plan->zero_offset + plan->zero_bytes : partial_bytes;
  // dynamic: zero_bytes > 0, so zero_words_kernel runs. FP8 kernels never read the order (tile_scheduler.h).
  plan->order = in->dtype != FC_E4M3 && orders_batches(plan->dynamic, ragged_keys, plan->m_tiles, p.batch);
  if (plan->order) {
    plan->order_offset = (plan->workspace_bytes + 15) / 16 * 16;
    plan->workspace_bytes = plan->order_offset + 4 * int64_t{p.batch};
  }
  plan->vt_offset = (plan->workspace_bytes + 127) / 128 * 128;  // TMA wants 16-byte aligned bases
  plan->vt_keys = vt_pass ? int64_t{ceil_div(p.seqlen_k, kVtKeys)} * kVtKeys : 0;
  if (plan->vt_keys > 0) plan->workspace_bytes = plan->vt_offset + plan->vt_keys * p.batch * p.heads_kv * kHeadDim;
  // The stream-K tail, for a static order of equal tiles: every tile sees every key (no causal mask or window,
  // dense lengths) and runs whole (no split-KV). Deterministic mode plans it for the nominal SM count, as splits.
  // FP8 with V transposed in shared memory (few query rows per K/V head) keeps whole tiles: the tail's decode made
  // its 24-register producer spill past the build gate's allowance; so do soft-capped calls (their kernel is an
  // instantiation of its own: no tail copy of it is compiled, kernel_wgmma.cuh).
  const bool equal = p.causal == 0 && !ragged;
  const bool whole = in->schedule == FC_SCHEDULE_WHOLE || (in->dtype == FC_E4M3 && TilePoint<kPoint>::kVtSmem) ||
                     p.softcap_prescale > 0.f;
  if (equal && !plan->dynamic && splits == 1 && !whole) {
    const int64_t sms_for_plan = in->deterministic ? kNominalSms : usable_sms;
    plan->tail = plan_tail(tiles, n_blocks, sms_for_plan);
  }
  plan->tail_o_offset = (plan->workspace_bytes + 15) / 16 * 16;
  if (plan->tail.tiles > 0) {
    plan->tiles = plan->tail.first + 2 * int64_t{plan->tail.stride};  // items: whole tiles, then the tail's
    plan->workspace_bytes = plan->tail_o_offset + tail_slots(plan->tail) * kTailSlotFloats<Cfg::kBlockM, kHeadDim> * 4;
  }
  return FC_OK;
}


// What lies `offset` bytes into the call's workspace (LaunchPlan's offsets): one cast for every region.
template <typename T>
inline T* workspace_at(void* workspace, int64_t offset) {
  return reinterpret_cast<T*>(static_cast<uint8_t*>(workspace) + offset);
}

template <int kHeadDim, int kPoint, typename Element>
cudaError_t launch_wgmma(const KernelParams& p, const LaunchPlan& plan, const TmaParams& tma, void* workspace,
                         cudaStream_t stream) {
  using Cfg = HopperTileConfig<kHeadDim, kPoint, Element::kBytes>;
  // The short default point compiles the left-bound (kLocal) and soft-capping variants; a soft-capped kernel takes
  // every left bound too (soft-capping x windows is Gemma 2's call; a fourth variant per split would add build time).
  const bool local = has_left_bound(p);
  const bool split = plan.num_splits > 1;
  auto kernel = split ? attention_forward_wgmma_kernel<kHeadDim, kPoint, Element, true, false>
                      : attention_forward_wgmma_kernel<kHeadDim, kPoint, Element, false, false>;
  if constexpr (Cfg::kFp8) {
    if (p.softcap_prescale > 0.f || local) return cudaErrorInvalidValue;  // validate_and_convert refuses both
  } else if constexpr (kPoint == DefaultPoints<kHeadDim>::kShort) {
    if (p.softcap_prescale > 0.f) {
      kernel = split ? attention_forward_wgmma_kernel<kHeadDim, kPoint, Element, true, true, false, true>
                     : attention_forward_wgmma_kernel<kHeadDim, kPoint, Element, false, true, false, true>;
    } else if (local) {
      kernel = split ? attention_forward_wgmma_kernel<kHeadDim, kPoint, Element, true, false, false, true>
                     : attention_forward_wgmma_kernel<kHeadDim, kPoint, Element, false, false, false, true>;
    }
  } else if (p.softcap_prescale > 0.f || local) {
    return cudaErrorInvalidValue;  // with_point (kernel/flashcore.cu) never picks another point for them
  }
  if constexpr (!Cfg::kVtSmem) {  // make_plan cuts no tail on FP8 with V transposed in shared memory, nor softcap
    if (plan.tail.tiles > 0) kernel = attention_forward_wgmma_kernel<kHeadDim, kPoint, Element, false, false, true>;
  }
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (err != cudaSuccess) return err;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(plan.ctas));
  config.blockDim = dim3(Cfg::kThreads);
  config.dynamicSmemBytes = Cfg::kSmemBytes;
  config.stream = stream;
  // The tile counter (dynamic order) and the V^T copy's claim counter and flags (kernel/fp8_vt_fused.cuh) start at 0:
  // zero_words_kernel clears them (and writes ragged decode's sequence order), and the attention kernel launches as
  // its blocks exit (kernel/zero_words.cuh).
  cudaLaunchAttribute follow = programmatic_dependency();
  if (plan.zero_bytes > 0) {
    const int words = static_cast<int>(plan.zero_bytes / 4);
    // The order the zero kernel writes is the one the attention kernel reads (run_tiles set p.batch_order).
    const BatchOrder order{const_cast<int*>(p.batch_order), p.seqused_k, p.cu_seqlens_k, p.batch};
    zero_words_kernel<<<zero_blocks(words, order.out != nullptr ? p.batch : 0), kZeroThreads, 0, stream>>>(
        workspace_at<int>(workspace, plan.zero_offset), words, order);
    if ((err = cudaGetLastError()) != cudaSuccess) return err;
    config.attrs = &follow;
    config.numAttrs = 1;
  }
  err = cudaLaunchKernelEx(&config, kernel, p, tma);
  // The stream-K tail's partials (kernel/stream_tail.h). Not with FP8's V^T in shared memory, whose plan cuts no tail
  // (as above): those points compile no tail combine of their own.
  if constexpr (!Cfg::kVtSmem) {
    if (err == cudaSuccess && plan.tail.tiles > 0) {
      const auto blocks = static_cast<unsigned>(int64_t{plan.tail.tiles} * Cfg::kBlockM / kCombineWarps);
      combine_tail_kernel<kHeadDim, Cfg::kBlockM, typename Element::Out><<<blocks, 32 * kCombineWarps, 0, stream>>>(p);
      err = cudaGetLastError();
    }
  }
  if (err != cudaSuccess || plan.num_splits == 1) return err;
  // A programmatic dependent launch: the combine's launch overlaps the attention grid's end (its blocks wait for the
  // grid's completion before reading the partials, kernel/grid_dependency.h); decode calls are ~0.3 ms, where a launch
  // gap of a few microseconds shows.
  cudaLaunchConfig_t combine{};
  combine.gridDim = dim3(static_cast<unsigned>((p.accum_rows + kCombineWarps - 1) / kCombineWarps));
  combine.blockDim = dim3(32 * kCombineWarps);
  combine.stream = stream;
  combine.attrs = &follow;
  combine.numAttrs = 1;
  return cudaLaunchKernelEx(&combine, combine_splits_kernel<kHeadDim, typename Element::Out>, p);
}

template <int kHeadDim, int kPoint, typename Element>
int run_tiles(const fc_params* in, const KernelParams& params, cudaStream_t stream) {
  using Cfg = HopperTileConfig<kHeadDim, kPoint, Element::kBytes>;
  KernelParams p = params;
  LaunchPlan plan{};
  int status = make_plan<kHeadDim, kPoint>(in, p, &plan);
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
  const int tiles_per_head = plan.m_tiles * plan.num_splits;
  p.div_section_big = make_fast_div((plan.sections.heads + 1) * tiles_per_head);
  p.div_section = make_fast_div(plan.sections.heads * tiles_per_head);
  p.div_heads_big = make_fast_div(plan.sections.heads + 1);
  p.div_heads = make_fast_div(plan.sections.heads);
  p.div_splits = make_fast_div(plan.num_splits);
  p.div_grid_heads = make_fast_div(plan.grid_heads);
  p.div_group = make_fast_div(p.group);
  // the tile counter is the first of the words launch_wgmma zeroes (zero_offset)
  p.tile_counter = plan.dynamic ? workspace_at<int>(in->workspace, plan.zero_offset) : nullptr;
  p.batch_order = plan.order ? workspace_at<const int>(in->workspace, plan.order_offset) : nullptr;
  p.vt = plan.vt_keys > 0 ? workspace_at<uint8_t>(in->workspace, plan.vt_offset) : nullptr;
  p.vt_keys = plan.vt_keys;
  p.vt_blocks = plan.vt_blocks;
  p.div_vt_blocks = make_fast_div(plan.vt_blocks);
  p.div_heads_kv = make_fast_div(p.heads_kv);
  p.vt_items = plan.vt_items;
  p.vt_ready = plan.vt_blocks > 0 ? workspace_at<int>(in->workspace, plan.vt_ready_offset) : nullptr;
  if (plan.tail.tiles > 0) {
    p.tail_first = static_cast<int>(plan.tail.first);
    p.tail_stride = plan.tail.stride;
    p.tail_tiles = plan.tail.tiles;
    p.tail_pieces = plan.tail.pieces;
    p.tail_blocks = plan.tail.blocks;
    p.div_tail_pieces = make_fast_div(plan.tail.pieces);
    p.div_tail_blocks = make_fast_div(plan.tail.blocks);
    p.tail_o = workspace_at<float>(in->workspace, plan.tail_o_offset);
  }
  // Packed rows (varlen) are one batch entry of total rows; a cache may hold more entries than the call's batch.
  const bool packed_q = in->cu_seqlens_q != nullptr, packed_k = in->cu_seqlens_k != nullptr;
  const int64_t q_rows = packed_q ? in->total_q : in->seqlen_q, q_batch = packed_q ? 1 : in->batch;
  const int64_t k_rows = packed_k ? in->total_k : in->seqlen_k;
  const int64_t k_batch = packed_k ? 1 : (in->kv_batch > 0 ? in->kv_batch : in->batch);
  // A paged cache is [pages, page_size, Hkv, D]: boxes of gcd(page_size, BLOCK_N) rows, which never cross a page
  // (pages of 16 keys: 16-row boxes; odd sizes: 1-row boxes; a multiple of BLOCK_N: one box per chunk as without
  // pages).
  const bool paged = in->page_table != nullptr;
  const int64_t k_map_rows = paged ? in->page_size : k_rows;
  p.page_box = paged ? std::gcd(static_cast<int>(in->page_size), Cfg::kBlockN) : 0;
  // Boxes of fewer than kGatherBelowRows rows: the rows are gathered with cp.async instead (paged_gather.cuh).
  p.page_gather = Cfg::kGatherCapable && paged && p.page_box < kGatherBelowRows ? 1 : 0;
  const int k_box = paged ? p.page_box : Cfg::kBlockN;
  // The maps have the tensors' own head dims (96, 192; v 128 with 192): TMA zero-fills the kernel's padding columns
  // on loads and clips them on stores.
  const int64_t hd = in->head_dim, hd_v = p.head_dim_v;
  TmaParams tma;
  constexpr int kBytes = Element::kBytes;
  // FP8 V^T: a map over the copy, {vt_keys, D, Hkv, B} innermost first, boxes of 128 keys x every d row.
  const int64_t vt_stride[3] = {p.vt_keys * kHeadDim * in->heads_kv, p.vt_keys, p.vt_keys * kHeadDim};
  if ((status = encode_tensor_map(&tma.q, "q", in->q, hd, q_rows, in->heads_q, q_batch, in->q_stride,
                                  p.pack_gqa ? p.seqlen_q : Cfg::kBlockM, p.pack_gqa ? p.group : 1, kBytes,
                                  Cfg::kSpan)) != FC_OK ||
      (status = encode_tensor_map(&tma.k, "k", in->k, hd, k_map_rows, in->heads_kv, k_batch, in->k_stride,
                                  k_box, 1, kBytes, Cfg::kSpan)) != FC_OK ||
      // V transposed in shared memory: V as it is, with K's boxes and swizzle (kernel/fp8_vt_smem.cuh).
      (status = Cfg::kFp8 && !Cfg::kVtSmem
                    ? encode_tensor_map(&tma.v, "v (transposed copy)", p.vt, p.vt_keys, kHeadDim, in->heads_kv, k_batch,
                                        vt_stride, kHeadDim, 1, 1)
                    : encode_tensor_map(&tma.v, "v", in->v, hd_v, k_map_rows, in->heads_kv, k_batch, in->v_stride,
                                        k_box, 1, kBytes, Cfg::kSpan)) != FC_OK ||
      // O leaves one consumer warpgroup (64 rows) per store.
      (status = encode_tensor_map(&tma.o, "o", in->o, hd_v, q_rows, in->heads_q, q_batch, in->o_stride,
                                  64)) != FC_OK) {
    return status;
  }
  if (Cfg::kVtFused && (status = encode_tensor_map(&tma.v_raw, "v", in->v, hd_v, k_map_rows, in->heads_kv, k_batch,
                                                   in->v_stride, k_box, 1, kBytes, Cfg::kSpan)) != FC_OK) {
    return status;
  }
  if (Cfg::kFp8 && !Cfg::kVtSmem && Cfg::kVtTail > 0 &&
      (status = encode_tensor_map(&tma.v_tail, "v (transposed copy)", p.vt, p.vt_keys, kHeadDim, in->heads_kv, k_batch,
                                  vt_stride, kHeadDim, 1, 1, 64)) != FC_OK) {
    return status;
  }
  return report_cuda(launch_wgmma<kHeadDim, kPoint, Element>(p, plan, tma, in->workspace, stream), "attention kernel");
}


// A point's plan and its launch for both 16-bit dtypes; `ext`: extern (declared here, compiled in another object)
// or empty (compiled here: kernel/point.cu, kernel/head_dims_apart.cu).
#define FC_POINT_INSTANCES(ext, hd, code)                                                                     \
  ext template int make_plan<hd, code>(const fc_params*, const KernelParams&, LaunchPlan*);                   \
  ext template int run_tiles<hd, code, Bf16>(const fc_params*, const KernelParams&, cudaStream_t);            \
  ext template int run_tiles<hd, code, Fp16>(const fc_params*, const KernelParams&, cudaStream_t);
// Instantiated for the points of the points file in kernel/point.cu (one object each), so flashcore.cu declares
// them extern (FC_POINT in kernel/flashcore.cu).
#define FC_EXTERN_POINT(hd, code) FC_POINT_INSTANCES(extern, hd, code)
// A head dim's default points, declared extern (FC_HEAD_DIMS_APART, kernel/head_dims.h): its short and long points,
// and the decode point, which is the short one where the head dim has none (the three may be one point: an extern
// declaration may repeat).
#define FC_EXTERN_DEFAULT_POINTS(hd)                \
  FC_EXTERN_POINT(hd, DefaultPoints<hd>::kShort)   \
  FC_EXTERN_POINT(hd, DefaultPoints<hd>::kLong)    \
  FC_EXTERN_POINT(hd, DefaultPoints<hd>::kDecode)

}  // namespace flashcore
