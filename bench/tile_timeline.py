"""Where a tile's time goes: the clock64 timeline of an instrumented build (kernel/timeline.h), per phase.

    make build BUILD_DIR=build-tl NVCC_EXTRA=-DFLASHCORE_TIMELINE
    FLASHCORE_LIB=build-tl/libflashcore.so python3 bench/tile_timeline.py [--shapes fp8-s4k,...] [--out DIR]
        [--flush-mib 256]

For each shape: three warm-up calls, then one call whose stamps (the first 16 CTAs' first 48 tiles) are read back.
Prints, in units of a "step" (the median time of one block in a tile's unmasked loop, per consumer warpgroup), the
per-tile fixed cost (tile time - blocks x step) and its phases: Q wait, first S GEMM, first softmax, last P V,
epilogue; the Q load's latency and the producer's waits; the step by a CTA's tile index; and the CTAs' end times
(load balance). Medians over tiles 1..47 (a CTA's first tile also waits for the kernel's start). --flush-mib cools
the L2 before the stamped call, as the perf gates do. --out saves the raw stamps (torch.save, int64
[cta][tile][role][stamp]). Kernel development only (docs/perf-notes.md steps 8.21, 8.30); the gates never run it.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import flashcore  # noqa: E402
from flashcore import _lib  # noqa: E402
from flashcore.fp8 import attention_fp8  # noqa: E402
from harness.bench.timing import L2Flusher  # noqa: E402
from harness.support import fp8 as fp8_inputs  # noqa: E402

CTAS, TILES, ROLES, STAMPS = 16, 48, 8, 8  # kernel/timeline.h
CONSUMERS, PRODUCER, STEP_ROLE, STEP, EPILOGUE_ROLE = 3, 3, 4, 4, 6  # roles 0..2, 3, 4..5 (block STEP), 6..7
# name: (batch, heads, seqlen_q, seqlen_k, head_dim, causal, fp8)
SHAPES = {
    "fp8-s4k-causal": (4, 16, 4096, 4096, 128, True, True),
    "fp8-s4k": (4, 16, 4096, 4096, 128, False, True),
    "fp8-k1088": (4, 16, 4096, 1088, 128, False, True),
    "fp8-d256-s4k-causal": (4, 16, 4096, 4096, 256, True, True),
    "fp8-d256-s4k": (4, 16, 4096, 4096, 256, False, True),
    "bf16-s4k": (4, 16, 4096, 4096, 128, False, False),
    "bf16-s4k-causal": (4, 16, 4096, 4096, 128, True, False),
}


def call_for(shape: tuple[int, ...]):
    b, h, sq, sk, d, causal, fp8 = shape
    dtype = torch.bfloat16
    q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(b, sk, h, d, device="cuda", dtype=dtype) for _ in range(2))
    if not fp8:
        return lambda: flashcore.attention(q, k, v, causal=causal)
    q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))
    lo, hi = fp8_inputs.DESCALE_RANGE  # the FP8 workloads' descales
    qd, kd, vd = (torch.rand(b, h, device="cuda") * (hi - lo) + lo for _ in range(3))
    return lambda: attention_fp8(q8, k8, v8, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal)


def read_stamps(lib: ctypes.CDLL, call, flush: L2Flusher, words: int) -> torch.Tensor:
    """Three warm-up calls, then one stamped call; its first `words` stamps, flat."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    if lib.fc_timeline_clear() != 0:
        raise SystemExit("fc_timeline_clear failed")
    flush()  # --flush-mib: the perf gates' cold L2 before the stamped call (a no-op without it)
    torch.cuda.synchronize()
    call()
    torch.cuda.synchronize()
    buf = (ctypes.c_longlong * words)()
    if lib.fc_timeline_read(buf, words) != words:
        raise SystemExit(f"fc_timeline_read failed (fewer than {words} stamps: is FLASHCORE_LIB the right build?)")
    return torch.tensor(list(buf), dtype=torch.int64)


def stamps(lib: ctypes.CDLL, call, flush: L2Flusher) -> torch.Tensor:
    return read_stamps(lib, call, flush, CTAS * TILES * ROLES * STAMPS).view(CTAS, TILES, ROLES, STAMPS)


def summarize(name: str, t: torch.Tensor) -> None:
    rows = []
    for c in range(CTAS):
        for k in range(1, TILES):
            p = t[c, k, PRODUCER].tolist()
            for wg in range(CONSUMERS):
                s = t[c, k, wg].tolist()
                n = s[7]
                if s[6] == 0 or n <= 1:
                    continue
                rows.append(dict(wg=wg, n=n, total=s[6] - s[0], step=(s[4] - s[3]) / (n - 1), q_wait=s[1] - s[0],
                                 first_s=s[2] - s[1], first_softmax=s[3] - s[2], last_pv=s[5] - s[4],
                                 epilogue=s[6] - s[5], q_latency=s[1] - p[3] if p[3] else 0,
                                 producer_k0=p[1] - p[0], producer_q_empty=p[2] - p[1]))
    if not rows:
        print(f"{name}: no tile with 2 or more blocks was stamped (is FLASHCORE_LIB a FLASHCORE_TIMELINE build?)")
        return
    step = statistics.median([r["step"] for r in rows if r["n"] >= 4] or [r["step"] for r in rows])
    fixed = statistics.median(r["total"] - r["n"] * step for r in rows)
    print(f"{name}: {len(rows)} warpgroup tiles, median {statistics.median(r['n'] for r in rows)} blocks; "
          f"step {step:.0f} cycles; fixed per tile {fixed:.0f} cycles = {fixed / step:.2f} steps")
    keys = ("q_wait", "first_s", "first_softmax", "last_pv", "epilogue", "q_latency", "producer_k0",
            "producer_q_empty")
    for wg in sorted({r["wg"] for r in rows}):
        sel = [r for r in rows if r["wg"] == wg]
        print(f"  warpgroup {wg} (steps): " + " ".join(f"{k} {statistics.median(r[k] for r in sel) / step:.2f}"
                                                       for k in keys))
    ends = []
    for c in range(CTAS):
        done = [k for k in range(TILES) if t[c, k, 0, 6] != 0]
        if done:
            ends.append(int(t[c, done[-1], :CONSUMERS, 6].max() - t[c, 0, PRODUCER, 0]))
    step_phases(t, step)
    epilogue_phases(t, step)
    by_tile(t)
    if ends:
        print(f"  CTA end times (cycles from the producer's start): {min(ends)}..{max(ends)}, "
              f"max / mean {max(ends) / statistics.mean(ends):.3f}")


def step_phases(t: torch.Tensor, step: float) -> None:
    """Block STEP's step, per warpgroup, in steps: K/V wait, wait for its turn to issue, issue, S wait, softmax (with
    scores and mask), P V wait after it, rescale and pack."""
    names = ("kv_wait", "turn", "issue", "s_wait", "softmax", "pv_wait", "pack")
    for wg in range(2):
        spans: dict[str, list[int]] = {n: [] for n in names}
        for c in range(CTAS):
            for k in range(1, TILES):
                s = t[c, k, STEP_ROLE + wg].tolist()
                if s[7] == 0 or s[0] == 0:
                    continue
                for i, n in enumerate(names):
                    spans[n].append(s[i + 1] - s[i])
        if spans["pack"]:
            print(f"  warpgroup {wg} block {STEP}'s step (steps, {len(spans['pack'])} tiles): " + " ".join(
                f"{n} {statistics.median(v) / step:.2f}" for n, v in spans.items()))


def epilogue_phases(t: torch.Tensor, step: float) -> None:
    """The epilogue per warpgroup, in steps: finalize (from the last P V), wait for the staging slot, stage O, issue
    the store, wait for its read (O over V only), LSE, the arrival; then the tile's step 1: from the first softmax to
    its entry, and its K/V wait."""
    names = ("finalize", "slot", "stage", "issue", "read", "lse", "arrive", "to_step1", "step1_kv")
    for wg in range(2):
        spans: dict[str, list[int]] = {n: [] for n in names}
        for c in range(CTAS):
            for k in range(1, TILES):
                tile, e = t[c, k, wg].tolist(), t[c, k, EPILOGUE_ROLE + wg].tolist()
                if tile[6] == 0 or e[2] == 0:  # staged tiles only
                    continue
                read = e[4] if e[4] else e[3]
                marks = [tile[5], e[0], e[1], e[2], e[3], read, e[5], tile[6]]
                for i, n in enumerate(names[:7]):
                    spans[n].append(marks[i + 1] - marks[i])
                if e[6] and e[7]:
                    spans["to_step1"].append(e[6] - tile[3])
                    spans["step1_kv"].append(e[7] - e[6])
        if spans["finalize"]:
            print(f"  warpgroup {wg} epilogue (steps, {len(spans['finalize'])} tiles): " + " ".join(
                f"{n} {statistics.median(v) / step:.2f}" for n, v in spans.items() if v))


def by_tile(t: torch.Tensor) -> None:
    """The step by a CTA's tile index (median over the stamped CTAs and warpgroups, tiles of 4 blocks or more), with
    the median time at which that tile started: shows work that slows a stretch of the call (e.g. its start)."""
    cells = []
    for k in range(TILES):
        steps, starts = [], []
        for c in range(CTAS):
            for wg in range(CONSUMERS):
                s = t[c, k, wg].tolist()
                if s[6] != 0 and s[7] >= 4:
                    steps.append((s[4] - s[3]) / (s[7] - 1))
                    starts.append(s[0] - t[c, 0, PRODUCER, 0].item())
        if steps:
            cells.append(f"{k}:{statistics.median(steps):.0f}@{statistics.median(starts) / 1000:.0f}k")
    print("  step by tile index (cycles @ start, thousands of cycles): " + " ".join(cells))


def run_shapes(doc: str, default_shapes: str, macro: str, prefix: str, read, summarize_fn) -> int:
    """The command line of the timeline scripts (doc: the script's docstring): stamp each --shapes entry with
    read(lib, call, flush), save the stamps under --out as <prefix>-<shape>.pt, print summarize_fn(name, stamps)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--shapes", default=default_shapes, help=f"from: {', '.join(SHAPES)}")
    ap.add_argument("--out", help=f"a folder for the raw stamps ({prefix}-<shape>.pt)")
    ap.add_argument("--flush-mib", type=int, default=0, help="write this many MiB before the stamped call (cold L2)")
    args = ap.parse_args()
    lib = _lib.load()
    flush = L2Flusher(args.flush_mib)
    if not hasattr(lib, "fc_timeline_read"):
        raise SystemExit(f"{_lib.library_path()} has no timeline: build it with NVCC_EXTRA=-D{macro}")
    lib.fc_timeline_read.argtypes = [ctypes.c_void_p, ctypes.c_int]
    for name in args.shapes.split(","):
        if name not in SHAPES:
            raise SystemExit(f"unknown shape {name!r}: from {', '.join(SHAPES)}")
        t = read(lib, call_for(SHAPES[name]), flush)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            torch.save(t, os.path.join(args.out, f"{prefix}-{name}.pt"))
        summarize_fn(name, t)
    return 0


def main() -> int:
    return run_shapes(__doc__ or "", ",".join(SHAPES), "FLASHCORE_TIMELINE", "tl", stamps, summarize)


if __name__ == "__main__":
    sys.exit(main())
