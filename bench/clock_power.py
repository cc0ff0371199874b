"""Time against clock: whether a build is faster in cycles or only runs at a higher SM clock under the power cap.

    python3 bench/clock_power.py NAME=build_a/libflashcore.so NAME2=build_b/libflashcore.so [--shapes a,b]
        [--seconds 1.5] [--reps 2] [--flush-mib 256]

For each shape (bench/ab_kernels.py's), every backend (the builds, then FA3 where it runs the shape) is called back
to back for --seconds, in turn, --reps times, while `nvidia-smi` samples the SM clock, the board power and the clock
event reasons every 20 ms. Each call is timed alone by CUDA events (after an L2 flush with --flush-mib, as the perf
gates time). Prints per backend and rep: the median call time, the mean SM clock and power over the stretch (its
first 0.3 s left out), their product (the call's cycles at that clock) and the share of samples with each clock
event reason. A build that saves cycles shows fewer; one that only lets the clock run higher shows the same cycles
at a higher clock. --const-v also times each backend on a V of ones: the same work, with P V operands that never
toggle (what a timing-only build that skips writing V^T multiplies by). Kernel development only
(docs/perf-notes.md step 8.35).
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ab_kernels import SHAPES, Build, draw_inputs, fa3_call, load_fa3  # noqa: E402

from harness.bench.timing import L2Flusher  # noqa: E402

SKIP_S = 0.3  # the start of a stretch, while the clock settles


def stretch(fn, seconds: float, flush: L2Flusher) -> tuple[float, float, float]:
    """Calls fn back to back for `seconds`; returns (wall start, wall end, median call ms)."""
    events = []
    torch.cuda.synchronize()
    start = time.time()
    while time.time() - start < seconds:
        for _ in range(20):
            flush()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            events.append((e0, e1))
        torch.cuda.synchronize()
    end = time.time()
    return start, end, statistics.median(a.elapsed_time(b) for a, b in events)


# nvidia-smi's clocks_event_reasons.active bits (nvml.h nvmlClocksEventReason*), idle and settings left out
REASONS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "power_brake"}


def samples(path: str) -> list[tuple[float, float, float, int]]:
    """(unix time, SM MHz, watts, clock event reason bits) from the sampler's CSV lines."""
    out = []
    for line in Path(path).read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        try:
            t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((t, float(parts[1].split()[0]), float(parts[2].split()[0]), int(parts[3], 16)))
        except ValueError:
            continue
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("builds", nargs="+", help="NAME=path/to/libflashcore.so")
    ap.add_argument("--shapes", default="fp8-s4k-causal,fp8-s4k-d256-causal")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--flush-mib", type=int, default=256)
    ap.add_argument(
        "--const-v",
        action="store_true",
        help="also time every backend with V all ones (NAME+cv): the same work, operands that never toggle",
    )
    args = ap.parse_args()
    builds = [Build(*b.split("=", 1)) for b in args.builds]
    fa3, fa3_dtypes = load_fa3()
    flush = L2Flusher(args.flush_mib)
    log = tempfile.NamedTemporaryFile(suffix=".csv", delete=False).name
    query = "--query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active"
    sampler = subprocess.Popen(["nvidia-smi", query, "--format=csv,noheader", "-lms", "20", "-f", log])
    stretches = []
    try:
        for shape in args.shapes.split(","):
            b, hq, hkv, sq, sk, d, causal, dt = SHAPES[shape]
            q, k, v_random, descales = draw_inputs(SHAPES[shape])
            calls = {}
            for v_name, v in [("", v_random)] + ([("+cv", torch.ones_like(v_random))] if args.const_v else []):
                for build in builds:
                    out = torch.empty(q.shape, device="cuda", dtype=torch.bfloat16)
                    lse = torch.empty(b, hq, sq, device="cuda")
                    calls[build.name + v_name] = build.prepare(q, k, v, out, lse, causal, descales)[0]
                fa3_fn = fa3_call(fa3, fa3_dtypes, SHAPES[shape], q, k, v, descales)
                if fa3_fn is not None:
                    calls["fa3" + v_name] = fa3_fn
            for fn in calls.values():
                fn()
            for rep in range(args.reps):
                for name, fn in calls.items():
                    stretches.append((shape, rep, name, *stretch(fn, args.seconds, flush)))
    finally:
        time.sleep(0.1)
        sampler.terminate()
        sampler.wait()
    got = samples(log)
    Path(log).unlink(missing_ok=True)
    print(f"{len(got)} clock samples")
    print(
        f"{'shape':22s} {'rep':>3s} {'backend':8s} {'ms/call':>8s} {'SM MHz':>7s} {'W':>6s} {'Mcycles':>8s}  "
        "clock event reasons (share of samples)"
    )
    for shape, rep, name, start, end, ms in stretches:
        sel = [(mhz, w, r) for t, mhz, w, r in got if start + SKIP_S <= t <= end]
        mhz = statistics.fmean(s[0] for s in sel) if sel else float("nan")
        watts = statistics.fmean(s[1] for s in sel) if sel else float("nan")
        why = " ".join(
            f"{n} {sum(1 for s in sel if s[2] & bit) / len(sel):.2f}"
            for bit, n in REASONS.items()
            if sel and any(s[2] & bit for s in sel)
        )
        print(f"{shape:22s} {rep:3d} {name:8s} {ms:8.4f} {mhz:7.0f} {watts:6.0f} {ms * mhz / 1e3:8.3f}  {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
