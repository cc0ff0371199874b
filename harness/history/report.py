"""The report's trend section: the last runs on this GPU from the history, as panels of lines (gates/history.yaml
`plots`: per panel, the metric-name prefixes it draws, one line per gate and workload; `elapsed_s`: each gate's wall
time) and the series whose newest value (this run's) moved beyond the run-to-run spread (trends.change_flag).

Built by the gate command after it appended the run, handed to the HTML renderer; never raises (a history problem
must not cost the report)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from harness.history import store
from harness.history.trends import HistorySettings, PlotPanel, trends

GATE_TIME = "elapsed_s"  # the pseudo-metric of a panel that draws each gate's wall time


@dataclass(frozen=True)
class Panel:
    title: str
    lines: dict[str, list[float | None]]  # "gate · workload" -> one value per run (None: not measured there)


@dataclass(frozen=True)
class TrendReport:
    path: str
    gpu: str
    runs: list[str]  # x labels, oldest first: short commit (or run id)
    panels: list[Panel] = field(default_factory=list)
    flags: list[tuple[str, str]] = field(default_factory=list)  # (series, why) moved in this run
    note: str = ""  # why there is nothing to draw


def _label(gate: str, workload: str) -> str:
    return f"{gate} · {workload}" if workload else gate


def _panel(db: sqlite3.Connection, spec: PlotPanel, run_ids: list[str], last: int) -> Panel:
    lines: dict[str, list[float | None]] = {}
    if spec.metrics == (GATE_TIME,):
        for gate, secs in store.gate_times(db, run_ids).items():
            lines[gate] = [secs.get(r) for r in run_ids]
    else:
        for gate, workload, metric in store.series_keys(db, spec.metrics):
            by_run = {p.run_id: p.value for p in store.series(db, gate, workload, metric, 10 * last)}
            values = [by_run.get(r) for r in run_ids]
            if any(v is not None for v in values):
                lines[_label(gate, workload) + ("" if len(spec.metrics) == 1 else f" {metric.split('.')[0]}")] = \
                    values
    return Panel(spec.title, {k: v for k, v in lines.items() if sum(x is not None for x in v) >= 1})


def trend_report(path: Path, settings: HistorySettings, run_id: str, gpu: str) -> TrendReport:
    """The last `settings.last` runs on `gpu` (this run the newest) and the flags of this run's values."""
    try:
        db = store.open_db(path)
    except (store.HistoryError, OSError, sqlite3.Error) as e:
        return TrendReport(str(path), gpu, [], note=f"history unreadable: {e}")
    try:
        rows = db.execute("SELECT run_id, COALESCE(git_commit, '') FROM runs WHERE COALESCE(gpu, '') = ? "
                          "ORDER BY started_at DESC, run_id DESC LIMIT ?", (gpu, settings.last)).fetchall()
        rows.reverse()
        run_ids = [r for r, _ in rows]
        if len(run_ids) < 2:
            return TrendReport(str(path), gpu, [c[:7] or r for r, c in rows],
                               note=f"{len(run_ids)} run on {gpu or 'this GPU'} in the history: a trend needs two")
        panels = [_panel(db, spec, run_ids, settings.last) for spec in settings.plots]
        flags = [(f"{_label(t.gate, t.workload)} {t.metric}", t.flag) for t in trends(db, settings)
                 if t.flag and t.points[-1].run_id == run_id]
        return TrendReport(str(path), gpu, [c[:7] or r for r, c in rows], [p for p in panels if p.lines], flags)
    except sqlite3.Error as e:
        return TrendReport(str(path), gpu, [], note=f"history unreadable: {e}")
    finally:
        db.close()
