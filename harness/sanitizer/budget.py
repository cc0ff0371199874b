"""A gate-level time budget for a series of sanitizer runs: a run never outlives it, and what it left out is named.

Each run's timeout is its own per-run timeout or what is left of the budget, whichever is shorter. A run the
budget cut short is an ERROR (it has no verdict), every run not started is NOT_RUN, and one `budget_s` check
turns the gate into an ERROR whenever any run was cut or left out: a spent budget is never a silent pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.results import Check, Status

SUBJECT = "(all runs)"  # the budget check's workload column: it judges the gate's runs together


@dataclass
class Budget:
    total_s: float
    clock: Callable[[], float] = time.monotonic
    start: float = field(init=False)

    def __post_init__(self) -> None:
        self.start = self.clock()

    def spent(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return self.total_s - self.spent()

    def timeout(self, per_run_s: float) -> tuple[float, bool]:
        """(timeout for the next run, True when the budget rather than `per_run_s` limits it)."""
        left = self.left()
        return (left, True) if left < per_run_s else (per_run_s, False)

    def cut_message(self, wall_s: float) -> str:
        return (f"stopped after {wall_s:.1f} s: the gate's budget_s ({self.total_s:g} s) ran out during this run "
                "(no verdict; raise budget_s or drop workloads in gates/phases.yaml)")

    def not_run_message(self) -> str:
        return f"not run: the gate's budget_s ({self.total_s:g} s) was spent before this run could start"


def not_run_check(budget: Budget, tool: str, workload: str) -> Check:
    return Check(workload, tool, None, None, Status.NOT_RUN, "==", message=budget.not_run_message())


def budget_check(budget: Budget, cut: list[str], not_run: list[str]) -> Check:
    """PASS when every planned run finished inside the budget; else ERROR naming what was cut or left out."""
    spent = budget.spent()
    if not cut and not not_run:
        return Check(SUBJECT, "budget_s", budget.total_s, round(spent, 1), Status.PASS, "<=",
                     margin=round(budget.total_s - spent, 1), message=f"all runs finished in {spent:.0f} s")
    return Check(SUBJECT, "budget_s", budget.total_s, round(spent, 1), Status.ERROR, "<=",
                 margin=round(budget.total_s - spent, 1), message=summary(budget, cut, not_run))


def summary(budget: Budget, cut: list[str], not_run: list[str]) -> str:
    """'budget_s 2400 s spent: 1 run cut short (racecheck prefill-d128), 3 not run: racecheck s1, ... (+1 more)'."""
    parts = [f"budget_s {budget.total_s:g} s spent"]
    if cut:
        parts.append(f"{len(cut)} run{'s' if len(cut) > 1 else ''} cut short ({', '.join(cut)})")
    if not_run:
        shown = ", ".join(not_run[:3]) + (f" (+{len(not_run) - 3} more)" if len(not_run) > 3 else "")
        parts.append(f"{len(not_run)} not run: {shown}")
    return "; ".join(parts)
