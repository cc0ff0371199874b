"""Measurements -> what a person reads: the rows of the report's per-workload tables (JSON-able dicts for
the section templates), the charts, and the compact text table of `make bench` (pure, apart from matplotlib)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.bench import plots
from harness.bench.record import Measurement
from harness.bench.settings import BACKENDS, OURS, Anchor
from harness.config import Workload
from harness.gates.perf_verdict import speed_ratio


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else float(f"{x:.{digits}g}")


def row(m: Measurement, ours: Measurement | None, anchor: Anchor | None = None) -> dict[str, Any]:
    """One table row: a backend's median, spread, throughput and FlashCore's speed relative to it."""
    s = m.summary
    ratio = speed_ratio(ours, m) if ours is not None and m.backend != OURS else None
    ref = anchor.value(m.backend) if anchor is not None else None
    return {
        "backend": m.backend,
        "label": BACKENDS.get(m.backend, m.backend),
        "available": m.available,
        "why": m.why,
        "median_ms": _r(s.median_ms) if s else None,
        "p20_ms": _r(s.p20_ms) if s else None,
        "p80_ms": _r(s.p80_ms) if s else None,
        "rel_std": _r(s.rel_std, 3) if s else None,
        "reps": s.reps if s else 0,
        "throughput": _r(m.throughput),
        "ours_speedup": _r(ratio, 3),  # FlashCore speed / this backend's speed
        "anchor": ref,
        "vs_anchor": _r(m.throughput / ref - 1, 3) if ref and m.throughput is not None else None,
        "sm_mhz": m.clocks.get("sm_mhz"),
        "implementation": m.implementation,
        "kernels": list(m.kernels),
        "planted": m.planted,
    }


def workload_table(wl: Workload, ms: Sequence[Measurement], anchor: Anchor | None = None) -> dict[str, Any]:
    ours = next((m for m in ms if m.backend == OURS), None)
    unit = ms[0].unit if ms else "TFLOPS"
    return {"name": wl.name, "shape": wl.label, "kind": wl.kind, "unit": unit,
            "rows": [row(m, ours, anchor) for m in ms]}


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
            ours, base = by_wl[w].get(OURS), by_wl[w].get(b)
            ratios[b].append(speed_ratio(ours, base) if ours and base else None)
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
    """Throughput per backend, FlashCore's speed relative to each baseline, the worst spread, and (where the
    ROADMAP has an anchor for the shape) each baseline's deviation from it."""
    baselines = [b for b in backends if b != OURS]
    name_w = max([8, *(len(w.name) for w in workloads)])
    head = (f"{'workload':<{name_w}}  {'unit':<6}" + "".join(f"  {b:>9}" for b in backends)
            + "".join(f"  {'/' + b:>9}" for b in baselines) + f"  {'rel std':>7}")
    lines = [head, "-" * len(head)]
    notes: list[str] = []
    for wl in workloads:
        ms = by_wl.get(wl.name, {})
        ours = ms.get(OURS)
        unit = next(iter(ms.values())).unit if ms else "TFLOPS"
        fmt = "{:.3f}" if unit == "TB/s" else "{:.1f}"
        cells = [_cell(ms[b].throughput, fmt) if b in ms else "-" for b in backends]
        ratios = [_cell(speed_ratio(ours, ms[b]), "{:.2f}x") if ours and b in ms else "-" for b in baselines]
        spreads = [m.summary.rel_std for m in ms.values() if m.summary is not None]
        worst = _cell(100 * max(spreads), "{:.2f}%") if spreads else "n/a"
        lines.append(f"{wl.name:<{name_w}}  {unit:<6}" + "".join(f"  {c:>9}" for c in cells)
                     + "".join(f"  {r:>9}" for r in ratios) + f"  {worst:>7}")
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
    lines.append("columns: median throughput (TFLOPS, TB/s of K+V for memory-bound); /b = FlashCore speed / b's;"
                 " rel std = worst relative std of the repetitions")
    anchored = [n for n in notes if " vs " in n]
    missing = [n for n in notes if "not available" in n]
    if anchored:
        lines += ["", "baselines against the ROADMAP anchors (measured vs anchor):", *anchored]
    if missing:
        lines += ["", "not available:", *missing]
    return "\n".join(lines)
