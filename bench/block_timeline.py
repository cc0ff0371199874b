"""Where the FP8 V^T copy costs the consumers: per-block stamps of an instrumented build (kernel/timeline.h,
FLASHCORE_BLOCKLINE), split into the stretch while the CTA's copy warps still work and the rest of the call.

    make build BUILD_DIR=/tmp/b/bl NVCC_EXTRA=-DFLASHCORE_BLOCKLINE
    FLASHCORE_LIB=/tmp/b/bl/libflashcore.so python3 bench/block_timeline.py [--shapes fp8-s4k-causal,...]
        [--flush-mib 256] [--out DIR]

For each shape (bench/tile_timeline.py's): three warm-up calls, then one stamped call (the first 16 CTAs). Prints,
in cycles: the copy's items per CTA and their phases (claim to raw block in, transpose, store and publish); then,
for blocks whose consumer K wait began before the CTA's last copy item was published ("copy") and after ("after"):
consumer warpgroup 0's mean K and V waits per block, the producer's mean V^T flag wait, and the median time from
the producer's TMA issue to the consumer's wait ending, for blocks the consumer waited on (> 64 cycles). A copy
that costs through its flags shows long flag waits; one that costs through the transfers shows slower TMA issue to
arrival in the copy stretch. Kernel development only (docs/perf-notes.md step 8.35); the gates never run it.
"""

from __future__ import annotations

import ctypes
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tile_timeline import read_stamps, run_shapes  # noqa: E402

from harness.bench.timing import L2Flusher  # noqa: E402

CTAS, BLOCKS, ITEMS, TILES = 16, 512, 32, 64  # kernel/timeline.h kTlCtas, kBlBlocks, kBlItems, kBlTiles
ITEM_BASE = CTAS * BLOCKS * 8
TILE_BASE = ITEM_BASE + CTAS * ITEMS * 8
WORDS = TILE_BASE + CTAS * TILES * 4
STALLED = 64  # cycles: a wait longer than this counts as the consumer waiting on the transfer


def stamps(lib: ctypes.CDLL, call, flush: L2Flusher) -> torch.Tensor:
    return read_stamps(lib, call, flush, WORDS)


def mean(v: list[int]) -> float:
    return statistics.fmean(v) if v else 0.0


def med(v: list[int]) -> float:
    return statistics.median(v) if v else 0.0


def summarize(name: str, t: torch.Tensor) -> None:
    blocks = t[:ITEM_BASE].view(CTAS, BLOCKS, 8).tolist()
    items = t[ITEM_BASE:TILE_BASE].view(CTAS, ITEMS, 8).tolist()
    tiles = t[TILE_BASE:].view(CTAS, TILES, 4).tolist()
    phases: dict[str, list[int]] = {"load": [], "transpose": [], "store": []}
    per = {w: {"k": [], "v": [], "flag": [], "k_lat": [], "v_lat": [], "n": 0} for w in ("copy", "after")}
    ends, copy_ends, n_items = [], [], []
    for c in range(CTAS):
        t0 = tiles[c][0][2]
        if t0 == 0:
            continue
        mine = [it for it in items[c] if it[3] != 0]
        n_items.append(len(mine))
        for it in mine:
            phases["load"].append(it[1] - it[0])
            phases["transpose"].append(it[2] - it[1])
            phases["store"].append(it[3] - it[2])
        copy_end = max((it[3] for it in mine), default=t0)
        copy_ends.append(copy_end - t0)
        last = t0
        for s in blocks[c]:
            if s[5] == 0:
                continue
            w = per["copy" if s[4] < copy_end else "after"]
            w["n"] += 1
            w["k"].append(s[5] - s[4])
            if s[5] - s[4] > STALLED and s[3]:
                w["k_lat"].append(s[5] - s[3])
            if s[7]:
                w["v"].append(s[7] - s[6])
                w["flag"].append(s[1] - s[0])
                if s[7] - s[6] > STALLED and s[2]:
                    w["v_lat"].append(s[7] - s[2])
            last = max(last, s[7], s[5])
        ends.append(last - t0)
    if not ends:
        print(f"{name}: nothing stamped (is FLASHCORE_LIB a FLASHCORE_BLOCKLINE build?)")
        return
    print(
        f"{name}: {len(ends)} CTAs, end {med(ends):.0f} cycles (median), copy items per CTA {med(n_items):.0f}, "
        f"copy ends at {med(copy_ends):.0f}; item phases (median): "
        + " ".join(f"{k} {med(v):.0f}" for k, v in phases.items())
    )
    for w, d in per.items():
        print(
            f"  {w:5s}: {d['n']:5d} blocks; per block K wait {mean(d['k']):6.0f} V wait {mean(d['v']):6.0f} "
            f"flag wait {mean(d['flag']):6.0f}; waited-on issue->arrival K {med(d['k_lat']):5.0f} "
            f"({len(d['k_lat'])}) V {med(d['v_lat']):5.0f} ({len(d['v_lat'])}); waits per CTA "
            f"{(sum(d['k']) + sum(d['v'])) / len(ends):.0f}"
        )


def main() -> int:
    shapes = "fp8-s4k-causal,fp8-s4k,fp8-d256-s4k-causal"
    return run_shapes(__doc__ or "", shapes, "FLASHCORE_BLOCKLINE", "bl", stamps, summarize)


if __name__ == "__main__":
    sys.exit(main())
