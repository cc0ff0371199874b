// The two fragment rows a consumer thread of the Hopper kernel holds (its wgmma C layout), for the mask and the
// epilogue's stores.
#pragma once
#include "params.h"
#include "tile_scheduler.h"

namespace flashcore {

// The thread's two fragment rows (g, g + 8 of its warp's 16) of tile `c`: query head, query row, whether it exists
// (row < q_len, the sequence's query rows).
__device__ __forceinline__ ThreadRows thread_rows(const KernelParams& p, const TileCoord& c, const KvRange& kv,
                                                  int q_len, int tile_row0, int lane) {
  ThreadRows rows;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int tile_row = tile_row0 + lane / 4 + 8 * r;
    if (p.pack_gqa) {  // the Q box's rows run through the group's heads
      const PackedRow packed = packed_row(p, c.head, tile_row);
      rows.head[r] = packed.head;
      rows.row[r] = packed.row;
      rows.valid[r] = tile_row < p.group * p.seqlen_q && rows.row[r] < q_len;
    } else {
      rows.head[r] = c.head;
      rows.row[r] = kv.row_first + tile_row;
      rows.valid[r] = rows.row[r] < q_len;
    }
  }
  return rows;
}

}  // namespace flashcore
