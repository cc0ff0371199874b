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

import argparse
import ctypes
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tile_timeline import SHAPES, call_for  # noqa: E402

from flashcore import _lib  # noqa: E402
from harness.bench.timing import L2Flusher  # noqa: E402

CTAS, BLOCKS, ITEMS, TILES = 16, 512, 32, 64  # kernel/timeline.h kTlCtas, kBlBlocks, kBlItems, kBlTiles
ITEM_BASE = CTAS * BLOCKS * 8
TILE_BASE = ITEM_BASE + CTAS * ITEMS * 8
WORDS = TILE_BASE + CTAS * TILES * 4
STALLED = 64  # cycles: a wait longer than this counts as the consumer waiting on the transfer


def stamps(lib: ctypes.CDLL, call, flush: L2Flusher) -> torch.Tensor:
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    if lib.fc_timeline_clear() != 0:
        raise SystemExit("fc_timeline_clear failed")
    flush()
    torch.cuda.synchronize()
    call()
    torch.cuda.synchronize()
    buf = (ctypes.c_longlong * WORDS)()
    if lib.fc_timeline_read(buf, WORDS) != WORDS:
        raise SystemExit("fc_timeline_read failed (is FLASHCORE_LIB a FLASHCORE_BLOCKLINE build?)")
    return torch.tensor(list(buf), dtype=torch.int64)


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
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="fp8-s4k-causal,fp8-s4k,fp8-d256-s4k-causal")
    ap.add_argument("--out", help="a folder for the raw stamps (bl-<shape>.pt)")
    ap.add_argument("--flush-mib", type=int, default=0, help="write this many MiB before the stamped call (cold L2)")
    args = ap.parse_args()
    lib = _lib.load()
    if not hasattr(lib, "fc_timeline_read"):
        raise SystemExit(f"{_lib.library_path()} has no timeline: build it with NVCC_EXTRA=-DFLASHCORE_BLOCKLINE")
    lib.fc_timeline_read.argtypes = [ctypes.c_void_p, ctypes.c_int]
    flush = L2Flusher(args.flush_mib)
    for name in args.shapes.split(","):
        if name not in SHAPES:
            raise SystemExit(f"unknown shape {name!r}: from {', '.join(SHAPES)}")
        t = stamps(lib, call_for(SHAPES[name]), flush)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            torch.save(t, os.path.join(args.out, f"bl-{name}.pt"))
        summarize(name, t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
