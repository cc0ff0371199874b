"""Time limits of the GPU gates (gates/watchdog.yaml) and the verdict of a gate its worker could not finish.

A gate listed in the file runs in a worker process (harness/gate_worker.py); the engine (harness/engine.py) waits
for it at most `limit(gate)` seconds. A gate that runs past its limit, or whose worker dies, is an ERROR whose one
check names the step it was on (the last progress line: the workload) and the planted fault, if any.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.results import Check, GateResult, Status
from harness.schema import ConfigError, read_yaml

WATCHDOG_FILE = "watchdog.yaml"
_KEYS = ("multiple", "floor_s", "startup_s", "expected_s")


@dataclass(frozen=True)
class WatchdogSettings:
    multiple: float
    floor_s: float
    startup_s: float
    expected_s: Mapping[str, float]  # gate -> its usual wall time; the gates listed run in a worker
    fixed_s: Mapping[str, float] = field(default_factory=dict)  # gate -> its limit, set by the caller (a self-test
    #                                                             case runs a gate on a few small workloads)

    def watches(self, gate: str) -> bool:
        return gate in self.expected_s or gate in self.fixed_s

    def limit(self, gate: str) -> float:
        if gate in self.fixed_s:
            return self.fixed_s[gate]
        return self.multiple * self.expected_s[gate] + self.floor_s


def _positive(file: Path, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(file, key, value, "a number > 0")
    return float(value)


def load_watchdog(gates_dir: Path) -> WatchdogSettings:
    file = gates_dir / WATCHDOG_FILE
    data = read_yaml(file, _KEYS)
    expected = data.get("expected_s")
    if not isinstance(expected, dict) or not expected:
        raise ConfigError(file, "expected_s", expected, "a mapping of gate name -> seconds > 0")
    return WatchdogSettings(
        multiple=_positive(file, "multiple", data.get("multiple")),
        floor_s=_positive(file, "floor_s", data.get("floor_s")),
        startup_s=_positive(file, "startup_s", data.get("startup_s")),
        expected_s={str(g): _positive(file, f"expected_s.{g}", s) for g, s in expected.items()})


# ---- verdicts (pure) ----------------------------------------------------------------------------------------------


def _planted(fault: str) -> str:
    return f"; planted fault: {fault}" if fault else ""


def hung(gate: str, phase: int, step: str, limit_s: float, elapsed_s: float, fault: str = "") -> GateResult:
    """The gate ran past its time limit: its worker was killed; the step it was on is the suspect."""
    on = step or "(before its first step)"
    text = (f"{gate} exceeded its time limit of {limit_s:.0f} s on {on}{_planted(fault)}: its worker was killed, "
            "the run goes on in a fresh one")
    check = Check(on, "time_limit_s", limit_s, round(elapsed_s, 1), Status.ERROR, "<=", message=text)
    return GateResult(gate, phase, Status.ERROR, checks=(check,), message=text,
                      details={"watchdog": "time limit", "step": step, "limit_s": limit_s, "fault": fault})


def died(gate: str, phase: int, step: str, exit_code: int | None, fault: str = "", why: str = "") -> GateResult:
    """The worker process ended (or lost its CUDA context) while it ran the gate."""
    on = step or "(before its first step)"
    how = why or f"the gate's worker died (exit code {exit_code})"
    text = f"{gate}: {how} on {on}{_planted(fault)}: the run goes on in a fresh worker"
    check = Check(on, "worker_alive", None, None, Status.ERROR, "==", message=text)
    return GateResult(gate, phase, Status.ERROR, checks=(check,), message=text,
                      details={"watchdog": "worker died", "step": step, "exit_code": exit_code, "fault": fault})
