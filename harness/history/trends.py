"""What `python -m harness history` prints: the last runs, and per series (gate, workload, metric) its last values
with a flag where the newest value moved beyond the run-to-run spread (gates/history.yaml)."""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.history.store import Point, runs, series, series_keys
from harness.schema import ConfigError, read_yaml

HISTORY_FILE = "history.yaml"
_KEYS = ("file", "last", "metrics", "flag_sigmas", "flag_min_change", "plots")


@dataclass(frozen=True)
class PlotPanel:
    """One panel of the report's trend plots: a line per (gate, workload) whose metric starts with one of `metrics`
    (`elapsed_s` alone: each gate's wall time)."""

    title: str
    metrics: tuple[str, ...]


@dataclass(frozen=True)
class HistorySettings:
    file: str  # repository-relative SQLite path
    last: int  # runs shown per series
    metrics: tuple[str, ...]  # metric-name prefixes shown
    flag_sigmas: float  # a change beyond this many combined spreads is flagged
    flag_min_change: float  # relative change flagged on a series without a spread
    plots: tuple[PlotPanel, ...] = ()  # the HTML report's trend panels


def load_history_settings(gates_dir: Path) -> HistorySettings:
    file = gates_dir / HISTORY_FILE
    data = read_yaml(file, _KEYS)

    def positive(key: str, integer: bool) -> Any:
        v = data.get(key)
        if isinstance(v, bool) or not isinstance(v, int if integer else int | float) or v <= 0:
            raise ConfigError(file, key, v, "an int > 0" if integer else "a number > 0")
        return v

    path = data.get("file")
    if not isinstance(path, str) or not path.endswith((".sqlite", ".db")):
        raise ConfigError(file, "file", path, "a repository-relative .sqlite path")
    metrics = data.get("metrics")
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) and m for m in metrics):
        raise ConfigError(file, "metrics", metrics, "a non-empty list of metric-name prefixes")
    sigmas, change = positive("flag_sigmas", False), positive("flag_min_change", False)
    return HistorySettings(path, positive("last", True), tuple(metrics), float(sigmas), float(change),
                           _plots(file, data.get("plots")))


def _plots(file: Path, raw: Any) -> tuple[PlotPanel, ...]:
    if not isinstance(raw, list):
        raise ConfigError(file, "plots", raw, "a list of {title, metrics} panels")
    out = []
    for i, p in enumerate(raw):
        where = f"plots[{i}]"
        if not isinstance(p, dict) or set(p) != {"title", "metrics"}:
            raise ConfigError(file, where, p, "a mapping with exactly title and metrics")
        title, metrics = p["title"], p["metrics"]
        if not isinstance(title, str) or not title.strip():
            raise ConfigError(file, f"{where}.title", title, "a non-empty string")
        if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) and m for m in metrics):
            raise ConfigError(file, f"{where}.metrics", metrics, "a non-empty list of metric-name prefixes")
        if "elapsed_s" in metrics and metrics != ["elapsed_s"]:
            raise ConfigError(file, f"{where}.metrics", metrics, "elapsed_s (the gates' wall time) stands alone")
        out.append(PlotPanel(title, tuple(metrics)))
    return tuple(out)


@dataclass(frozen=True)
class Trend:
    gate: str
    workload: str
    metric: str
    points: list[Point]
    flag: str | None  # why the newest value is flagged; None when it is within the spread (or has no predecessor)


def change_flag(prev: Point, new: Point, settings: HistorySettings) -> str | None:
    """Flag the newest value when it moved beyond the run-to-run spread of the two runs (on the same GPU)."""
    if prev.gpu != new.gpu or prev.value == 0:
        return None
    change = new.value / prev.value - 1.0
    if prev.rel_std is not None and new.rel_std is not None:
        limit = settings.flag_sigmas * math.hypot(prev.rel_std, new.rel_std)
        why = f"{settings.flag_sigmas:g} x the combined spread {math.hypot(prev.rel_std, new.rel_std):.2%}"
    else:
        limit, why = settings.flag_min_change, "the limit for series without a spread"
    if abs(change) <= limit:
        return None
    return f"{change:+.2%} since {prev.git_commit[:7] or prev.run_id} (beyond {why})"


def trends(db: sqlite3.Connection, settings: HistorySettings, gate: str | None = None,
           workload: str | None = None) -> list[Trend]:
    out = []
    for g, w, m in series_keys(db, settings.metrics):
        if (gate and g != gate) or (workload and w != workload):
            continue
        pts = series(db, g, w, m, settings.last)
        flag = change_flag(pts[-2], pts[-1], settings) if len(pts) >= 2 else None
        out.append(Trend(g, w, m, pts, flag))
    return out


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def render(db: sqlite3.Connection, settings: HistorySettings, gate: str | None, workload: str | None,
           flagged_only: bool) -> str:
    lines = []
    recent = runs(db, settings.last)
    lines.append(f"last {len(recent)} runs (oldest first):")
    for run_id, started, phase, status, secs, commit, gpu in recent:
        took = f"{secs:.0f}s" if secs is not None else "?"
        lines.append(f"  {started}  {commit[:7] or '-':7}  phase {phase}  {status.upper():5}  {took:>6}  {gpu}"
                     f"  {run_id}")
    rows = [t for t in trends(db, settings, gate, workload) if t.flag or not flagged_only]
    lines.append("")
    if not rows:
        lines.append("no series" + (" flagged" if flagged_only else "") + " (metrics: "
                     + ", ".join(settings.metrics) + ")")
        return "\n".join(lines)
    width = max(len(f"{t.gate} {t.workload} {t.metric}") for t in rows)
    lines.append(f"{'series':<{width}}  values, oldest first (newest last; * = not a pass)")
    for t in rows:
        values = " ".join(_fmt(p.value) + ("" if p.status == "pass" else "*") for p in t.points)
        lines.append(f"{t.gate} {t.workload} {t.metric}".ljust(width) + f"  {values}")
        if t.flag:
            lines.append(" " * width + f"  ^ CHANGED {t.flag}")
    flagged = sum(1 for t in rows if t.flag)
    lines.append(f"\n{len(rows)} series, {flagged} flagged")
    return "\n".join(lines)
