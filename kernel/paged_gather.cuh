// Small pages of a paged KV cache: rows gathered with cp.async by the producer warpgroup's warps 1..3.
// A TMA box never crosses a page, so pages of few keys took one box per key and chunk, all issued by the producer
// thread through the SM's one TMA unit: pages of 1 key read 229 GB/s on an H200 (0.056x FA3 on the contiguous
// cache). Here the producer thread posts each K or V block as a request (its first key, page-table row, K/V head and
// the rows that hold keys) and the 96 gather threads copy the rows, 16 bytes per cp.async, straight into the
// stage's 128-byte-swizzled layout (what TMA would have written), as FA3's non-TMA paged path does.
// Protocol: requests alternate K, V, K, V... in the producer's load order (every tile loads K(0), V(0), K(1),
// V(1), ...), so request g is block g / 2's K (g even) or V, in ring stage (g / 2) % kStages. Each (kind, stage) slot
// has two 8-byte words in the barrier area, a request barrier (the producer's arrival, after its empty wait for the
// stage) and a read barrier (one arrival per gather warp once it read the words; the producer waits for it before
// it writes the slot again). The stage's full barrier takes one arrival per gather warp (count kGatherWarps, no
// transaction bytes), after its copies landed and a proxy fence (wgmma reads through the async proxy). Up to
// kGatherHeld + 1 requests are in flight when the producer is ahead: request g's copies are issued before the
// arrivals of requests g - kGatherHeld .. g - 1, and only g - kGatherHeld's is then waited for. A gather warp never
// waits for a request while it holds an arrival back: the producer may be waiting for the consumers, and
// they for that arrival (the next tile's V(0) waits for kOEmpty, which a warpgroup arrives on at its next tile's
// first S GEMM, after K(0)'s arrival: held back until V(0)'s request, that hung). A request whose first key is
// negative stops the gather warps (after the producer's last tile).
// Measured on an H200 (bench/paged_pages.py, B64 H32/8 D128 decode, caches 1K-8K; TMA boxes before): pages of 1 key
// 229 -> 754 GB/s, 16 keys 2294 -> 1604 GB/s with each row's table read just before its copies (so pages of 16 keys
// and more keep TMA boxes: kGatherBelowRows).
#pragma once
#include <cstdint>

#include "barriers.h"
#include "params.h"
#include "seqlens.h"
#include "tma.h"

namespace flashcore {

constexpr int kGatherWarps = 3;  // warps 1..3 of the producer warpgroup
// Requests whose arrivals a gather warp holds back while it issues the next one's copies. With one (two requests in
// flight, half a K/V block to a block: 32-64 KB per SM at hdim 128) an SM kept less in flight than HBM3e needs over its
// latency under load (about 30 KB per SM at 4.8 TB/s and 1 us, more as the latency grows with the load), and a
// request's copies waited for the one before to land; with two, 2-3 requests (up to 96 KB) are in flight, within the
// 3 stages of K and V the decode point has.
constexpr int kGatherHeld = 2;
// Pages whose TMA boxes (gcd(page_size, BLOCK_N) rows) are smaller than this are gathered: on the H200 the gather
// read 721 GB/s at 1 key and ~1460-1500 GB/s from 2 to 16 keys (bench/paged_pages.py), TMA boxes 229 GB/s at 1 key
// but 2294 GB/s at 16.
constexpr int kGatherBelowRows = 16;

// What a row of a bad page id is copied from, for every 16-byte piece: 16-bit NaNs (0x7fff in fp16 and bf16), so the
// rows of the tile that use the key come out NaN (kernel/seqlens.h), as the TMA path's marked tile does.
static __device__ uint4 g_nan_piece = {0x7fff7fffu, 0x7fff7fffu, 0x7fff7fffu, 0x7fff7fffu};

struct GatherRequest {
  int key0;   // the block's first key in the sequence (< 0: stop)
  int row;    // the sequence's page-table row
  int head;   // K/V head
  int keys;   // rows of the block that hold keys (the rest are zero-filled)
};

// Page ids are read on the load path: the TMA walk reads each box's id just before issuing it, and a gather warp reads
// its rows' ids before its copies. A table line not in L1 then costs that thread a read through a loaded memory
// system (between a call's reads of a line, the K/V it indexes streams through L2, so it may come from DRAM) while
// it issues no load, and a line of 32 ids covers few blocks when pages are small (pages of 16 keys at 128 keys a tile:
// 4 blocks; pages of 1 key: a quarter of a block). So the ids of the block kTableLeadBlocks ahead are pulled into L1
// at each K block: by the walk's thread (the block's first line, hopper_mainloop.h load_kv_block) and by each gather
// warp (its own rows' ids, gather_kv), so that by the time they are read they hit L1; a tile's first blocks still
// miss. FA3 reads the next block's ids into registers one step ahead (hopper/paged_kv.h load_page_table); a prefetch
// keeps the producer's registers free (40 beside 2 consumers).
constexpr int kTableLeadBlocks = 3;

__device__ __forceinline__ void prefetch_l1(const void* a) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(reinterpret_cast<uint64_t>(a)));
}

__device__ __forceinline__ void cp_async_16_zfill(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}

// The producer thread's side: posts request `kind` (0 K, 1 V) of block `block` (the CTA's count, which gives the
// ring stage and the slot's use), once the gather warps have read the slot's previous request.
template <typename Cfg>
__device__ __forceinline__ void gather_post(uint64_t* bars, int kind, int block, const GatherRequest& r) {
  using Slots = typename Cfg::Slots;
  const int req = kind * Cfg::kStages + block % Cfg::kStages;
  mbarrier_wait(&bars[Slots::kGatherFree + req], ((block / Cfg::kStages) & 1) ^ 1);  // the first use finds it free
  *reinterpret_cast<int4*>(&bars[Slots::kGatherData + 2 * req]) = make_int4(r.key0, r.row, r.head, r.keys);
  mbarrier_arrive(&bars[Slots::kGatherReq + req]);  // release: the words above first
}

// One gather thread (warp 1..3 of the producer warpgroup, `t` in 0..95) until the stop request.
template <typename Cfg>
__device__ void gather_kv(const KernelParams& p, uint8_t* k_smem, uint8_t* v_smem, uint64_t* bars, int t) {
  using Slots = typename Cfg::Slots;
  static_assert(Cfg::kSpan == 128 && !Cfg::kFp8, "16-bit rows of 128-byte swizzle spans");
  constexpr int kPieces = Cfg::kSpan / 16;  // 16-byte pieces per row and chunk
  constexpr int kCols = Cfg::kSpan / 2;     // 16-bit columns per chunk
  constexpr int kLanesPerRow = Cfg::kChunks * kPieces;  // one 16-byte piece per lane (hdim 128: 16 lanes a row)
  static_assert(kLanesPerRow <= 32 && 32 % kLanesPerRow == 0, "a warp holds whole rows");
  constexpr int kRowsPerStep = 32 / kLanesPerRow;  // rows a warp copies with one cp.async
  // Each warp's run of rows, a whole number of steps; at most 64 so that two page ids per lane hold them all.
  constexpr int kRowsPerWarp = (Cfg::kBlockN + kGatherWarps * kRowsPerStep - 1) / (kGatherWarps * kRowsPerStep) *
                               kRowsPerStep;
  static_assert(kRowsPerWarp <= 64, "two page ids per lane");
  // A held arrival waits only for its own request's copies (cp.async groups complete in order), and needs nothing of
  // the later requests': the producer posts each before it waits for anything an earlier one completes.
  // Request r's full barrier: its kind and stage follow from r (nothing kept across the loop). The caller fenced
  // (the copies are generic-proxy writes; the consumers' wgmma reads are async-proxy) and synced the warp.
  auto arrive_full = [&](int r) {
    if (t % 32 == 0) mbarrier_arrive(&bars[((r & 1) ? Slots::kVFull : Slots::kKFull) + (r >> 1) % Cfg::kStages]);
  };
  // The held arrivals (requests g - count .. g - 1) made now, once every copy this thread issued has landed (request
  // g's are none yet).
  auto release_held = [&](int g, int count) {
    asm volatile("cp.async.wait_all;" ::: "memory");
    fence_proxy_async_shared();
    __syncwarp();
#pragma unroll 1
    for (int r = g - count; r < g; ++r) arrive_full(r);
  };
  int held = 0;  // requests g - held .. g - 1 have copies issued and their arrivals still to be made
  for (int g = 0;; ++g) {
    const int kind = g & 1, b = g >> 1, stage = b % Cfg::kStages;
    const int req = kind * Cfg::kStages + stage;
    const uint32_t parity = (b / Cfg::kStages) & 1;
    // Warp-uniform: lanes that tested a moment apart may disagree, and release_held syncs the warp.
    if (held > 0 && !__all_sync(0xffffffffu, mbarrier_test(&bars[Slots::kGatherReq + req], parity))) {
      release_held(g, held);
      held = 0;
    }
    mbarrier_wait(&bars[Slots::kGatherReq + req], parity);
    // Lane 0 reads the slot's words (after the acquire) and hands them to its lanes, so the thread that arrives on
    // kGatherFree is the one that read: the producer's next write of the slot is ordered after every read of it by
    // that barrier alone (compute-sanitizer racecheck reported every lane's read racing with it otherwise, as it
    // does not carry the order through __syncwarp).
    int4 r = make_int4(0, 0, 0, 0);
    if (t % 32 == 0) {
      r = *reinterpret_cast<const int4*>(&bars[Slots::kGatherData + 2 * req]);
      mbarrier_arrive(&bars[Slots::kGatherFree + req]);  // the slot's words are read
    }
    r.x = __shfl_sync(0xffffffffu, r.x, 0);
    r.y = __shfl_sync(0xffffffffu, r.y, 0);
    r.z = __shfl_sync(0xffffffffu, r.z, 0);
    r.w = __shfl_sync(0xffffffffu, r.w, 0);
    if (r.x < 0) {
      if (held > 0) release_held(g, held);
      return;
    }
    const auto* base = static_cast<const uint16_t*>(kind ? p.v : p.k);
    const int64_t* stride = kind ? p.v_stride : p.k_stride;
    const int64_t page_stride = stride[0];
    const int row_stride = static_cast<int>(stride[1]), head_off = r.z * static_cast<int>(stride[2]);
    const int dim = kind ? p.head_dim_v : p.head_dim_k;  // the tensor's columns: the kernel's past them are zeros
    const uint32_t dst = smem_addr((kind ? v_smem : k_smem) + stage * Cfg::kKVBytes);
    const int* table = p.page_table + r.y * p.page_table_stride;
    // Lanes split a row: kLanesPerRow lanes copy one row's 16-byte pieces side by side, so a warp's cp.async reads
    // whole rows (one lane per row, 16 bytes each, touched every 32-byte sector half at a time and made one L2
    // request per lane: pages of 1 key 721 GB/s on the H200, 975 split). Each warp copies its own run of rows,
    // whose page ids its lanes read first, all in one round (lane l: rows l and 32 + l of the run), and hand over
    // with a shuffle: reading them a few rows at a time put one table latency per few rows in line (pages of 2-8 keys
    // fell from ~1460 to ~1050 GB/s).
    const int warp = t / 32, lane = t % 32, piece = lane % kLanesPerRow;
    const int col = (piece / kPieces) * kCols + (piece % kPieces) * 8;
    const bool col_live = col < dim;
    const uint32_t lane_dst = dst + (piece / kPieces) * Cfg::kBlockN * Cfg::kSpan;
    const int first = warp * kRowsPerWarp;
    int ids[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = first + h * 32 + lane;
      ids[h] = row < first + kRowsPerWarp && row < Cfg::kBlockN && row < r.w ? __ldg(table + p.div_page(r.x + row))
                                                                              : -1;
    }
    if (kind == 0) {  // K: this warp's ids of the next kTableLeadBlocks blocks into L1 (V reads K's ids again)
      // Every block up to the lead one, not the lead one alone: a tile's first K request finds its next blocks'
      // lines prefetched too (they would each miss otherwise); the others' are L1 hits that move no data. Telling
      // a tile's first request apart (its key against the last K request's) made the 176-key kernel spill 4 B.
#pragma unroll 1
      for (int lead = 1; lead <= kTableLeadBlocks; ++lead) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = first + h * 32 + lane, ahead = lead * Cfg::kBlockN + row;
          if (row < first + kRowsPerWarp && row < Cfg::kBlockN && ahead < r.w) {
            prefetch_l1(table + p.div_page(r.x + ahead));  // within the sequence's keys: an id the gather reads anyway
          }
        }
      }
    }
#pragma unroll 2
    for (int step = 0; step < kRowsPerWarp; step += kRowsPerStep) {  // warp-uniform: the shuffle needs every lane
      if (first + step >= Cfg::kBlockN) break;
      const int at = step + lane / kLanesPerRow, row = first + at;
      const int page = __shfl_sync(0xffffffffu, step < 32 ? ids[0] : ids[1], at % 32);  // kRowsPerStep divides 32
      const int key = r.x + row;
      // Rows past the keys read no table entry (page -1) and are zeros; an id outside the cache reads no page: its
      // row is copied from g_nan_piece (the consumers' epilogue records it: kernel/seqlens.h).
      const bool ok = static_cast<unsigned>(page) < static_cast<unsigned>(p.kv_pages), bad = !ok && row < r.w;
      const bool live = ok ? col_live : bad;
      const uint16_t* src =
          ok && col_live
              ? base + page * page_stride + ((key - p.div_page(key) * p.page_size) * row_stride + head_off + col)
              : (bad ? reinterpret_cast<const uint16_t*>(&g_nan_piece) : base);
      cp_async_16_zfill(lane_dst + row * Cfg::kSpan + (((piece % kPieces) ^ (row & 7)) << 4), src, live);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    if (held == kGatherHeld) {
      // Request g - kGatherHeld's copies have landed (the kGatherHeld groups after it may still be pending).
      asm volatile("cp.async.wait_group %0;" ::"n"(kGatherHeld) : "memory");
      fence_proxy_async_shared();
      __syncwarp();
      arrive_full(g - kGatherHeld);
      --held;
    }
    ++held;
  }
}

}  // namespace flashcore
