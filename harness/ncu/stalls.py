"""Warp-stall breakdown of one kernel from ncu metrics, sorted, and its change against a stored baseline run.

The stall metrics are the columns whose name matches a regex from gates/phases.yaml, its first group (or the
group named `reason`) being the stall reason. With the WarpStateStats section, ncu 2025.3 names them
`smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`: the average number of warps stalled for
that reason per issue cycle. Their sum is the warp latency per issued instruction
(`smsp__average_warp_latency_per_inst_issued.ratio`), so each value reads as "cycles per issued instruction
spent in this state"; `selected` is the issuing cycle itself (1.0 when issue is never blocked).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.ncu.parse import Kernel
from harness.stored_file import XzError, stored_text


@dataclass(frozen=True)
class Stall:
    reason: str
    value: float | None  # median over the kernel's launches; None where ncu gave no number
    baseline: float | None = None  # the same reason in the baseline run, when one is stored

    @property
    def delta(self) -> float | None:
        if self.value is None or self.baseline is None:
            return None
        return self.value - self.baseline

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "value": self.value, "baseline": self.baseline, "delta": self.delta}


def stall_columns(columns: Sequence[str], pattern: str) -> dict[str, str]:
    """Stall metric column -> reason, for every column that matches `pattern` (a regex with one group)."""
    rx = re.compile(pattern)
    group: str | int = "reason" if "reason" in rx.groupindex else 1
    found: dict[str, str] = {}
    for column in columns:
        m = rx.fullmatch(column)
        if m:
            found[column] = m.group(group)
    return found


def stall_table(kernel: Kernel, columns: Sequence[str], pattern: str,
                baseline: Mapping[str, float | None] | None = None) -> list[Stall]:
    """Every stall reason of `kernel`, largest first (reasons without a number last, by name)."""
    base = baseline or {}
    rows = [Stall(reason, kernel.median(column), base.get(reason))
            for column, reason in stall_columns(columns, pattern).items()]
    return sorted(rows, key=lambda s: (s.value is None, -(s.value or 0.0), s.reason))


def total(stalls: Sequence[Stall]) -> float | None:
    values = [s.value for s in stalls if s.value is not None]
    return sum(values) if values else None


@dataclass(frozen=True)
class Baseline:
    """Stall values of a stored run, by workload then reason. `status`: loaded, missing or unreadable."""

    path: str
    status: str
    message: str
    run_id: str = ""
    workloads: Mapping[str, Mapping[str, float | None]] | None = None

    def for_workload(self, name: str) -> Mapping[str, float | None] | None:
        return (self.workloads or {}).get(name)


def baseline_from_results(data: Any, gate: str, path: str) -> Baseline:
    """The stall tables that `gate` recorded in a results.json (schema flashcore.run/1). Pure."""
    if not isinstance(data, dict) or not isinstance(data.get("gates"), list):
        return Baseline(path, "unreadable", f"{path} is not a results.json (no `gates` list)")
    entry = next((g for g in data["gates"] if isinstance(g, dict) and g.get("name") == gate), None)
    workloads = ((entry or {}).get("details") or {}).get("workloads")
    if not isinstance(workloads, dict):
        return Baseline(path, "unreadable", f"{path} holds no `{gate}` gate with recorded workloads")
    tables: dict[str, dict[str, float | None]] = {}
    for name, wl in workloads.items():
        rows = wl.get("stalls") if isinstance(wl, dict) else None
        if isinstance(rows, list):
            tables[name] = {r["reason"]: r.get("value") for r in rows if isinstance(r, dict) and "reason" in r}
    run_id = str(data.get("run_id", ""))
    return Baseline(path, "loaded", f"compared with run {run_id or '?'} ({path})", run_id, tables)


def read_baseline(path: Path, shown: str, gate: str) -> Baseline:
    """Load a stored results.json (or .json.xz, as reports/evidence/ keeps runs: harness/stored_file.py); a missing
    file is status `missing`, a broken one `unreadable`."""
    if not path.is_file():
        return Baseline(shown, "missing", f"no baseline stored at {shown}: commit a run's results.json there "
                        "to compare the next runs with it")
    try:
        data = json.loads(stored_text(path))
    except (OSError, ValueError, *XzError) as e:
        return Baseline(shown, "unreadable", f"baseline {shown} cannot be read: {e}")
    return baseline_from_results(data, gate, shown)
