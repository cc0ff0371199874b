"""Result models: pure data, no I/O. Renderers (terminal, JSON, Markdown, HTML) read these."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


class Status(str, enum.Enum):
    """Verdict of one check, one gate or one run.

    ERROR means the gate could not produce a verdict (no GPU, tool missing, crash): it is never a pass.
    NOT_RUN means the gate was skipped because an earlier condition made it impossible; it also fails a run.
    NOT_APPLICABLE means the question does not arise on this host (cross-GPU determinism with one GPU): shown with
    its reason, never a pass, and left out of the run's verdict; a run of nothing else is not a pass either.
    """

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    NOT_RUN = "not_run"
    NOT_APPLICABLE = "not_applicable"

    @property
    def ok(self) -> bool:
        return self is Status.PASS


def gate_work_seconds(gate: Any) -> float | None:
    """The GPU seconds a gate took, from a results.json gate entry: the sum of its parts' wall times where it ran in
    parts at once on several GPUs (its wall time is their longest), else its wall time. The placement of the next
    run divides this by its parts; the longest part alone would under-weigh the gate by the number of parts."""
    parts = ((gate.get("details") or {}).get("parts") if isinstance(gate, dict) else None) or []
    times = [p.get("elapsed_s") for p in parts if isinstance(p, dict)]
    numbers = [float(t) for t in times if isinstance(t, int | float) and not isinstance(t, bool)]
    if times and len(numbers) == len(times):
        return sum(numbers)
    value = gate.get("elapsed_s") if isinstance(gate, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def combine(statuses: list[Status]) -> Status:
    """Worst status wins: ERROR > FAIL > NOT_RUN > PASS; NOT_APPLICABLE is left out (all of them: NOT_APPLICABLE).
    An empty list is an ERROR (nothing was checked)."""
    if not statuses:
        return Status.ERROR
    if all(s is Status.NOT_APPLICABLE for s in statuses):
        return Status.NOT_APPLICABLE
    statuses = [s for s in statuses if s is not Status.NOT_APPLICABLE]
    for worst in (Status.ERROR, Status.FAIL, Status.NOT_RUN):
        if worst in statuses:
            return worst
    return Status.PASS


def unchecked_status(status: Status) -> Status:
    """No pass without checks: a gate that made no check cannot pass (ERROR); any other status stands (a gate that
    could not run says why in its message)."""
    return Status.ERROR if status is Status.PASS else status


def gate_status(status: Status, checks: Sequence[Check]) -> Status:
    """The status a gate may carry, by the engine's rules: the worst of its checks (combine), or, without checks, its
    own unless that is a pass (unchecked_status)."""
    return combine([c.status for c in checks]) if checks else unchecked_status(status)


_HOLDS = {"<=": lambda m, t: m <= t, ">=": lambda m, t: m >= t, "==": lambda m, t: m == t}


def check_contradiction(check: Check) -> str:
    """Why a check's own numbers contradict its pass ("" when they do not): a pass whose measured value is outside
    its threshold. A fail inside it may have other reasons (its message says), so only the pass is judged."""
    holds = _HOLDS.get(check.comparison)
    if check.status is not Status.PASS or holds is None or check.measured is None or check.threshold is None:
        return ""
    if holds(check.measured, check.threshold):
        return ""
    return (f"{check.workload} {check.metric}: stored pass, but {check.measured:g} {check.comparison} "
            f"{check.threshold:g} does not hold")


def status_contradictions(gates: Sequence[GateResult]) -> list[str]:
    """Every stored status the data under it contradicts, one line each (empty: the statuses are what the engine
    would have given): a check's pass outside its threshold, a gate's status that is not gate_status of its
    checks (a pass over a failing check, a pass without any check). A phase's and the run's status are always
    recomputed from the gates (phase_statuses, RunResult.status), so a trusted gate list makes them right."""
    out = []
    for g in gates:
        out += [f"gate {g.name}: {why}" for c in g.checks if (why := check_contradiction(c))]
        want = gate_status(g.status, g.checks)
        if want is not g.status:
            given = f"{len(g.checks)} checks give {want.value}" if g.checks else f"no checks: {want.value}"
            out.append(f"gate {g.name}: stored {g.status.value}, its {given}")
    return out


def phase_statuses(gates: Sequence[GateResult]) -> dict[int, Status]:
    """Each phase's status, the worst of its gates, in phase order."""
    return {n: combine([g.status for g in gates if g.phase == n]) for n in sorted({g.phase for g in gates})}


@dataclass(frozen=True)
class Check:
    """One measured value against one threshold, for one workload.

    `margin` is signed so that positive means "inside the threshold" whatever the comparison direction.
    """

    workload: str
    metric: str
    threshold: float | None
    measured: float | None
    status: Status
    comparison: str = "<="  # how measured is compared with threshold: "<=", ">=", "=="
    margin: float | None = None
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d


@dataclass(frozen=True)
class GateResult:
    name: str
    phase: int
    status: Status
    checks: tuple[Check, ...] = ()
    message: str = ""  # why it failed / errored, or a one-line summary when it passed
    elapsed_s: float = 0.0
    logs: tuple[str, ...] = ()  # paths of raw logs, relative to the run directory
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "phase": self.phase,
            "status": self.status.value,
            "message": self.message,
            "elapsed_s": round(self.elapsed_s, 3),
            "logs": list(self.logs),
            "checks": [c.to_dict() for c in self.checks],
            "details": self.details,
        }


@dataclass(frozen=True)
class RunResult:
    run_id: str
    phase: int
    gates: tuple[GateResult, ...]
    environment: dict[str, Any]
    started_at: str
    elapsed_s: float
    notice: str = ""  # one line shown under the verdict, e.g. "no CUDA GPU: gates not run"
    phase_names: dict[int, str] = field(default_factory=dict)  # phase number -> name (gates/phases.yaml)

    @property
    def status(self) -> Status:
        return combine([g.status for g in self.gates])

    @property
    def exit_code(self) -> int:
        return 0 if self.status is Status.PASS else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "flashcore.run/1",
            "run_id": self.run_id,
            "phase": self.phase,
            "status": self.status.value,
            "notice": self.notice,
            "phase_names": {str(n): name for n, name in sorted(self.phase_names.items())},
            "started_at": self.started_at,
            "elapsed_s": round(self.elapsed_s, 3),
            "environment": self.environment,
            "gates": [g.to_dict() for g in self.gates],
        }


def phase_without_gates(number: int) -> GateResult:
    """A phase whose gates are not written yet cannot be certified: an ERROR, never a silent pass."""
    return GateResult(
        name=f"phase{number}-gates",
        phase=number,
        status=Status.ERROR,
        message=f"phase {number} has no gates implemented yet (gates/phases.yaml): it cannot pass",
    )
