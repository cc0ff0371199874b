"""The watchdog: a GPU gate runs in a worker process with a time limit (gates/watchdog.yaml); one that hangs, kills
its worker or loses its CUDA context is an ERROR naming the gate, the step (workload) it was on and the planted
fault, the next gate runs in a fresh worker, and the report is still written. On the CPU with fake gates that sleep
forever, call os._exit, raise, or call flashcore under the planted hang (a C stand-in for the CUDA kernel)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import pytest
from conftest import workload

from flashcore.faults import Fault
from harness.engine import run_phase
from harness.gates import registry
from harness.gates.base import Gate, GateContext
from harness.progress import Progress
from harness.render import write_all
from harness.results import Check, GateResult, RunResult, Status
from harness.schema import Config, ConfigError, GateSpec, PhaseSpec
from harness.watchdog import WatchdogSettings, load_watchdog

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class NoParams:
    pass


def _passed(ctx: GateContext, what: str) -> GateResult:
    return ctx.result([Check(what, "m", 1.0, 0.5, Status.PASS, margin=0.5)], details={"pid": os.getpid()})


class GpuFake(Gate):
    Params = NoParams
    needs_gpu = True  # the engine watches GPU gates only; the tests tell it a GPU is there (fake_gates)

    def run(self, ctx: GateContext) -> GateResult:
        raise NotImplementedError


class PassGate(GpuFake):

    def run(self, ctx: GateContext) -> GateResult:
        ctx.step("w-pass (1/1)")
        return _passed(ctx, "w-pass")


class SleepGate(GpuFake):

    def run(self, ctx: GateContext) -> GateResult:
        ctx.step("w-fast (1/2)")
        ctx.step("w-stuck (2/2)")
        while True:
            time.sleep(60)


class ExitGate(GpuFake):

    def run(self, ctx: GateContext) -> GateResult:
        ctx.step("w-crash (1/1)")
        os._exit(3)


class RaiseGate(GpuFake):

    def run(self, ctx: GateContext) -> GateResult:
        raise ZeroDivisionError("planted crash")


class LostContextGate(GpuFake):
    """Returns its verdict, then the worker's CUDA context is found dead (a stand-in torch.cuda says so)."""

    def run(self, ctx: GateContext) -> GateResult:
        import torch

        def dead() -> None:
            raise RuntimeError("CUDA error: an illegal instruction was encountered")

        torch.cuda.is_initialized = lambda: True  # type: ignore[assignment]  # this worker ends after this gate
        torch.cuda.synchronize = dead  # type: ignore[assignment]
        return _passed(ctx, "w-lost")


class KernelGate(GpuFake):
    """Calls flashcore.attention per workload, as the kernel gates do (the planted hang replaces it)."""

    def run(self, ctx: GateContext) -> GateResult:
        import flashcore

        ctx.step("fp8-s8k-d64 (1/2)")
        flashcore.attention(None, None, None)
        return _passed(ctx, "fp8-s8k-d64")


class FaultEchoGate(Gate):
    """Records the planted fault it was handed (in this process, a hang is never planted)."""

    Params = NoParams

    def run(self, ctx: GateContext) -> GateResult:
        return ctx.result([Check("echo", "fault", None, None, Status.PASS, "==", message=str(ctx.fault))])


FAKES: dict[str, type[Gate]] = {"fake-pass": PassGate, "fake-pass-2": PassGate, "fake-sleep": SleepGate,
                                "fake-exit": ExitGate, "fake-raise": RaiseGate, "fake-lost": LostContextGate,
                                "fake-kernel": KernelGate, "fake-echo": FaultEchoGate}
WATCHED = ("fake-pass", "fake-pass-2", "fake-sleep", "fake-exit", "fake-raise", "fake-lost", "fake-kernel")
LIMITS = WatchdogSettings(multiple=1.0, floor_s=14.0, startup_s=120.0, expected_s=dict.fromkeys(WATCHED, 1.0))


@pytest.fixture(autouse=True)
def fake_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, cls in FAKES.items():
        monkeypatch.setitem(registry._REGISTRY, name, cls)
    monkeypatch.setattr("harness.engine.cuda_unavailable_reason", lambda: None)  # the worker is told the same


def config_of(*names: str) -> Config:
    wl = workload("w")
    return Config(gates_dir=REPO / "gates", workloads=MappingProxyType({"w": wl}),
                  sets=MappingProxyType({"all": ("w",)}),
                  phases=(PhaseSpec(1, "p1", tuple(GateSpec(n, 1, NoParams()) for n in names)),))


def run(tmp_path: Path, *names: str, fault: int = 0, repo_root: Path | None = None) -> tuple[RunResult, str]:
    stream = io.StringIO()
    result = run_phase(config_of(*names), 1, run_id="test", run_dir=tmp_path, environment={"gpu": None},
                       repo_root=repo_root or tmp_path, seed=1, fault=fault, stream=stream, live=False,
                       limits=LIMITS)
    write_all(result, tmp_path)
    return result, stream.getvalue()


def by_name(result: RunResult) -> dict[str, GateResult]:
    return {g.name: g for g in result.gates}


def test_a_gate_that_never_returns_is_an_error_naming_its_workload_and_the_run_goes_on(tmp_path: Path) -> None:
    t0 = time.monotonic()
    result, _ = run(tmp_path, "fake-sleep", "fake-pass")
    gates = by_name(result)
    hung = gates["fake-sleep"]
    assert hung.status is Status.ERROR and time.monotonic() - t0 < 100
    (check,) = hung.checks
    assert (check.workload, check.metric, check.status, check.threshold) == ("w-stuck (2/2)", "time_limit_s",
                                                                           Status.ERROR, 15.0)
    assert "fake-sleep exceeded its time limit of 15 s" in hung.message and "w-stuck (2/2)" in hung.message
    assert "w-stuck" in (tmp_path / "logs/fake-sleep.log").read_text()
    assert gates["fake-pass"].status is Status.PASS  # a fresh worker ran the next gate
    written = json.loads((tmp_path / "results.json").read_text())
    assert [g["status"] for g in written["gates"]] == ["error", "pass"]


def test_a_gate_that_kills_its_worker_is_an_error_and_a_fresh_worker_runs_the_next(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "fake-pass", "fake-exit", "fake-pass-2")
    gates = by_name(result)
    died = gates["fake-exit"]
    assert died.status is Status.ERROR and died.checks[0].metric == "worker_alive"
    assert "exit code 3" in died.message and "w-crash (1/1)" in died.message
    assert gates["fake-pass-2"].status is Status.PASS
    assert gates["fake-pass"].details["pid"] != gates["fake-pass-2"].details["pid"]
    assert (tmp_path / "results.json").is_file()


def test_a_gate_that_raises_in_the_worker_is_an_error_and_the_worker_serves_on(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "fake-pass", "fake-raise", "fake-pass-2")
    gates = by_name(result)
    assert gates["fake-raise"].status is Status.ERROR
    assert "ZeroDivisionError: planted crash" in gates["fake-raise"].message
    assert "Traceback" in (tmp_path / "logs/fake-raise.log").read_text()
    assert gates["fake-pass"].details["pid"] == gates["fake-pass-2"].details["pid"] != os.getpid()


def test_a_worker_whose_cuda_context_died_is_replaced_after_its_gate(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "fake-lost", "fake-pass")
    gates = by_name(result)
    assert gates["fake-lost"].status is Status.PASS  # its own verdict stands
    assert "CUDA context is lost" in (tmp_path / "logs/fake-lost.log").read_text()
    assert gates["fake-pass"].status is Status.PASS
    assert gates["fake-lost"].details["pid"] != gates["fake-pass"].details["pid"]


@pytest.fixture
def hang_library(tmp_path: Path) -> Path:
    """A repo root whose build/libplanted_hang.so is a C stand-in for the CUDA kernel: it blocks forever."""
    root = tmp_path / "root"
    (root / "build").mkdir(parents=True)
    src = root / "hang.c"
    src.write_text("#include <unistd.h>\nint fc_planted_hang(void) { for (;;) pause(); return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(root / "build/libplanted_hang.so"), str(src)], check=True)
    return root


def test_the_planted_hang_is_an_error_naming_the_workload_and_the_fault(tmp_path: Path, hang_library: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BUILD_DIR", raising=False)
    result, _ = run(tmp_path, "fake-kernel", "fake-echo", "fake-pass", fault=Fault.HANG, repo_root=hang_library)
    gates = by_name(result)
    hung = gates["fake-kernel"]
    assert hung.status is Status.ERROR and hung.checks[0].metric == "time_limit_s"
    assert "fp8-s8k-d64 (1/2)" in hung.message and "planted fault: hang" in hung.message
    assert gates["fake-echo"].checks[0].message == "0"  # in this process the gate runs unplanted
    assert gates["fake-pass"].status is Status.PASS
    assert json.loads((tmp_path / "results.json").read_text())["gates"][0]["status"] == "error"


def test_the_planted_hang_without_its_library_says_make_planted(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "fake-kernel", fault=Fault.HANG)
    assert result.gates[0].status is Status.ERROR and "make planted" in result.gates[0].message


def test_a_gate_the_watchdog_does_not_list_runs_in_this_process(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "fake-echo", "fake-pass", fault=int(Fault.SKIP_ROW))
    gates = by_name(result)
    assert gates["fake-echo"].checks[0].message == str(int(Fault.SKIP_ROW))
    assert gates["fake-pass"].details["pid"] != os.getpid()


def test_a_cpu_gate_runs_in_this_process_even_when_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gate that needs no GPU launches no kernel: no worker (a test's stand-in for a real gate stays here)."""
    monkeypatch.setattr(PassGate, "needs_gpu", False)
    result, _ = run(tmp_path, "fake-pass")
    assert result.gates[0].status is Status.PASS and result.gates[0].details["pid"] == os.getpid()


def test_heartbeat_lines_name_the_time_limit() -> None:
    stream = io.StringIO()
    p = Progress(stream, live=False, tick_s=0.01, heartbeat_s=0.05)
    p.start("[phase 1] correctness", limit_s=220)
    time.sleep(0.2)
    p.finish(GateResult("correctness", 1, Status.PASS, message="ok", elapsed_s=0.2))
    assert "(still running; time limit 220 s)" in stream.getvalue()


def test_the_repository_watchdog_file_covers_every_gpu_gate() -> None:
    limits = load_watchdog(REPO / "gates")
    gpu_gates = {n for n in registry.names() if (g := registry.get(n)) is not None and g.needs_gpu
                 and n not in FAKES}
    assert {"correctness", "api", "perf-fa2", "autotune-gain", "integrations"} <= gpu_gates
    assert gpu_gates <= set(limits.expected_s), f"no time limit for {sorted(gpu_gates - set(limits.expected_s))}"
    assert limits.limit("correctness") == limits.multiple * limits.expected_s["correctness"] + limits.floor_s
    assert not {n for n in registry.names() if (g := registry.get(n)) is not None and not g.needs_gpu} \
        & set(limits.expected_s), "a CPU gate needs no worker"


@pytest.mark.parametrize("key, value", [("multiple", "0"), ("floor_s", "-5"), ("startup_s", "yes"),
                                        ("expected_s", "{}"), ("expected_s", "{correctness: 0}")])
def test_a_bad_watchdog_file_names_the_key(gates_dir: Path, key: str, value: str) -> None:
    path = gates_dir / "watchdog.yaml"
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
    end = start + 1
    while end < len(lines) and lines[end].startswith(" "):
        end += 1
    path.write_text("\n".join([*lines[:start], f"{key}: {value}", *lines[end:]]) + "\n")
    with pytest.raises(ConfigError) as e:
        load_watchdog(gates_dir)
    assert e.value.key.startswith(key) and "watchdog.yaml" in str(e.value)



def test_a_gate_the_worker_cannot_load_is_an_error_saying_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gate class made at run time (no module attribute to import it by) cannot reach the worker."""
    made = type("MadeAtRunTime", (GpuFake,), {"run": PassGate.run, "__module__": __name__})
    monkeypatch.setitem(registry._REGISTRY, "fake-pass", made)
    result, _ = run(tmp_path, "fake-pass", "fake-pass-2")
    gates = by_name(result)
    assert gates["fake-pass"].status is Status.ERROR and "MadeAtRunTime" in gates["fake-pass"].message
    assert gates["fake-pass-2"].status is Status.PASS


class FirstWorkloadKernelGate(GpuFake):
    """Steps onto its first workload (the self-test trims it), then calls flashcore.attention: the real one refuses
    these arguments at once (a pass here), the planted hang never returns."""

    def run(self, ctx: GateContext) -> GateResult:
        import flashcore

        first = ctx.params.workloads[0]
        ctx.step(f"{first} (1/{len(ctx.params.workloads)})")
        try:
            flashcore.attention(None, None, None)
        except Exception:  # noqa: BLE001, S110 - the real call's refusal is the clean control
            pass
        return _passed(ctx, first)


def test_the_selftest_hang_case_is_caught_and_its_control_passes(tmp_path: Path, hang_library: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """make selftest's hang case on the CPU: correctness, then determinism, both hang under the planted fault and
    are each ended by the watchdog naming the workload and the fault; the report is written; the control (nothing
    planted) passes both (stand-ins call a flashcore.attention that returns)."""
    from harness.config import load_config
    from harness.selftest import Case, judge
    from harness.selftest_runs import hang_caught

    config = load_config(REPO / "gates")  # the real gates' params: the stand-ins read their trimmed workloads
    for name in ("correctness", "determinism"):
        monkeypatch.setitem(registry._REGISTRY, name, FirstWorkloadKernelGate)
    monkeypatch.chdir(hang_library)
    monkeypatch.delenv("BUILD_DIR", raising=False)
    runner = hang_caught("correctness", "determinism", ("s1", "odd-grid"), limit_s=15)
    fault = runner(config, tmp_path / "hang", True)
    assert fault["correctness"] is Status.ERROR and fault["determinism"] is Status.ERROR
    assert fault["correctness/watchdog"] is Status.FAIL  # caught
    text = (tmp_path / "hang" / "results.json").read_text()
    assert "s1 (1/2)" in text and "planted fault: hang" in text
    control = runner(config, tmp_path / "control", False)
    assert control == {"correctness": Status.PASS, "determinism": Status.PASS, "correctness/watchdog": Status.PASS}
    assert judge(Case("hang", "correctness", runner, "correctness/watchdog", ""), fault, control)[0]
