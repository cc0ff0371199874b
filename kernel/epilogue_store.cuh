// A consumer warpgroup's epilogue of one tile in the Hopper kernel: the softmax's row sums (with FP8's descales and
// the attention sinks) normalize O, which goes out as split or stream-K partials, per row from registers, or staged in
// shared memory for a TMA store; then the LSE rows (kernel/epilogue.h holds the stores themselves). The warpgroup's
// wait, o_arrive and stamp steps come from the kernel's consumer code as callables.
#pragma once
#include "barriers.h"
#include "epilogue.h"
#include "fp8_descales.h"
#include "fp8_vt_smem.cuh"
#include "hopper_config.h"
#include "params.h"
#include "softmax.h"
#include "stream_tail.h"
#include "thread_rows.h"
#include "tile_scheduler.h"
#include "timeline.h"
#include "tma.h"

namespace flashcore {

// The tile's coordinates are read again from its slot rather than kept live across the mainloop (registers are what
// the hdim-256 and split instantiations run short of). block: the K/V blocks this warpgroup has consumed, the tile's
// included; qk_d, v_d: the FP8 descales the tile started with (1 for 16-bit inputs).
template <int kHeadDim, int kPoint, typename Element, bool kSplit, bool kTail, typename Consumer, typename Wait,
          typename OArrive, typename EpiStamp>
__device__ __forceinline__ void consumer_epilogue(const KernelParams& p, const TmaParams& tma, Consumer& consumer,
                                                  Wait& wait, OArrive& o_arrive, EpiStamp& epi_stamp,
                                                  bool& o_arrive_pending, void* tile_slots, uint8_t* v_smem,
                                                  uint8_t* o_own, const KvRange& kv, int k, int block, int n_blocks,
                                                  float qk_d, float v_d, int tile_row0, int lane, int warp_in_wg,
                                                  int consumer_wg, int thread) {
  using Cfg = HopperTileConfig<kHeadDim, kPoint, Element::kBytes>;
  using Out = typename Element::Out;
  using Slots = typename Cfg::Slots;
  constexpr int kPOffset = Cfg::kFp8 ? 8 : 0;
  const TileInfo again = load_tile_info(tile_slots, k, Cfg::kBlockM);
  const TileCoord c = again.coord;
  const ThreadRows rows = thread_rows(p, c, kv, again.q_len, tile_row0, lane);
  const int wg_row0 = c.m_block * Cfg::kBlockM + consumer_wg * 64;
  float inv_l[2], lse[2];
  if constexpr (Cfg::kFp8) {
    const float d = Cfg::kDescales == kDescalesEpilogue ? qk_descale(p, c) : qk_d;
    consumer.softmax.template finalize<kPOffset, Cfg::kFastFinalize>(p.softmax_scale * d, inv_l, lse);
    const float v_scale = Cfg::kDescales == kDescalesEpilogue ? descale(p.v_descale, p.v_descale_stride, p, c) : v_d;
    inv_l[0] *= v_scale;
    inv_l[1] *= v_scale;
  } else {
    consumer.softmax.finalize(p.softmax_scale, inv_l, lse);
    // Sinks join once per finished row; split and stream-K tail partials stay sink-free (the combine adds them).
    // The read is not row_sink's: its second null test, inside this one, changed the hdim-64 kernels' SASS.
    if (p.sinks != nullptr && !kSplit && !(kTail && again.tile >= p.tail_first)) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (rows.valid[r]) join_sink(__ldg(p.sinks + rows.head[r]), inv_l[r], lse[r]);
      }
    }
  }
  // Bad index data (kernel/seqlens.h; FP8 reads it unchecked but on paged caches): the rows and LSE are NaN.
  if ((!Cfg::kFp8 || kRunsPages<Cfg>) && again.k_len < 0) {
    inv_l[0] = inv_l[1] = lse[0] = lse[1] = __int_as_float(0x7fc00000);
    if (thread == 0 && consumer_wg == 0) report_tile_page(p, again.k_len);
  }
  if (Cfg::kGatherCapable && p.page_gather && thread == 0 && consumer_wg == 0 &&
      consumer.o_reg[0][0] != consumer.o_reg[0][0]) {  // a gathered bad page's NaN rows (kernel/seqlens.h)
    report_gathered_pages<Cfg::kBlockN>(p, c.batch, kv.n_begin, kv.n_blocks);
  }
  epi_stamp(0);
  o_arrive();  // a tile without blocks
  const bool skip_first_row = p.fault == kFaultSkipFirstRow && consumer_wg == 0 && warp_in_wg == 0;
  if constexpr (kSplit) {
    write_partial<kHeadDim>(p, consumer.o_reg, inv_l, lse, c.batch, c.split, rows, lane, skip_first_row);
  } else if (kTail && again.tile >= p.tail_first) {
    // A stream-K tail item (kernel/stream_tail.h): partials; combine_tail_kernel writes O after the launch.
    write_tail_partial<Cfg::kBlockM, kHeadDim>(p, consumer.o_reg, inv_l, lse, again.tile, rows, tile_row0, lane);
  } else if (p.pack_gqa || p.fault == kFaultSkipFirstRow || (Cfg::kOAliasV && n_blocks < Cfg::kConsumerWGs) ||
             (p.cu_seqlens_q != nullptr && wg_row0 + 64 > again.q_len)) {
    // Packed rows span several heads (no single TMA box); the planted skip-row fault needs per-row stores; O over
    // V stages only in the V stages of the tile's own last kConsumerWGs blocks (hopper_mainloop.h: the producer's
    // refill waits by that rule), so a tile with fewer blocks writes from registers; a box past a packed
    // sequence's end would overwrite the next sequence's rows (this is per warpgroup: each stages and stores its
    // own rows, with its own barriers).
    write_output<kHeadDim, Out>(p, consumer.o_reg, inv_l, lse, c.batch, again.q_off, rows, lane,
                                    skip_first_row);
  } else {
    // This warpgroup's 64 rows are staged in its own slot of the O buffer, or, where O overlaps V, in the V stage
    // of ring block b = block - kConsumerWGs + consumer_wg (the tile's last blocks: a different stage per
    // warpgroup). Staging waits until the slot is free: the stage's kVEmpty phase (every warpgroup's P V that read
    // it is done; no later phase can complete before kOEmpty + consumer_wg lets the producer load V into it
    // again), or this warpgroup's previous store has been read (its thread 0 waits for that before the barrier).
    uint8_t* wg_o;
    if constexpr (Cfg::kOAliasV) {
      const int b = block - Cfg::kConsumerWGs + consumer_wg;  // >= 0: the tile has kConsumerWGs blocks or more
      wait(Slots::kVEmpty, b);
      wg_o = v_smem + (b % Cfg::kStages) * Cfg::kKVBytes;
    } else {
      if (thread == 0) bulk_wait_group_read_all();  // this slot's previous store (a tile ago: done by now)
      named_barrier_sync(kBarrierEpilogueWG0 + consumer_wg, 128);
      wg_o = o_own + consumer_wg * Cfg::kOWgBytes;
    }
    epi_stamp(1);
    stage_output<Out>(smem_addr(wg_o), consumer.o_reg, inv_l, fault_bias(p), warp_in_wg * 16, lane);
    fence_proxy_async_shared();  // the TMA store (async proxy) reads what these generic stores wrote
    named_barrier_sync(kBarrierEpilogueWG0 + consumer_wg, 128);
    epi_stamp(2);
    if (thread == 0 && wg_row0 < again.q_len) {
#pragma unroll
      for (int ch = 0; ch < Cfg::kOChunks; ++ch) {  // dense: rows past seqlen_q clip, columns past head_dim_v too
        if (64 * ch < p.head_dim_v) {
          tma_store_4d(&tma.o, wg_o + ch * 64 * 128, 64 * ch, again.q_off + wg_row0, c.head,
                       q_batch_coord(p, c.batch));
        }
      }
      bulk_commit_group();
      epi_stamp(3);
      // Over V, kOEmpty (below) must follow the read; an own buffer is waited for at the next epilogue, so this
      // warpgroup's next GEMMs (which need its thread 0) do not wait for the store.
      if constexpr (Cfg::kOAliasV && !Cfg::kOLateArrive) bulk_wait_group_read_all();
      epi_stamp(4);
    }
    write_lse(p, lse, c.batch, again.q_off, rows, lane);
    epi_stamp(5);
  }
  // O over V: each warpgroup arrives on its own kOEmpty + w for each tile with blocks, staged or not (the producer
  // waits on such phases before refilling the stages). With O in its own buffer nobody waits, so nobody arrives
  // (synccheck: "missing wait").
  if (Cfg::kOAliasV && n_blocks > 0 && thread == 0) {
    o_arrive_pending = true;
    if (!Cfg::kOLateArrive) o_arrive();
  }}

}  // namespace flashcore
