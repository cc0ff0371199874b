"""Inline SVG charts for the report (matplotlib's SVG backend, no pyplot, no global state).

Each function returns SVG text ready to sit inside the HTML (no XML prolog, element ids prefixed so two
charts on one page never share an id), or raises `PlotUnavailable` when matplotlib cannot be imported; the
report then shows its tables with a note instead. Text stays text (`svg.fonttype: none`): small files.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from typing import Any

from harness.bench.settings import BACKENDS

# One fixed colour per backend, the same in every chart.
COLORS = {"flashcore": "#d62728", "fa2": "#1f77b4", "cudnn": "#2ca02c", "efficient": "#9467bd", "fa3": "#ff7f0e",
          "flashcore-det": "#8c564b"}


class PlotUnavailable(RuntimeError):
    pass


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.figure import Figure
    except Exception as e:  # noqa: BLE001 - any import failure: tables only
        raise PlotUnavailable(f"matplotlib cannot be imported ({type(e).__name__}: {e}): tables only") from None
    return Figure(figsize=(width, height), layout="constrained")


def _svg(fig: Any, prefix: str) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": prefix}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG sits inside HTML
    text = text.replace("<svg ", '<svg style="max-width: 100%; height: auto" ', 1)  # shrink to the page width
    text = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', text)
    text = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", text)
    return re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', text)


def ratio_bars(workloads: Sequence[str], ratios: Mapping[str, Sequence[float | None]], title: str,
               threshold: float | None = None, prefix: str = "ratio") -> str:
    """Grouped bars: per workload, FlashCore speed / baseline speed for each baseline (> 1: FlashCore faster).
    `ratios[backend][i]` belongs to `workloads[i]`; None (not available) leaves a gap."""
    fig = _figure(min(12.0, max(6.0, 0.7 * len(workloads) + 2.5)), 3.8)
    ax = fig.subplots()
    shown = [b for b in ratios if any(r is not None for r in ratios[b])]
    width = 0.8 / max(1, len(shown))
    for j, backend in enumerate(shown):
        xs = [i + (j - (len(shown) - 1) / 2) * width for i in range(len(workloads))]
        ys = [r if r is not None else 0.0 for r in ratios[backend]]
        bars = ax.bar(xs, ys, width, label=f"vs {BACKENDS.get(backend, backend)}", color=COLORS.get(backend))
        ax.bar_label(bars, labels=[f"{r:.2f}" if r is not None else "n/a" for r in ratios[backend]],
                     fontsize=7, padding=1)
    top = max([r for b in shown for r in ratios[b] if r is not None], default=1.0)
    ax.set_ylim(0, max(1.2, top) * 1.3)  # headroom for the labels and the legend
    ax.axhline(1.0, color="black", linewidth=0.8)
    if threshold is not None and threshold != 1.0:
        ax.axhline(threshold, color="black", linewidth=0.8, linestyle="--", label=f"threshold {threshold:g}")
    ax.set_xticks(range(len(workloads)), workloads, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("FlashCore speed / baseline speed")
    ax.set_title(title, fontsize=10)
    if shown:
        ax.legend(fontsize=7, loc="upper left", ncols=len(shown) + 1, framealpha=0.9)
    return _svg(fig, prefix)


def throughput_vs_seqlen(panels: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]], ylabel: str = "TFLOPS",
                         prefix: str = "scaling") -> str:
    """One panel per key (e.g. "non-causal", "causal"): a line per backend of throughput against seqlen."""
    fig = _figure(min(12.0, 4.5 * max(1, len(panels))), 3.4)
    axes = fig.subplots(1, max(1, len(panels)), squeeze=False)[0]
    for ax, (title, series) in zip(axes, panels.items(), strict=False):
        for backend, points in series.items():
            if not points:
                continue
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, ys, marker="o", markersize=3, linewidth=2.2 if backend == "flashcore" else 1.2,
                    label=BACKENDS.get(backend, backend), color=COLORS.get(backend))
        ax.set_xscale("log", base=2)
        seqlens = sorted({s for pts in series.values() for s, _ in pts})
        ax.set_xticks(seqlens, [f"{s // 1024}K" if s >= 1024 else str(s) for s in seqlens], fontsize=8)
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.set_xlabel("sequence length (tokens per batch fixed; batch 1 past them)")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7, loc="lower right", framealpha=0.9)
    return _svg(fig, prefix)


def trend_lines(panels: Sequence[tuple[str, Mapping[str, Sequence[float | None]]]], runs: Sequence[str],
                prefix: str = "trend") -> str:
    """Small multiples, two per row: per panel (title, {line label: one value per run}) a line per label over the
    runs (oldest left); a missing value breaks its line."""
    cols = 2 if len(panels) > 1 else 1
    rows = -(-len(panels) // cols)
    fig = _figure(12.0 if cols == 2 else 6.5, 3.2 * max(1, rows))
    axes = fig.subplots(max(1, rows), cols, squeeze=False).flatten()
    xs = list(range(len(runs)))
    for ax, (title, lines) in zip(axes, panels, strict=False):
        for label, values in lines.items():
            ys = [float("nan") if v is None else v for v in values]
            ax.plot(xs, ys, marker="o", markersize=2.5, linewidth=1.1, label=label)
        ax.set_xticks(xs, list(runs), rotation=30, ha="right", fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(alpha=0.3)
        if len(lines) <= 12:
            ax.legend(fontsize=6, loc="best", framealpha=0.8)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    return _svg(fig, prefix)
