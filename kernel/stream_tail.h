// The stream-K tail of a static order of equal tiles (kernel/tile_scheduler.h; non-causal calls without a window,
// per-sequence lengths or split-KV). Such an order ends on a partial wave: `tiles % ctas` tiles, one per SM, while
// the other SMs idle for a whole tile (B4 H16 S8K, 128-row tiles: 4,096 tiles on 132 SMs, 4 in the last wave).
// The tail's tiles are cut at K/V-block boundaries into `pieces` equal runs instead: piece i takes blocks
// [i U / P, (i + 1) U / P) of the tail's U = tiles x blocks, so a piece may end one tile and start the next (two
// items, run by the same CTA in the static order). Each item writes its rows' fp32 partials (O normalized by its own
// softmax sum, and its LSE) to a slot of the workspace; combine_tail_kernel, launched after the attention kernel,
// adds each tile's slots in piece order and writes O (the sum done by the attention
// kernel's last piece cost more than the tail saved, and its code moved ptxas's allocation of every kernel).
// Host half (plain C++: tests compile it with the system compiler): the plan and the index arithmetic. Device half
// (nvcc only): the items' K/V ranges, the partials and the combine kernel.
#pragma once
#include <cstdint>

#include "params.h"

namespace flashcore {

// A tail filling more than kTailMaxFill of a wave runs whole: measured on the H100, B4 H16 S4K's 68 tiles of 132
// (52 %) gained 0.3-0.6 % before their partials were summed, less than the sum costs; S8K's 4 (3 %) 2 %. A piece
// takes at least kTailMinBlocks K/V blocks.
constexpr double kTailMaxFill = 0.25;
constexpr int kTailMinBlocks = 4;

struct TailPlan {
  int tiles = 0;      // tiles in the tail (0: no tail)
  int pieces = 0;     // runs they are cut into: more than `tiles`, at most `stride`
  int blocks = 0;     // K/V blocks per tile
  int64_t first = 0;  // index of the first tail item (= of the first tail tile): the tiles before it run whole
  int stride = 0;     // item index = first + half * stride + piece (half 1: the piece's second tile)
};

// `tiles` equal tiles of `blocks` K/V blocks each, taken in a static order by `ctas` persistent CTAs.
inline TailPlan plan_tail(int64_t tiles, int blocks, int64_t ctas) {
  TailPlan t;
  if (ctas < 2 || tiles <= ctas || blocks < 2 * kTailMinBlocks) return t;
  const int64_t rest = tiles % ctas;
  if (rest == 0 || rest > kTailMaxFill * ctas || tiles + 2 * ctas > INT32_MAX) return t;
  const int64_t units = rest * blocks;
  int64_t pieces = units / kTailMinBlocks;
  if (pieces > ctas) pieces = ctas;
  // The device computes piece boundaries in 32-bit ints: (piece + 1) * units must fit.
  if (pieces <= rest || units * pieces > INT32_MAX) return t;
  t.tiles = static_cast<int>(rest);
  t.pieces = static_cast<int>(pieces);
  t.blocks = blocks;
  t.first = tiles - rest;
  t.stride = static_cast<int>(ctas);
  return t;
}

// Partial slots: one per (tile, piece) pair. Pairs in block order step either to the next piece or to the next
// tile, so tile + piece numbers them 0 .. tiles + pieces - 2. Each holds kBlockM rows of O, then their LSEs.
inline int64_t tail_slots(const TailPlan& t) { return t.tiles > 0 ? int64_t{t.tiles} + t.pieces - 1 : 0; }
// The floats of one slot: kBlockM rows of kHeadDim, then their kBlockM LSEs.
template <int kBlockM, int kHeadDim>
constexpr int64_t kTailSlotFloats = int64_t{kBlockM} * (kHeadDim + 1);

// Tail item `j` (its index minus `first`): tail tile `tile`, its blocks [begin, end), run by piece `piece`.
// tile < 0: no work (a piece past `pieces`, or the second half of a piece that ends inside its first tile).
struct TailItem {
  int tile, piece, begin, end;
};

// div_pieces and div_blocks divide by pieces and blocks (kernel/fast_div.h: the producer decodes items with them).
FC_HOST_DEVICE TailItem tail_item(int j, int stride, int tiles, int pieces, int blocks, FastDiv div_pieces,
                              FastDiv div_blocks) {
  const int half = j >= stride ? 1 : 0;
  TailItem it{-1, j - half * stride, 0, 0};
  if (it.piece >= pieces) return it;
  const int units = tiles * blocks;  // plan_tail keeps pieces x units within 2^31 - 1
  const int start = div_pieces(it.piece * units), end = div_pieces((it.piece + 1) * units);
  const int tile = div_blocks(start) + half;
  const int lo = tile * blocks;
  if (half == 1 && end <= lo) return it;
  it.tile = tile;
  it.begin = (start > lo ? start : lo) - lo;
  it.end = (end < lo + blocks ? end : lo + blocks) - lo;
  return it;
}

inline TailItem tail_item(int j, int stride, int tiles, int pieces, int blocks) {
  return tail_item(j, stride, tiles, pieces, blocks, make_fast_div(pieces), make_fast_div(blocks));
}

// The pieces [first, last] that cover tail tile `tile`: the piece holding unit u is ((u + 1) P - 1) / U.
FC_HOST_DEVICE void tail_tile_pieces(int tile, int tiles, int pieces, int blocks, int& first, int& last) {
  const int units = tiles * blocks;
  first = ((tile * blocks + 1) * pieces - 1) / units;
  last = ((tile + 1) * blocks * pieces - 1) / units;
}

}  // namespace flashcore

#ifdef __CUDACC__
#include "combine.cuh"
#include "common.h"
#include "epilogue.h"
#include "tile_scheduler.h"

namespace flashcore {

__device__ __forceinline__ TailItem tail_item(const KernelParams& p, int item) {
  return tail_item(item - p.tail_first, p.tail_stride, p.tail_tiles, p.tail_pieces, p.tail_blocks, p.div_tail_pieces,
                   p.div_tail_blocks);
}

// The K/V range of a tail item of a tile whose whole range is `kv`. The last item of a tile takes any block past
// the plan's count (the planted tail-mask fault widens the range by a key).
__device__ __forceinline__ KvRange tail_range(const KernelParams& p, const KvRange& kv, const TailItem& it) {
  KvRange r = kv;
  r.n_begin = kv.n_begin + it.begin;
  r.n_blocks = (it.end == p.tail_blocks ? kv.n_blocks : it.end) - it.begin;
  r.um_begin = min(max(kv.um_begin - it.begin, 0), r.n_blocks);
  r.um_end = max(min(kv.um_end - it.begin, r.n_blocks), r.um_begin);
  return r;
}

// A tail item's partials (one warp's rows, tile rows warp_row0 .. + 15): O normalized by inv_l as the epilogue
// computed it (FP8: with the descales) and the LSE, into the slot of (tile, piece).
template <int kBlockM, int kHeadDim, int kDTiles>
__device__ __forceinline__ void write_tail_partial(const KernelParams& p, const float (&o)[kDTiles][4],
                                                   const float (&inv_l)[2], const float (&lse)[2], int item,
                                                   const ThreadRows& rows, int warp_row0, int lane) {
  const TailItem it = tail_item(p, item);
  float* slot = p.tail_o + (it.tile + it.piece) * kTailSlotFloats<kBlockM, kHeadDim>;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (!rows.valid[r]) continue;
    const int row = warp_row0 + lane / 4 + 8 * r;
    store_partial_row(slot + row * kHeadDim, o, r, inv_l[r], lane);
    if (lane % 4 == 0) slot[kBlockM * kHeadDim + row] = lse[r];
  }
}

// One warp per row of the tail's tiles (tail_tiles x kBlockM rows): the tile's slots added in piece order
// (combine_row, as split-KV's partials), written as O and LSE. Rows past the sequence (or past a packed tile's
// heads) are skipped; the planted skip-row fault leaves a tile's first row unwritten here too.
template <int kHeadDim, int kBlockM, typename Element>
__global__ void __launch_bounds__(32 * kCombineWarps) combine_tail_kernel(const __grid_constant__ KernelParams p) {
  const int lane = threadIdx.x % 32;
  const int index = static_cast<int>(blockIdx.x) * kCombineWarps + static_cast<int>(threadIdx.x / 32);
  const int tile = index / kBlockM, r = index % kBlockM;
  if (tile >= p.tail_tiles || (p.fault == kFaultSkipFirstRow && r == 0)) return;
  const TileCoord c = tile_coord<false>(p, p.tail_first + tile);
  int head = c.head, row = c.m_block * kBlockM + r;
  if (p.pack_gqa) {
    if (r >= p.group * p.seqlen_q) return;  // past the group's last head
    const PackedRow packed = packed_row(p, c.head, r);
    head = packed.head;
    row = packed.row;
  }
  if (row >= p.seqlen_q) return;
  int first, last;
  tail_tile_pieces(tile, p.tail_tiles, p.tail_pieces, p.tail_blocks, first, last);
  const float* slots = p.tail_o + (tile + first) * kTailSlotFloats<kBlockM, kHeadDim>;
  auto slot = [&](int s) { return slots + s * kTailSlotFloats<kBlockM, kHeadDim>; };
  auto o_row = [&] {
    return static_cast<uint16_t*>(p.o) + c.batch * p.o_stride[0] + head * p.o_stride[2] +
           static_cast<int64_t>(row) * p.o_stride[1];
  };
  const float lse = combine_row<kHeadDim, Element>(
      last - first + 1, [&](int s) { return slot(s)[kBlockM * kHeadDim + r]; },
      [&](int s) { return slot(s) + r * kHeadDim; }, o_row, p.head_dim_v, lane,
      row_sink(p, head));
  if (p.lse != nullptr && lane == 0) p.lse[c.batch * p.lse_stride[0] + head * p.lse_stride[1] + row] = lse;
}

}  // namespace flashcore
#endif  // __CUDACC__
