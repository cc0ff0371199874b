"""The number and label formatting every renderer shares, so each format shows the same text."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from harness.results import Check, RunResult, Status, phase_statuses

VERDICT_WORD = {
    Status.PASS: "PASS",
    Status.FAIL: "FAIL",
    Status.ERROR: "ERROR",
    Status.NOT_RUN: "NOT RUN",
    Status.NOT_APPLICABLE: "N/A",
}

OUTPUT_FILES = {"html": "index.html", "json": "results.json", "markdown": "summary.md"}


def fmt_number(x: float | int | None, sci: bool = False) -> str:
    """3 significant digits; scientific for small values (errors), large non-integers, or when sci is set."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    if x.is_integer() and abs(x) < 1e6 and not sci:
        return str(int(x))
    if sci or abs(x) < 1e-2 or abs(x) >= 1e5:
        return f"{x:.2e}"
    return f"{x:.3g}"


def fmt_margin(x: float | None, sci: bool = False) -> str:
    """Signed margin: '+' inside the threshold, '-' outside."""
    text = fmt_number(x, sci)
    return "+" + text if x is not None and x > 0 and not math.isinf(x) else text


def check_numbers(check: Check) -> tuple[str, str, str]:
    """(threshold, measured, margin) as text; scientific throughout when the threshold is (a small error)."""
    sci = check.threshold is not None and 0 < abs(check.threshold) < 1e-2
    return fmt_threshold(check), fmt_number(check.measured, sci), fmt_margin(check.margin, sci)


COMPARISON = {"<=": "≤", ">=": "≥", "==": "="}


def fmt_threshold(check: Check) -> str:
    """'≤ 2.00e-03': the comparison the measured value must satisfy, then the threshold."""
    if check.threshold is None:
        return "—"
    return f"{COMPARISON.get(check.comparison, check.comparison)} {fmt_number(check.threshold)}"


def fmt_seconds(s: float) -> str:
    if s < 60:
        return f"{s:.2f} s" if s < 10 else f"{s:.1f} s"
    minutes, seconds = divmod(round(s), 60)
    return f"{minutes}m {seconds:02d}s"


def fmt_value(v: Any) -> str:
    """An environment value as text: booleans as yes/no, lists comma-separated."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return fmt_number(v)
    if isinstance(v, list | tuple):
        return ", ".join(fmt_value(item) for item in v)
    return "—" if v is None or v == "" else str(v)


def flat_environment(env: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """Environment as (key, text) rows in insertion order; nested dicts become 'outer.inner' keys."""
    rows: list[tuple[str, str]] = []
    for key, value in env.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            rows.extend(flat_environment(value, prefix=name + "."))
        else:
            rows.append((name, fmt_value(value)))
    return rows


def is_relative_link(path: str) -> bool:
    """True for a plain relative path (what GateResult.logs holds); URLs and absolute paths are not linked."""
    return bool(path) and ":" not in path and not path.startswith(("/", "\\"))


def phase_scope(phase: int) -> str:
    """Gates are cumulative: phase N runs the gates of phases 1..N."""
    return "phase 1" if phase == 1 else f"phases 1..{phase}"


def verdict_counts(run: RunResult) -> str:
    """'3 gates: 2 pass, 1 fail' (statuses in a fixed order, zero counts left out)."""
    counts = [(s, sum(g.status is s for g in run.gates)) for s in Status]
    parts = [f"{n} {VERDICT_WORD[s].lower()}" for s, n in counts if n]
    noun = "gate" if len(run.gates) == 1 else "gates"
    return f"{len(run.gates)} {noun}: " + (", ".join(parts) if parts else "none ran")


@dataclass(frozen=True)
class PhaseSummary:
    number: int
    status: Status  # the worst of its gates
    text: str  # 'phase 4 (pipeline): 1/2 pass; perf-cudnn FAIL'


def phase_summaries(run: RunResult) -> list[PhaseSummary]:
    """One line per phase that has results, in phase order: how many of its gates passed, and which did not."""
    out = []
    for number, status in phase_statuses(run.gates).items():
        gates = [g for g in run.gates if g.phase == number]
        name = run.phase_names.get(number)
        passed = sum(g.status is Status.PASS for g in gates)
        text = f"phase {number}" + (f" ({name})" if name else "") + f": {passed}/{len(gates)} pass"
        bad = [f"{g.name} {VERDICT_WORD[g.status]}" for g in gates if g.status is not Status.PASS]
        text += "; " + ", ".join(bad) if bad else ""
        out.append(PhaseSummary(number, status, text))
    return out
