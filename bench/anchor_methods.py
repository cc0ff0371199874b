#!/usr/bin/env python3
"""Which part of the timing method moves the baselines away from the ROADMAP anchors (gates/bench.yaml `anchors:`).

Per anchor and baseline, on fresh random inputs (harness.bench.backends.prepare, as the suite), back to back:
  do_bench  triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"): how the anchors were taken;
  by_hand   its loop with CUDA events (no triton): 5 x (flush, fn) estimate a call, plain calls for 25 ms, then
            (256 MiB zero_(), event, fn, event) back to back for 100 ms; median;
  ours      harness.bench.timing.time_rounds, this backend alone (one call per round, gates/bench.yaml timing:).
SM clock and power are sampled while each runs (NVML via torch.cuda.clock_rate/power_draw every 10 ms; without
it nvidia-smi before and after); `ours` also gives its median per-call clock probe. Usage (GPU host):
  python bench/anchor_methods.py --out DIR [--anchors name,...] [--backends fa2,cudnn,fa3]
"""

from __future__ import annotations

import argparse
import importlib
import json
import secrets
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # `python bench/anchor_methods.py` puts bench/, not the repository, on the path

from harness.bench import backends, flops, timing  # noqa: E402
from harness.bench.settings import BACKENDS, Anchor, TimingParams, load_bench_settings, timing_dict  # noqa: E402
from harness.config import load_config  # noqa: E402
from harness.schema import Workload  # noqa: E402
from harness.support import gpu  # noqa: E402

METHODS = ("do_bench", "by_hand", "ours")
WARMUP_MS, REP_MS, FLUSH_MIB = 25, 100, 256  # do_bench's defaults and the size of its cache-clearing buffer
Runner = Callable[[], tuple[list[float], list[float]]]  # -> (times in ms, probed SM clocks in MHz)
Sample = tuple[float, float | None]  # (SM MHz, W)


# ---- pure: the CPU tests call these ------------------------------------------------------------------------
def anchor_workload(name: str, a: Anchor) -> Workload:
    kind = "memory-bound" if a.unit == "tbps" else "compute-bound"
    return Workload(name, a.batch, a.heads, a.heads, a.seqlen_q, a.seqlen_k, a.head_dim, a.dtype, a.causal, kind,
                    "ROADMAP anchor")


def rates(times_ms: Sequence[float], wl: Workload) -> list[float]:
    """TFLOPS of each time; TB/s of K and V read for a memory-bound (decode) workload, as the anchors count."""
    if wl.kind == "memory-bound":
        return [flops.tbps(flops.workload_kv_bytes(wl), t) for t in times_ms]
    return [flops.tflops(flops.workload_flops(wl), t) for t in times_ms]


def deviation(value: float | None, ref: float | None) -> float | None:
    """Percent above (+) or below (-) the anchor."""
    return None if value is None or not ref else 100.0 * (value / ref - 1.0)


def clock_summary(source: str, samples: Sequence[Sample]) -> dict[str, Any]:
    sm, watts = [s for s, _ in samples], [w for _, w in samples if w is not None]
    return {"source": source if samples else "none", "samples": len(samples),
            "sm_mhz": statistics.median(sm) if sm else None, "sm_mhz_min": min(sm, default=None),
            "sm_mhz_max": max(sm, default=None), "power_w": statistics.median(watts) if watts else None}


def method_result(times_ms: Sequence[float], wl: Workload, ref: float | None, clocks: Mapping[str, Any],
                  probe_mhz: Sequence[float] = ()) -> dict[str, Any]:
    med = statistics.median(times_ms)
    value = rates([med], wl)[0]
    return {"ok": True, "n": len(times_ms), "median_ms": med, "value": value, "deviation_pct": deviation(value, ref),
            "clocks": dict(clocks), "probe_mhz": statistics.median(probe_mhz) if probe_mhz else None,
            "times_ms": list(times_ms)}


def clock_of(res: Mapping[str, Any]) -> float | None:
    """The clock shown for a method: its median probed clock (ours), else the median NVML-sampled one."""
    return res.get("probe_mhz") or (res.get("clocks") or {}).get("sm_mhz")


def table(results: Sequence[Mapping[str, Any]]) -> str:
    head = ["anchor", "backend", "ref"] + [c for m in METHODS for c in (m, "dev%", "MHz")]
    rows, notes = [head], []
    for r in results:
        fmt = "{:.2f}" if r["unit"] == "tbps" else "{:.1f}"
        for b in r["backends"]:
            row = [r["anchor"], b["backend"], fmt.format(b["anchor_value"]) if b["anchor_value"] else "-"]
            if not b["available"]:
                notes.append(f"{r['anchor']} {b['backend']}: not available: {b['why']}")
            for m in METHODS if b["available"] else ():
                res = b["methods"].get(m, {"ok": False, "why": "not run"})
                if not res["ok"]:
                    notes.append(f"{r['anchor']} {b['backend']} {m}: {res['why']}")
                    row += ["failed", "", ""]
                    continue
                dev, clk = res["deviation_pct"], clock_of(res)
                row += [fmt.format(res["value"]), "-" if dev is None else f"{dev:+.1f}", f"{clk:.0f}" if clk else "-"]
            rows.append(row + ["n/a"] * (len(head) - len(row)))
    widths = [max(len(x[i]) for x in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(x, widths, strict=True)))
             for x in rows]
    key = "MHz: median SM clock read while the method ran (NVML, else nvidia-smi); ours: its median clock probe"
    return "\n".join([*lines, key, *notes])


def why(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


def measure_backend(wl: Workload, ref: float | None, runners: Mapping[str, Runner],
                    log: Callable[[str], None] = lambda s: None) -> dict[str, dict[str, Any]]:
    """Each method in METHODS order, its clocks sampled; a missing runner or one that raises is recorded with why."""
    out: dict[str, dict[str, Any]] = {}
    for m in METHODS:
        try:
            with sampled() as (source, samples):
                times, probe = runners[m]()
            res = out[m] = method_result(times, wl, ref, clock_summary(source, samples), probe)
            dev, clk = res["deviation_pct"], clock_of(res)
            log(f"  {m:<8} {res['value']:8.2f}" + (f" ({dev:+.1f} % vs {ref})" if dev is not None else "")
                + (f" at {clk:.0f} MHz" if clk else ""))
        except Exception as e:  # noqa: BLE001 - this method fails; the others still run
            out[m] = {"ok": False, "why": why(e)}
            log(f"  {m:<8} failed: {out[m]['why']}")
    return out


# ---- GPU side -----------------------------------------------------------------------------------------------
def read_clock(smi: bool) -> Sample | None:
    try:
        if not smi:
            import torch  # reads NVML through pynvml; raises without it

            return float(torch.cuda.clock_rate()), torch.cuda.power_draw() / 1000.0
        cmd = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits"]
        sm, w = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.splitlines()[0].split(",")
        return float(sm), float(w)
    except Exception:  # noqa: BLE001 - no NVML / nvidia-smi / GPU, or [N/A]
        return None


@contextmanager
def sampled() -> Iterator[tuple[str, list[Sample]]]:
    """SM clock and power while the block runs: NVML every 10 ms from a thread, else nvidia-smi before and after."""
    smi, samples, stop = read_clock(False) is None, [], threading.Event()

    def add(s: Sample | None) -> None:
        if s is not None:
            samples.append(s)

    def loop() -> None:
        while not stop.wait(0.01):
            add(read_clock(False))

    thread = None if smi else threading.Thread(target=loop, daemon=True)
    add(read_clock(True) if smi else None)
    if thread:
        thread.start()
    try:
        yield ("nvidia-smi" if smi else "nvml"), samples
    finally:
        stop.set()
        if thread:
            thread.join()
        add(read_clock(True) if smi else None)


def by_hand(fn: Callable[[], object], flush: Callable[[], None]) -> list[float]:
    """triton.testing.do_bench's loop (estimate, warm-up without flush, flushed timed reps) with torch events."""
    import torch

    fn()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    ev[0].record()
    for _ in range(5):
        flush()
        fn()
    ev[1].record()
    torch.cuda.synchronize()
    est = ev[0].elapsed_time(ev[1]) / 5
    for _ in range(max(1, int(WARMUP_MS / est))):
        fn()
    pairs = [[torch.cuda.Event(enable_timing=True) for _ in range(2)] for _ in range(max(1, int(REP_MS / est)))]
    for s, e in pairs:
        flush()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in pairs]


def runners_for(p: backends.Prepared, tp: TimingParams, flush: Callable[[], None], ours_flush: timing.L2Flusher
                ) -> dict[str, Runner]:
    def do_bench() -> tuple[list[float], list[float]]:
        bench = importlib.import_module("triton.testing").do_bench  # raises when triton is absent: recorded
        with p.context():
            return [float(bench(p.fn, warmup=WARMUP_MS, rep=REP_MS, return_mode="median"))], []

    def hand() -> tuple[list[float], list[float]]:
        with p.context():
            return by_hand(p.fn, flush), []

    def ours() -> tuple[list[float], list[float]]:
        key = ("anchor", "backend")
        got = timing.time_rounds([timing.Call(key, p.fn, p.context)], tp, ours_flush)
        if key in got.crashed:
            raise RuntimeError(got.crashed[key])
        return got.times_ms[key], got.clock_mhz[key]

    return {"do_bench": do_bench, "by_hand": hand, "ours": ours}


def measure_anchor(tag: str, wl: Workload, anchor: Anchor, seed: int, chosen: Sequence[str],
                   runners: Callable[[backends.Prepared], dict[str, Runner]]) -> dict[str, Any]:
    """Every chosen backend on one set of fresh random inputs (an unavailable one is listed with why)."""
    q, k, v = gpu.make_inputs(wl, seed, "cuda")
    entry: dict[str, Any] = {"anchor": wl.name, "shape": wl.label, "unit": anchor.unit, "seed": seed, "backends": []}
    for b in chosen:
        ref = anchor.value(b)
        print(f"{tag} {wl.name} {b} (anchor {ref}):", file=sys.stderr, flush=True)
        try:
            p = backends.prepare(b, wl, q, k, v)
            backends.probe(p)
        except backends.Unavailable as e:
            print(f"  not available: {e}", file=sys.stderr)
            entry["backends"].append({"backend": b, "anchor_value": ref, "available": False, "why": str(e)})
            continue
        got = measure_backend(wl, ref, runners(p), lambda s: print(s, file=sys.stderr, flush=True))
        entry["backends"].append({"backend": b, "anchor_value": ref, "available": True,
                                  "implementation": p.implementation, "methods": got})
    return entry


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path, help="folder for anchor_methods.json")
    ap.add_argument("--anchors", help="comma-separated anchor names of gates/bench.yaml (default: all)")
    ap.add_argument("--backends", default="fa2,cudnn,fa3", help="comma-separated (default: fa2,cudnn,fa3)")
    ap.add_argument("--gates-dir", type=Path, default=REPO / "gates")
    ap.add_argument("--seed", type=int, help="base seed of the inputs (default: a fresh one, recorded)")
    args = ap.parse_args(argv)
    settings = load_bench_settings(load_config(args.gates_dir))
    names, chosen = (args.anchors.split(",") if args.anchors else list(settings.anchors)), args.backends.split(",")
    for bad in [n for n in names if n not in settings.anchors] + [b for b in chosen if b not in BACKENDS]:
        ap.error(f"unknown anchor or backend {bad!r}")
    if (no_gpu := gpu.cuda_unavailable_reason()) is not None:
        print(no_gpu, file=sys.stderr)
        return 2
    import torch

    base_seed = secrets.randbelow(2**31) if args.seed is None else args.seed
    flush, results = timing.L2Flusher(FLUSH_MIB), []
    ours_flush = flush if settings.timing.flush_mib == FLUSH_MIB else timing.L2Flusher(settings.timing.flush_mib)
    for i, name in enumerate(names, 1):
        wl, seed = anchor_workload(name, settings.anchors[name]), gpu.workload_seed(base_seed, "bench", name)
        results.append(measure_anchor(f"[{i}/{len(names)}]", wl, settings.anchors[name], seed, chosen,
                                      lambda p: runners_for(p, settings.timing, flush, ours_flush)))
        gpu.free_memory()  # this anchor's inputs went with measure_anchor's frame
    try:
        triton_version = str(importlib.import_module("triton").__version__)
    except Exception as e:  # noqa: BLE001
        triton_version = f"not importable: {why(e)}"
    doc = {"methods": {"do_bench": f"triton.testing.do_bench(fn, warmup={WARMUP_MS}, rep={REP_MS}, median)",
                       "by_hand": f"do_bench's loop with CUDA events, {FLUSH_MIB} MiB zero_() before each call",
                       "ours": "harness.bench.timing.time_rounds, this backend alone"},
           "timing": timing_dict(settings.timing), "base_seed": base_seed, "gpu": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "triton": triton_version, "results": results}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "anchor_methods.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
