"""Host time per call: FlashCore's entry points next to FA3's flash_attn_func and torch SDPA (issue 14).

    python3 bench/host_cost.py [--calls 2000] [--shape B,S,H,D]

A small shape, so the GPU is never the bottleneck: each call is timed on the host alone (time.perf_counter around
the Python call, no synchronization) in bursts of `--burst` calls, each queued behind a GPU spin so that the host
never waits for the GPU, and short enough that the launch queue (about a thousand entries) never fills: a full
queue would make the host wait for the GPU and time the kernels instead. Entry points alternate burst by burst.
Prints the median and p90 microseconds per call; the ratio column is each entry point's time over FA3's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import flashcore  # noqa: E402
import flashcore.ops  # noqa: E402,F401
from harness.bench.backends import Unavailable, import_fa3  # noqa: E402


def burst_us(fn, calls: int) -> list[float]:
    """`calls` host times (us) of fn, queued behind a GPU spin long enough to cover them."""
    torch.cuda.synchronize()
    torch.cuda._sleep(int(1e6 * calls))  # ~0.5 ms of spin per call at 2 GHz: the host never waits for the GPU
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000, help="timed calls per entry point")
    ap.add_argument("--burst", type=int, default=50, help="calls per burst (a few launches each: < queue depth)")
    ap.add_argument("--shape", default="1,128,8,128", help="B,S,H,D (bf16, causal)")
    a = ap.parse_args()
    b, s, h, d = (int(x) for x in a.shape.split(","))
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    entries = {
        "flashcore.attention": lambda: flashcore.attention(q, k, v, causal=True),
        "flashcore.flash_attn_func": lambda: flashcore.flash_attn_func(q, k, v, causal=True),
        "torch.ops.flashcore.attention": lambda: torch.ops.flashcore.attention(q, k, v, causal=True),
        "torch SDPA (flash backend)": lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True),
    }
    try:
        fa3, _, _ = import_fa3()
        entries["FA3 flash_attn_func"] = lambda: fa3(q, k, v, causal=True)
    except Unavailable as e:
        print(f"FA3 not timed: {e}")
    times: dict[str, list[float]] = {name: [] for name in entries}
    with torch.no_grad():
        for fn in entries.values():
            for _ in range(20):
                fn()
        for _ in range(max(1, a.calls // a.burst)):  # entry points alternate burst by burst
            for name, fn in entries.items():
                times[name] += burst_us(fn, a.burst)
    rows = {name: (statistics.median(t), sorted(t)[int(0.9 * len(t))]) for name, t in times.items()}
    fa3_us = rows.get("FA3 flash_attn_func", (None,))[0]
    print(f"host time per call, B{b} S{s} H{h} D{d} bf16 causal, {a.calls} calls each (torch {torch.__version__})")
    print(f"{'entry point':32s} {'median us':>10s} {'p90 us':>8s} {'/ FA3':>7s}")
    for name, (med, p90) in rows.items():
        ratio = f"{med / fa3_us:6.2f}x" if fa3_us else "    n/a"
        print(f"{name:32s} {med:10.1f} {p90:8.1f} {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
