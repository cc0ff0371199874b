"""The history of gate runs: one SQLite file (stdlib sqlite3; default reports/history.sqlite) that every
`make gate-phaseN` appends to, and that stored runs (results.json files, e.g. CI artifacts or reports/evidence/)
can be imported into. A run is keyed by its run id, so importing the same file twice changes nothing.

Per run: commit, GPU, driver, torch, phase, verdict, wall time. Per gate: verdict and time. Per check with a number:
the measured value, the threshold and the status; a ratio's judged spread (its `rel_std[...]` check) is stored next
to it, so `python -m harness history` can tell a change from run-to-run noise.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.results import gate_work_seconds

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY, started_at TEXT NOT NULL, phase INTEGER NOT NULL, status TEXT NOT NULL,
  elapsed_s REAL, git_commit TEXT, gpu TEXT, gpu_uuid TEXT, driver TEXT, torch TEXT, source TEXT);
CREATE TABLE IF NOT EXISTS gates (
  run_id TEXT NOT NULL REFERENCES runs(run_id), gate TEXT NOT NULL, phase INTEGER NOT NULL, status TEXT NOT NULL,
  elapsed_s REAL, PRIMARY KEY (run_id, gate));  -- GPU seconds: a gate run in parts, the sum of their wall times
CREATE TABLE IF NOT EXISTS checks (
  run_id TEXT NOT NULL REFERENCES runs(run_id), gate TEXT NOT NULL, workload TEXT NOT NULL, metric TEXT NOT NULL,
  value REAL, threshold REAL, status TEXT NOT NULL, rel_std REAL, PRIMARY KEY (run_id, gate, workload, metric));
CREATE INDEX IF NOT EXISTS checks_series ON checks (gate, workload, metric);
"""


class HistoryError(Exception):
    """A history file or a stored run that cannot be used: the path and why."""


@dataclass(frozen=True)
class Point:
    """One value of a series: the run that measured it and its judged spread (None when it has none)."""

    run_id: str
    started_at: str
    git_commit: str
    gpu: str
    value: float
    rel_std: float | None
    status: str


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


def open_db(path: Path) -> sqlite3.Connection:
    """The history at `path` (created with its parent directory); refuses a file of another schema version."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        db = sqlite3.connect(path)
        db.executescript(_SCHEMA)
        row = db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.DatabaseError as e:
        raise HistoryError(f"{path}: not a FlashCore history file ({e})") from None
    if row is None:
        db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        db.commit()
    elif row[0] != str(SCHEMA_VERSION):
        db.close()
        raise HistoryError(f"{path}: history schema {row[0]}, this harness writes {SCHEMA_VERSION} (move the file "
                           "aside to start a new one)")
    return db


def _spreads(checks: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """(workload, metric) -> the judged spread its `rel_std[metric]` check measured."""
    out = {}
    for c in checks:
        metric = str(c.get("metric", ""))
        if metric.startswith("rel_std[") and metric.endswith("]") and (v := _number(c.get("measured"))) is not None:
            out[(str(c.get("workload", "")), metric[8:-1])] = v
    return out


def record(db: sqlite3.Connection, results: Mapping[str, Any], source: str) -> bool:
    """Append one run (a results.json's content); False when the run id is already there (nothing changes)."""
    for key in ("run_id", "started_at", "phase", "status", "gates"):
        if key not in results:
            raise HistoryError(f"{source}: not a results.json of make gate-phaseN (no `{key}`)")
    run_id = str(results["run_id"])
    if db.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
        return False
    env = results.get("environment") or {}
    with db:
        db.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (run_id, str(results["started_at"]), int(results["phase"]), str(results["status"]),
                    _number(results.get("elapsed_s")), env.get("git_commit"), env.get("gpu"), env.get("gpu_uuid"),
                    env.get("driver"), env.get("torch"), source))
        for g in results["gates"]:
            db.execute("INSERT OR REPLACE INTO gates VALUES (?, ?, ?, ?, ?)",
                       (run_id, str(g.get("name")), int(g.get("phase", 0)), str(g.get("status")),
                        _number(gate_work_seconds(g))))
            checks = g.get("checks") or []
            spreads = _spreads(checks)
            for c in checks:
                value = _number(c.get("measured"))
                if value is None:
                    continue
                workload, metric = str(c.get("workload", "")), str(c.get("metric", ""))
                db.execute("INSERT OR REPLACE INTO checks VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                           (run_id, str(g.get("name")), workload, metric, value, _number(c.get("threshold")),
                            str(c.get("status")), spreads.get((workload, metric))))
    return True


def import_file(db: sqlite3.Connection, path: Path) -> bool:
    """Append the run of a results.json, or of an xz-compressed one (`.json.xz`, as reports/evidence/ keeps them),
    read as every reader reads a stored run: its statuses recomputed from its checks, a file they contradict refused
    (harness/render/stored.py), a summary's whole run read from its sidecar."""
    from harness.render.stored import StoredRunError, read_run  # late: the renderers import the history's report

    try:
        run = read_run(path)
    except StoredRunError as e:
        raise HistoryError(str(e)) from None
    return record(db, run.to_dict(), str(path))


def series(db: sqlite3.Connection, gate: str, workload: str, metric: str, last: int) -> list[Point]:
    """The last `last` values of one (gate, workload, metric), oldest first."""
    rows = db.execute(
        "SELECT r.run_id, r.started_at, COALESCE(r.git_commit, ''), COALESCE(r.gpu, ''), c.value, c.rel_std, "
        "c.status FROM checks c JOIN runs r USING (run_id) WHERE c.gate = ? AND c.workload = ? AND c.metric = ? "
        "ORDER BY r.started_at DESC, r.run_id DESC LIMIT ?", (gate, workload, metric, last)).fetchall()
    return [Point(*row) for row in reversed(rows)]


def series_keys(db: sqlite3.Connection, metric_prefixes: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """Every (gate, workload, metric) whose metric starts with one of the prefixes."""
    rows = db.execute("SELECT DISTINCT gate, workload, metric FROM checks ORDER BY gate, workload, metric").fetchall()
    return [(g, w, m) for g, w, m in rows if m.startswith(metric_prefixes)]


def runs(db: sqlite3.Connection, last: int) -> list[tuple[str, str, int, str, float | None, str, str]]:
    """The last runs, oldest first: run id, start, phase, verdict, seconds, commit, GPU."""
    rows = db.execute("SELECT run_id, started_at, phase, status, elapsed_s, COALESCE(git_commit, ''), "
                      "COALESCE(gpu, '') FROM runs ORDER BY started_at DESC, run_id DESC LIMIT ?", (last,)).fetchall()
    return list(reversed(rows))


def gate_times(db: sqlite3.Connection, run_ids: Iterable[str]) -> dict[str, dict[str, float]]:
    """Per gate, its wall time in each of these runs that ran it: gate -> {run id: seconds}."""
    ids = list(run_ids)
    out: dict[str, dict[str, float]] = {}
    if not ids:
        return out
    marks = ", ".join("?" * len(ids))
    for run_id, gate, secs in db.execute(f"SELECT run_id, gate, elapsed_s FROM gates WHERE run_id IN ({marks}) "
                                         "AND elapsed_s IS NOT NULL ORDER BY gate", ids):
        out.setdefault(gate, {})[run_id] = secs
    return out


def latest_gate_seconds(db: sqlite3.Connection) -> dict[str, float]:
    """Each gate's wall time in the newest run that ran it."""
    rows = db.execute("SELECT g.gate, g.elapsed_s FROM gates g JOIN runs r USING (run_id) WHERE g.elapsed_s IS NOT "
                      "NULL ORDER BY r.started_at, r.run_id").fetchall()
    return {gate: float(secs) for gate, secs in rows}
