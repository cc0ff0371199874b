"""What every gate shares: the Gate base class, the context a gate runs in, and result helpers."""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, TypeVar

from harness.results import Check, GateResult, Status, combine
from harness.schema import Config, GateSpec, Workload

T = TypeVar("T")


def _no_step(_: str) -> None:
    return None


@dataclass
class GateContext:
    """Everything a gate may use: its spec (params), the config, where to write, and the progress hook."""

    spec: GateSpec
    config: Config
    run_dir: Path
    repo_root: Path
    seed: int  # base seed of this run; gates derive one seed per workload from it
    step: Callable[[str], None] = field(default=_no_step)  # report what is running now (progress line)
    fault: int = 0  # test-only planted kernel fault (flashcore.attention debug_fault); 0 in real runs
    # The gates this run runs, in order: a gate that measures once for several (harness/ncu/shared.py) plans the
    # measurement for those of them that ask for the same thing. Empty: nothing known, each gate plans for itself.
    peers: tuple[GateSpec, ...] = ()

    @property
    def params(self) -> Any:
        return self.spec.params

    @property
    def log_rel(self) -> str:
        return f"logs/{self.spec.name}.log"

    @property
    def log_path(self) -> Path:
        return self.run_dir / self.log_rel

    def log(self, text: str) -> None:
        """Append to this gate's raw log (`logs/<gate>.log` in the run directory)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as f:
            f.write(text if text.endswith("\n") else text + "\n")

    def workloads(self) -> tuple[Workload, ...]:
        """The workloads named by the gate's `workloads` param (sets already expanded by the loader)."""
        return tuple(self.config.workloads[n] for n in self.params.workloads)

    def result(self, checks: Sequence[Check], details: dict[str, Any] | None = None,
               message: str | None = None, logs: Sequence[str] = ()) -> GateResult:
        """A GateResult whose status is the worst of `checks` (no checks = ERROR)."""
        status = combine([c.status for c in checks])
        own_log = (self.log_rel,) if self.log_path.exists() else ()
        return GateResult(
            name=self.spec.name,
            phase=self.spec.phase,
            status=status,
            checks=tuple(checks),
            message=message if message is not None else summarize(checks),
            logs=tuple(dict.fromkeys(own_log + tuple(logs))),
            details=details or {},
        )

    def verdict_only(self, status: Status, message: str) -> GateResult:
        """A result without checks: for a gate that could not run (never PASS)."""
        assert status is not Status.PASS, "a gate without checks cannot pass"
        own_log = (self.log_rel,) if self.log_path.exists() else ()
        return GateResult(self.spec.name, self.spec.phase, status, message=message, logs=own_log)


@dataclass(frozen=True)
class SelfTest:
    """A planted fault that must turn this gate red (`python -m harness selftest`, harness/selftest.py) while a clean
    control, the same gate on the same inputs with nothing planted, stays green.

    plant: how it is planted, one of harness/selftest.py PLANTS: "phase1" or "gate" (this gate alone with kernel
    fault `arg`), "hang" (every kernel call hangs; `arg`: the gate run after it), "spill" (a build with a planted
    register cap), "validate-off" (flashcore.validate.`arg` made a no-op), "flag-dropped" (attention() ignoring the
    flag `arg`), "perf" (a timed gate run by its own code in the self-test's process, `arg`: clean, slow, noisy,
    serving-twice or collapse: harness/selftest_perf.py; a regression check against a stored run measured moments
    before), "sanitizer"
    (`arg`: tool:mode of tests/planted/planted.cu), "cpu" (crafted input to the real verdict: `arg` names a runner
    of harness/planted_cpu.py). must_fail: the gate, or gate/part, that must FAIL ("": this gate; "-": nothing may
    fail, a clean case). gates/selftest.yaml trims a case to the workloads its fault needs."""

    name: str
    plant: str
    arg: str = ""
    why: str = ""
    must_fail: str = ""


class Gate(abc.ABC):
    """One gate: `run(ctx)` measures and returns a GateResult; the verdicts are pure functions beside it."""

    name: ClassVar[str]  # set by @register
    Params: ClassVar[type]  # frozen dataclass of this gate's YAML params (fields declared with config.param)
    needs_gpu: ClassVar[bool] = False
    # the planted faults that must turn it red (harness/selftest.py), or why it has none there (`selftest_none`:
    # e.g. the CPU test that plants its fault); tests/test_selftest.py requires one of the two
    selftests: ClassVar[tuple[SelfTest, ...]] = ()
    selftest_none: ClassVar[str] = ""

    @abc.abstractmethod
    def run(self, ctx: GateContext) -> GateResult: ...


class FlashcoreGate(Gate):
    """A gate that calls flashcore on the GPU: run() loads it (NOT_RUN without a usable GPU, ERROR without the
    library, the context's planted fault applied) and hands it to measure()."""

    needs_gpu = True

    def run(self, ctx: GateContext) -> GateResult:
        fc = flashcore_for(ctx)
        if isinstance(fc, GateResult):
            return fc
        return self.measure(ctx, fc)

    @abc.abstractmethod
    def measure(self, ctx: GateContext, fc: ModuleType) -> GateResult: ...


def margin_le(measured: float, threshold: float) -> float:
    """Signed margin for `measured <= threshold`: positive means inside."""
    return threshold - measured


def finite_or_none(x: float) -> float | None:
    """Non-finite numbers are not valid JSON: keep them in the message, not in `measured`."""
    return x if math.isfinite(x) else None


def _relative_margin(c: Check) -> float:
    return (c.margin or 0.0) / abs(c.threshold or 1.0)


def summarize(checks: Sequence[Check]) -> str:
    """One line: what passed, or the first few checks that did not."""
    if not checks:
        return "no checks were made"
    bad = [c for c in checks if c.status is not Status.PASS]
    subjects = len({c.workload for c in checks})
    if not bad:
        text = f"all {len(checks)} checks passed ({subjects} subjects)"
        judged = [c for c in checks if c.margin is not None and c.threshold and c.measured is not None]
        if judged:
            t = min(judged, key=_relative_margin)
            text += f"; tightest: {t.workload} {t.metric} {t.measured:.3g} vs {t.threshold:.3g}"
        return text
    shown = "; ".join(f"{c.workload} {c.metric}: {c.message or c.status.value}" for c in bad[:3])
    more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
    return f"{len(bad)} of {len(checks)} checks not passed: {shown}{more}"


# ---- GPU gates: the flashcore module, and a kernel crash as a verdict ---------------------------------------


def flashcore_for(ctx: GateContext) -> ModuleType | GateResult:
    """The flashcore module a GPU gate calls (with the context's planted fault, if any), or the result the gate
    returns instead: NOT_RUN without a usable CUDA GPU, ERROR when the library cannot be loaded."""
    from harness.support import gpu  # late: torch helpers; base stays light

    reason = gpu.cuda_unavailable_reason()
    if reason is not None:
        return ctx.verdict_only(Status.NOT_RUN, reason)
    try:
        return gpu.load_flashcore(ctx.fault)
    except gpu.FlashcoreUnavailable as e:
        return ctx.verdict_only(Status.ERROR, str(e))


def crash_verdict(fc: ModuleType, subject: str, label: str, seed: int, exc: BaseException,
                  log: Any) -> tuple[Check, dict[str, Any]]:
    """One workload's crash as that workload's verdict: the check, its details entry, the traceback logged."""
    import traceback

    log(f"{subject} ({label}, seed {seed}):\n{traceback.format_exc()}")
    text = f"{type(exc).__name__}: {exc}"
    return (Check(subject, "run", None, None, exception_status(fc, exc), message=text),
            {"shape": label, "seed": seed, "error": text})


def exception_status(fc: ModuleType, exc: BaseException) -> Status:
    """The kernel failing its own contract (a workload rejected with FlashCoreError, a failed launch) is a
    FAIL. A wrong device or any other exception means no verdict: ERROR."""
    unsupported = getattr(fc, "UnsupportedDeviceError", None)
    if isinstance(unsupported, type) and isinstance(exc, unsupported):
        return Status.ERROR
    for name in ("FlashCoreError", "KernelLaunchError"):
        cls = getattr(fc, name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return Status.FAIL
    return Status.ERROR


def guarded(fc: ModuleType, subject: str, label: str, seed: int, log: Any,
            fn: Callable[[], T]) -> tuple[T, None] | tuple[None, tuple[Check, dict[str, Any]]]:
    """fn(), one workload's measurement, with its crash as that workload's verdict (crash_verdict) instead of the
    gate's; the GPU memory it held is freed either way."""
    from harness.support import gpu

    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - one workload's crash is that workload's verdict
        return None, crash_verdict(fc, subject, label, seed, e, log)
    finally:
        gpu.free_memory()
