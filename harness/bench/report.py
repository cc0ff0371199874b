"""Measurements -> what a person reads: the rows of the report's per-workload tables (JSON-able dicts for
the section templates), the charts, and the compact text table of `make bench` (pure, apart from matplotlib).

FlashCore's speed relative to a baseline is the paired ratio (harness/bench/paired.py: median of the per-round
ratios) with its run-to-run spread; an older, unpaired record shows the ratio of medians, marked unpaired.
Absolute medians and throughput drift with the SM clock (not locked: shared machine) and are shown with their
own spread and the clocks, as information."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.bench import paired, plots
from harness.bench.record import Measurement
from harness.bench.settings import BACKENDS, OURS, Anchor
from harness.schema import Workload


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else float(f"{x:.{digits}g}")


def speed(ours: Measurement | None, base: Measurement | None) -> tuple[float | None, bool]:
    """FlashCore speed / base speed: (paired median ratio, True), else (ratio of medians, False), else None."""
    if ours is None or base is None or not ours.available or not base.available:
        return None, False
    r = paired.speed_ratio(ours, base)
    return (r.value, True) if r is not None else (paired.unpaired_speed_ratio(ours, base), False)


def clock_range(ms: Sequence[Measurement]) -> dict[str, Any]:
    """The SM clock over the rounds (probe before each call: min, median, max) and NVML's readings before and
    after them, from the measurements of one workload."""
    probe = sorted(c for m in ms for c in m.clock_mhz)
    first = next((m for m in ms if m.available), None)
    return {
        "probe_mhz": [_r(probe[0]), _r(probe[len(probe) // 2]), _r(probe[-1])] if probe else None,
        "start": dict(first.clocks_start) if first else {},
        "end": dict(first.clocks) if first else {},
        "locked": False,  # the harness never locks clocks (shared machine)
    }


def row(m: Measurement, ours: Measurement | None, anchor: Anchor | None = None, judged: bool = False
        ) -> dict[str, Any]:
    """One table row: a backend's median, spread and throughput (absolute: drift-sensitive, not judged), and
    FlashCore's paired speed relative to it with that ratio's spread (`judged`: a gate judges this ratio)."""
    s = m.summary
    is_base = ours is not None and m.backend != OURS
    value, is_paired = speed(ours, m) if is_base else (None, False)
    r = paired.speed_ratio(ours, m) if is_base and ours is not None else None
    ref = anchor.value(m.backend) if anchor is not None else None
    probe = sorted(m.clock_mhz)
    return {
        "backend": m.backend,
        "label": BACKENDS.get(m.backend, m.backend),
        "available": m.available,
        "why": m.why,
        "median_ms": _r(s.median_ms) if s else None,
        "p20_ms": _r(s.p20_ms) if s else None,
        "p80_ms": _r(s.p80_ms) if s else None,
        "rel_std": _r(s.rel_std, 3) if s else None,  # absolute, drift-sensitive: shown, not judged
        "reps": s.reps if s else 0,
        "throughput": _r(m.throughput),
        "ours_speedup": _r(value, 4),  # FlashCore speed / this backend's speed
        "paired": is_paired,
        "ratio_rel_std": _r(r.rel_std, 3) if r else None,  # the paired ratio's run-to-run spread
        "ratio_clock_dependence": _r(r.clock_dependence, 3) if r and r.clock_dependence is not None else None,
        "ratio_fixed_clock_rel_std": _r(r.fixed_clock_rel_std, 3) if r and r.fixed_clock_rel_std is not None
        else None,
        "judged": judged,
        "anchor": ref,
        "vs_anchor": _r(m.throughput / ref - 1, 3) if ref and m.throughput is not None else None,
        "sm_mhz": _r(probe[len(probe) // 2]) if probe else m.clocks.get("sm_mhz"),
        "sm_mhz_range": [_r(probe[0]), _r(probe[-1])] if probe else None,
        # the median probe after the call (long calls only): how far the clock fell within it
        "sm_mhz_after": _r(statistics.median(m.clock_after_mhz)) if m.clock_after_mhz else None,
        "implementation": m.implementation,
        "kernels": list(m.kernels),
        "planted": m.planted,
    }


def workload_table(wl: Workload, ms: Sequence[Measurement], anchor: Anchor | None = None,
                   judged: Sequence[str] = ()) -> dict[str, Any]:
    ours = next((m for m in ms if m.backend == OURS), None)
    unit = ms[0].unit if ms else "TFLOPS"
    pairing = next((m.pairing for m in ms if m.paired), "")
    return {"name": wl.name, "shape": wl.label, "kind": wl.kind, "unit": unit, "pairing": pairing,
            "rounds": next((m.summary.reps for m in ms if m.paired and m.summary), None),
            # sequential rounds (harness/bench/extend.py): the base every call ran, and whether this workload's
            # judged ratios spread enough after it to get extension rounds
            "base_rounds": next((m.base_rounds for m in ms if m.paired and m.base_rounds), None),
            "extended": any(m.extended for m in ms),
            "clocks": clock_range(ms), "rows": [row(m, ours, anchor, m.backend in judged) for m in ms]}


def not_available(ms: Iterable[Measurement]) -> list[dict[str, str]]:
    return [{"workload": m.workload, "backend": m.backend, "label": BACKENDS.get(m.backend, m.backend),
             "why": m.why} for m in ms if not m.available]


def ratio_chart(workloads: Sequence[str], by_wl: Mapping[str, Mapping[str, Measurement]], baselines: Sequence[str],
                title: str, threshold: float | None, prefix: str) -> tuple[str | None, str]:
    """(svg or None, note): grouped bars of FlashCore's speed relative to each baseline, per workload."""
    ratios: dict[str, list[float | None]] = {}
    for b in baselines:
        ratios[b] = []
        for w in workloads:
            ratios[b].append(speed(by_wl[w].get(OURS), by_wl[w].get(b))[0])
    try:
        return plots.ratio_bars(list(workloads), ratios, title, threshold, prefix), ""
    except plots.PlotUnavailable as e:
        return None, str(e)


def seqlen_chart(sweep: Sequence[Workload], by_wl: Mapping[str, Mapping[str, Measurement]], backends: Sequence[str],
                 prefix: str) -> tuple[str | None, str]:
    """(svg or None, note): TFLOPS against sequence length, a line per backend, a panel per causal mode."""
    panels: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for wl in sweep:
        panel = panels.setdefault("causal" if wl.causal else "non-causal", {b: [] for b in backends})
        for b in backends:
            m = by_wl.get(wl.name, {}).get(b)
            if m is not None and m.tflops is not None:
                panel[b].append((wl.seqlen_q, m.tflops))
    if not any(pts for p in panels.values() for pts in p.values()):
        return None, "no sweep point was measured"
    try:
        return plots.throughput_vs_seqlen(panels, prefix=prefix), ""
    except plots.PlotUnavailable as e:
        return None, str(e)


# ---- compact text table (make bench) ------------------------------------------------------------------


def _cell(x: float | None, fmt: str = "{:.1f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def text_table(workloads: Sequence[Workload], by_wl: Mapping[str, Mapping[str, Measurement]],
               backends: Sequence[str], anchors: Mapping[str, Anchor | None] | None = None) -> str:
    """Throughput per backend (absolute), FlashCore's paired speed relative to each baseline, the worst spread
    of those ratios (what the gates judge), the worst absolute spread and the SM clock range (both drift with
    the clock: information), and, where the ROADMAP has an anchor for the shape, each baseline against it."""
    baselines = [b for b in backends if b != OURS]
    name_w = max([8, *(len(w.name) for w in workloads)])
    head = (f"{'workload':<{name_w}}  {'unit':<6}" + "".join(f"  {b:>9}" for b in backends)
            + "".join(f"  {'/' + b:>9}" for b in baselines) + f"  {'ratio sd':>8}  {'abs sd':>7}  {'SM MHz':>9}")
    lines = [head, "-" * len(head)]
    notes: list[str] = []
    unpaired = False
    for wl in workloads:
        ms = by_wl.get(wl.name, {})
        ours = ms.get(OURS)
        unit = next(iter(ms.values())).unit if ms else "TFLOPS"
        fmt = "{:.3f}" if unit == "TB/s" else "{:.1f}"
        cells = [_cell(ms[b].throughput, fmt) if b in ms else "-" for b in backends]
        ratios = []
        for b in baselines:
            value, is_paired = speed(ours, ms.get(b))
            unpaired |= value is not None and not is_paired
            ratios.append("-" if b not in ms else _cell(value, "{:.2f}x" if is_paired else "{:.2f}x*"))
        pr = [paired.speed_ratio(ours, ms[b]) for b in baselines if ours is not None and b in ms]
        ratio_sd = [r.rel_std for r in pr if r is not None]
        abs_sd = [m.summary.rel_std for m in ms.values() if m.summary is not None]
        probe = sorted(c for m in ms.values() for c in m.clock_mhz)
        clock = f"{probe[0]:.0f}-{probe[-1]:.0f}" if probe else "n/a"
        lines.append(f"{wl.name:<{name_w}}  {unit:<6}" + "".join(f"  {c:>9}" for c in cells)
                     + "".join(f"  {r:>9}" for r in ratios)
                     + f"  {_cell(100 * max(ratio_sd), '{:.2f}%') if ratio_sd else 'n/a':>8}"
                     + f"  {_cell(100 * max(abs_sd), '{:.2f}%') if abs_sd else 'n/a':>7}  {clock:>9}")
        anchor = (anchors or {}).get(wl.name)
        if anchor is not None:
            parts = []
            for b in ("fa2", "cudnn", "fa3"):
                m, ref = ms.get(b), anchor.value(b)
                if m is not None and m.throughput is not None and ref:
                    parts.append(f"{b} {m.throughput:.4g} vs {ref:g} ({100 * (m.throughput / ref - 1):+.1f} %)")
            if parts:
                notes.append(f"  {wl.name}: " + ", ".join(parts))
        notes.extend(f"  {wl.name} {m.backend}: not available: {m.why}" for m in ms.values() if not m.available)
    lines += ["columns: median throughput of all repetitions (TFLOPS; TB/s of K+V for memory-bound): absolute,",
              "  drifts with the SM clock (not locked: shared machine); /b = FlashCore speed / b's, paired: median",
              "  of the per-round ratios of interleaved rounds; ratio sd = worst run-to-run relative std of those",
              "  ratios (what the gates judge); abs sd = worst relative std of the absolute times (not judged);",
              "  SM MHz = the clock over the rounds (probe before each call)"]
    if unpaired:
        lines.append("* unpaired (an older record without rounds): ratio of medians, never judged")
    anchored = [n for n in notes if " vs " in n]
    missing = [n for n in notes if "not available" in n]
    if anchored:
        lines += ["", "baselines against the ROADMAP anchors (measured vs anchor; absolute, clock-dependent):",
                  *anchored]
    if missing:
        lines += ["", "not available:", *missing]
    return "\n".join(lines)
