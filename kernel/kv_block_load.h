// A tile's K/V block loads for the TMA producer thread (hopper_mainloop.h tma_producer): TMA boxes of a dense or
// paged cache (the page walk with its ids read ahead), FP8 V^T's boxes, or a post to the gather warps for small pages.
#pragma once
#include "barriers.h"
#include "block.h"
#include "fp8_vt_fused.cuh"
#include "fp8_vt_smem.cuh"
#include "hopper_config.h"
#include "paged_gather.cuh"
#include "params.h"
#include "seqlens.h"
#include "tma.h"

namespace flashcore {

// Loads block n of the tile into ring slot block + n (K or V: slot_full, slot_empty, ring and map say which), once
// the slot is free: TMA boxes of the dense or paged cache, FP8 V^T's boxes, or (kGather, small pages) a post to the
// gather warps. vt_all: the tile's V^T copy is complete (Cfg::kVtHeadCount), found at its V(0).
// flags: V transposed in shared memory only, the word for the transposing warps (kVtStop's comment).
template <int kHeadDim, int kPoint, int kElemBytes, bool kPaged, bool kGather>
__device__ __forceinline__ void load_kv_block(const KernelParams& p, const TmaParams& tma, uint64_t* bars, int block,
                                              SeqLens& seq, const KvRange& kv, int head_kv, bool& vt_all,
                                              int slot_full, int slot_empty, uint8_t* ring, const CUtensorMap* map,
                                              void* tile_slots, int k, int n, int flags = 0) {
  using Cfg = HopperTileConfig<kHeadDim, kPoint, kElemBytes>;
  using Slots = typename Cfg::Slots;
  constexpr int kVFull = Cfg::kVtSmem ? Slots::kVRawFull : Slots::kVFull;
  const int stage = (block + n) % Cfg::kStages;
  const uint32_t empty_parity = (((block + n) / Cfg::kStages) & 1) ^ 1;  // the first pass finds every slot free
  uint64_t* full = &bars[slot_full + stage];
  if (p.fault == kFaultSlow && slot_full == Slots::kKFull) __nanosleep(20000);  // test-only: 20 us per block
  if (Cfg::kVtFused && slot_full == kVFull) {
    if (Cfg::kVtHeadCount && n == 0) vt_all = vt_head_ready(p, seq.kv_batch, head_kv);
    if (!vt_all) vt_block_wait(p, seq.kv_batch, head_kv, kv.n_begin + n);
  }
  mbarrier_wait_sleep(&bars[slot_empty + stage], empty_parity);
  // The word for the transposing warps beside a raw V stage: the arrive below publishes it.
  if (Cfg::kVtSmem && slot_full == kVFull) vt_flags_store(bars, Slots::kVtFlags + stage, flags);
  const int key0 = (kPaged ? 0 : seq.k_off) + (kv.n_begin + n) * Cfg::kBlockN;  // paged: no packed keys
  if constexpr (kGather) {  // small pages: the gather warps copy the rows (kernel/paged_gather.cuh)
    gather_post<Cfg>(bars, slot_full == Slots::kKFull ? 0 : 1, block + n,
                     GatherRequest{key0, seq.kv_batch, head_kv, seq.k_len - key0});
    return;
  }
  mbarrier_arrive_expect_tx(full, Cfg::kKVBytes);
  uint8_t* dst = ring + stage * Cfg::kKVBytes;
  if (Cfg::kFp8 && !Cfg::kVtSmem && slot_full == Slots::kVFull) {
    // FP8 V^T [batch][head][d][keys] (dense batches only): boxes of 128 keys x every d row.
#pragma unroll
    for (int ch = 0; ch < Cfg::kVtFull; ++ch) {
      tma_load_4d<kKvHint>(dst + ch * kHeadDim * 128, map, full, key0 + 128 * ch, 0, head_kv, seq.kv_batch);
    }
    if constexpr (Cfg::kVtTail > 0) {
      tma_load_4d<kKvHint>(dst + Cfg::kVtFull * kHeadDim * 128, &tma.v_tail, full, key0 + 128 * Cfg::kVtFull, 0,
                           head_kv, seq.kv_batch);
    }
  } else if constexpr (!kPaged) {
#pragma unroll
    for (int ch = 0; ch < Cfg::kChunks; ++ch) {
      tma_load_4d<kKvHint>(dst + ch * Cfg::kBlockN * Cfg::kSpan, map, full, Cfg::kChunkCols * ch, key0, head_kv,
                           seq.kv_batch);
    }
  } else {
    // Boxes of page_box rows (gcd(page_size, BLOCK_N): a box never crosses a page; one box per chunk when the
    // pages are a multiple of the tile), one at a time (unrolled, the table reads are hoisted and spill). A box
    // of fewer than 8 rows (pages of 1-8 keys, odd sizes) fills the rows a full box would: TMA's 128-byte swizzle
    // follows the shared-memory address, not the row within the box. Such pages are slow (one TMA per row and
    // chunk, from this one thread: docs/perf-notes.md, small pages); spreading the boxes over the warp's lanes
    // took pages of 128 keys from 81 % to 71.5 % of peak DRAM on the H200, so it is not done. Boxes
    // past the sequence's keys never read the table (its row may be shorter): page -1 is outside the map,
    // which TMA fills with zeros (the bytes still count). The table index is 32-bit: the host keeps the table
    // below 2^31 entries.
    int entry = seq.kv_batch * static_cast<int>(p.page_table_stride) + key0 / p.page_size;
    int row = key0 % p.page_size;
    int keys = seq.k_len - key0;  // rows of this block that hold keys
    const uint32_t dst_addr = smem_addr(dst), full_addr = smem_addr(full);
    // kIdAhead: each box's id is read one box ahead, before the box before it is issued, so an L1 hit's latency
    // runs under that box's TMAs instead of before its own (pages of 16 keys: 8 reads per K or V block). Only with
    // more than 40 registers (the one-consumer decode points' 56): beside 2 consumers it spilled 8-12 B.
    constexpr bool kIdAhead = Cfg::Registers::kPagedProducer > 40;
    int next = kIdAhead && keys > 0 ? __ldg(p.page_table + entry) : -1;
#pragma unroll 1
    for (int r = 0; r < Cfg::kBlockN; r += p.page_box) {
      int page = -1;
      if constexpr (kIdAhead) {
        page = r < keys ? next : -1;  // keys may have dropped to 0 at a bad id since `next` was read
        if (r + p.page_box < Cfg::kBlockN && r + p.page_box < keys) {
          next = __ldg(p.page_table + entry + (row + p.page_box == p.page_size ? 1 : 0));
        }
      } else {
        page = r < keys ? __ldg(p.page_table + entry) : -1;
      }
      // A page id outside the cache (kernel/seqlens.h): zeros instead (page -1), no further page of the tile,
      // and the tile's k_len kBadPage - entry in its slot, so the epilogue writes NaN and records the entry.
      // K(0) loads before the slot is written (from seq), while the slot may still hold tile k - 2's info for
      // its epilogue: not marked then.
      if (r < keys && static_cast<unsigned>(page) >= static_cast<unsigned>(p.kv_pages)) {
        page = -1;
        keys = 0;
        seq.k_len = kBadPage - entry;
        if (n > 0 || slot_full != Slots::kKFull) mark_tile_bad(tile_slots, k, seq.k_len);
      }
#pragma unroll
      for (int ch = 0; ch < Cfg::kChunks; ++ch) {
        tma_load_4d<kKvHint>(dst_addr + (ch * Cfg::kBlockN + r) * Cfg::kSpan, map, full_addr, Cfg::kChunkCols * ch,
                             row, head_kv, page);
      }
      row += p.page_box;
      if (row == p.page_size) {
        row = 0;
        ++entry;
      }
    }
    // The ids of the block kTableLeadBlocks ahead into L1, so that block's walk finds them there
    // (kernel/paged_gather.cuh kTableLeadBlocks); the gather warps prefetch their own. One line: with pages of 16 keys
    // or more (all that the 16-bit points up to hdim 128 walk) a block's ids (at most 8 at 128 keys) end in the line
    // that starts the next block's, which the next K block prefetches; smaller pages on the walk (head dims above 128)
    // get the block's first line only. entry is now the id of key key0 + kBlockN: adding the floor of the remaining
    // keys' pages lands on the block's first id or the one before (floors add up to at most the floor of the sum), an
    // id of a key below the sequence's length either way. Issued here, not before the empty wait, because there its
    // operands made the tail kernel's 40-register producer spill 4 B (hdim 128, 176 keys).
    if (slot_full == Slots::kKFull && keys > kTableLeadBlocks * Cfg::kBlockN) {
      prefetch_l1(p.page_table + entry + p.div_page((kTableLeadBlocks - 1) * Cfg::kBlockN));
    }
  }
}

}  // namespace flashcore
