"""Engine: gates run in phase order, a crashing gate is an ERROR (never an abort, never a pass), GPU gates are
NOT_RUN on a machine without a GPU, and the run's exit code is 0 only when every gate passed."""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import pytest
import torch
from conftest import workload

from harness.engine import run_phase
from harness.gates import registry
from harness.gates.base import Gate, GateContext
from harness.gates.correctness import CorrectnessParams
from harness.progress import Progress
from harness.results import Check, GateResult, Status
from harness.schema import Config, GateSpec, PhaseSpec
from harness.support import gpu


@dataclass(frozen=True)
class NoParams:
    pass


class PassGate(Gate):
    Params = NoParams

    def run(self, ctx: GateContext) -> GateResult:
        ctx.step("only step")
        return ctx.result([Check("x", "m", 1.0, 0.5, Status.PASS, margin=0.5)])


class RaiseGate(Gate):
    Params = NoParams

    def run(self, ctx: GateContext) -> GateResult:
        raise ZeroDivisionError("planted crash")


class EmptyPassGate(Gate):
    Params = NoParams

    def run(self, ctx: GateContext) -> GateResult:
        return GateResult(ctx.spec.name, 1, Status.PASS)


class WrongReturnGate(Gate):
    Params = NoParams

    def run(self, ctx: GateContext) -> GateResult:
        return "pass"  # type: ignore[return-value]


FAKES: dict[str, type[Gate]] = {"fake-pass": PassGate, "fake-raise": RaiseGate, "fake-empty": EmptyPassGate,
                                "fake-wrong": WrongReturnGate}


@pytest.fixture(autouse=True)
def fake_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, cls in FAKES.items():
        monkeypatch.setitem(registry._REGISTRY, name, cls)


def config_of(phases: dict[int, list[tuple[str, object]]]) -> Config:
    wl = workload("w")
    return Config(
        gates_dir=Path("gates"),
        workloads=MappingProxyType({"w": wl}),
        sets=MappingProxyType({"all": ("w",)}),
        phases=tuple(PhaseSpec(n, f"p{n}", tuple(GateSpec(name, n, params) for name, params in gates))
                     for n, gates in phases.items()),
    )


def run(config: Config, phase: int, tmp_path: Path):
    stream = io.StringIO()
    result = run_phase(config, phase, run_id="test", run_dir=tmp_path, environment={"gpu": None},
                       repo_root=tmp_path, seed=1, stream=stream, live=False)
    return result, stream.getvalue()


def test_all_gates_pass_gives_exit_0(tmp_path: Path) -> None:
    result, progress = run(config_of({1: [("fake-pass", NoParams())]}), 1, tmp_path)
    assert result.status is Status.PASS and result.exit_code == 0
    assert result.gates[0].phase == 1 and result.gates[0].elapsed_s >= 0
    assert "[phase 1] fake-pass  only step" in progress


def test_crashing_gate_is_an_error_and_the_run_goes_on(tmp_path: Path) -> None:
    config = config_of({1: [("fake-raise", NoParams()), ("fake-pass", NoParams())]})
    result, _ = run(config, 1, tmp_path)
    crashed, after = result.gates
    assert crashed.status is Status.ERROR
    assert "ZeroDivisionError: planted crash" in crashed.message
    assert crashed.logs == ("logs/fake-raise.log",)
    log = (tmp_path / "logs/fake-raise.log").read_text()
    assert "Traceback" in log and "planted crash" in log
    assert after.status is Status.PASS  # the next gate still ran
    assert result.status is Status.ERROR and result.exit_code != 0


@pytest.mark.parametrize("name", ["fake-empty", "fake-wrong"])
def test_gate_cannot_pass_without_checks_or_with_a_bad_result(tmp_path: Path, name: str) -> None:
    result, _ = run(config_of({1: [(name, NoParams())]}), 1, tmp_path)
    assert result.gates[0].status is Status.ERROR
    assert result.exit_code != 0


def test_gates_are_cumulative_in_phase_order(tmp_path: Path) -> None:
    config = config_of({1: [("fake-pass", NoParams())], 2: [("fake-raise", NoParams())], 3: []})
    one, _ = run(config, 1, tmp_path / "1")
    three, _ = run(config, 3, tmp_path / "3")
    assert [g.name for g in one.gates] == ["fake-pass"]
    assert [(g.name, g.phase) for g in three.gates] == [("fake-pass", 1), ("fake-raise", 2), ("phase3-gates", 3)]


def test_a_phase_without_gates_cannot_pass(tmp_path: Path) -> None:
    config = config_of({1: [("fake-pass", NoParams())], 2: []})
    result, _ = run(config, 2, tmp_path)
    empty = result.gates[-1]
    assert (empty.name, empty.phase, empty.status) == ("phase2-gates", 2, Status.ERROR)
    assert "no gates implemented" in empty.message
    assert result.exit_code != 0


def test_no_gpu_marks_gpu_gates_not_run_and_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    params = CorrectnessParams(workloads=("w",), seeds=1, fp16_max_abs=2e-3, bf16_error_factor=2.0,
                               bf16_error_slack=1e-5, fp8_error_factor=2.0, fp8_error_slack=1e-5, fp8_lse_max_abs=2e-2,
                               lse_max_abs=1e-3, reference_chunk_mib=16)
    config = config_of({1: [("fake-pass", NoParams()), ("correctness", params)]})
    result, progress = run(config, 1, tmp_path)
    cpu_gate, gpu_gate = result.gates
    assert cpu_gate.status is Status.PASS  # gates that need no GPU (build) still run
    assert gpu_gate.status is Status.NOT_RUN
    assert result.notice == gpu.NO_GPU_LINE
    assert progress.count(gpu.NO_GPU_LINE) == 1
    assert result.exit_code != 0


def test_progress_lines_without_a_tty() -> None:
    stream = io.StringIO()
    p = Progress(stream, live=False)
    p.start("[phase 1] correctness")
    p.step("s1 (1/2)")
    p.step("s17 (2/2)")
    p.finish(GateResult("correctness", 1, Status.FAIL, message="1 of 8 checks not passed", elapsed_s=2.5))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4 and "\r" not in stream.getvalue()
    assert lines[1].startswith("[phase 1] correctness  s1 (1/2)  ") and lines[1].endswith("s")
    assert lines[-1] == "[phase 1] correctness  FAIL  2.5s  1 of 8 checks not passed"


def test_a_quiet_step_gets_heartbeat_lines_without_a_tty() -> None:
    stream = io.StringIO()
    p = Progress(stream, live=False, tick_s=0.01, heartbeat_s=0.05)
    p.start("[phase 1] build")
    p.step("make build")
    time.sleep(0.3)  # a long step that writes nothing itself
    p.finish(GateResult("build", 1, Status.PASS, message="ok", elapsed_s=0.3))
    lines = stream.getvalue().splitlines()
    beats = [line for line in lines if line.endswith("(still running)")]
    assert 2 <= len(beats) <= 8 and all(b.startswith("[phase 1] build  make build  ") for b in beats)
    assert "\r" not in stream.getvalue() and lines[-1] == "[phase 1] build  PASS  0.3s  ok"


def test_steps_that_keep_writing_get_no_heartbeat() -> None:
    stream = io.StringIO()
    p = Progress(stream, live=False, tick_s=0.01, heartbeat_s=10.0)
    p.start("[phase 1] correctness")
    for i in range(5):
        p.step(f"w{i}")
        time.sleep(0.02)
    p.finish(GateResult("correctness", 1, Status.PASS, message="ok", elapsed_s=0.1))
    assert "still running" not in stream.getvalue() and len(stream.getvalue().splitlines()) == 7


def test_progress_redraws_in_place_on_a_tty() -> None:
    stream = io.StringIO()
    p = Progress(stream, live=True, tick_s=0.01)
    p.start("[phase 1] build")
    p.step("make build")
    p.finish(GateResult("build", 1, Status.PASS, message="ok", elapsed_s=1.0))
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("[phase 1] build  PASS  1.0s  ok\n")
    assert "\r[phase 1] build  make build" in text


def test_the_run_records_the_names_of_its_phases(tmp_path: Path) -> None:
    config = config_of({1: [("fake-pass", NoParams())], 2: [("fake-raise", NoParams())], 3: []})
    result, _ = run(config, 2, tmp_path)
    assert result.phase_names == {1: "p1", 2: "p2"}  # phases 1..N only
    assert result.to_dict()["phase_names"] == {"1": "p1", "2": "p2"}
