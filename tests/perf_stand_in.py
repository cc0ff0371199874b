"""The stand-in GPU of the perf and scaling gates' CPU tests: the GPU measurement is replaced by a stand-in Measurer
returning SYNTHETIC paired rounds (tests/fixtures/bench/synthesize.py: throughputs near the ROADMAP anchors under
a clock that steps +-10 %, every backend alike), everything else is the real code: settings from the
repository's gates/*.yaml, pairing groups, verdicts, the stored-run comparison, the report section with its
charts. Test files import its fixtures (gpu_stand_in, config, stored, fp8_ceiling) and helpers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from fixtures.bench.synthesize import MEDIAN_FACTOR, paired_rounds

from harness import env
from harness.bench import flops as fl
from harness.bench import runner
from harness.bench.backends import SLOW_FAULT
from harness.bench.record import Measurement, not_available
from harness.config import load_config
from harness.gates import perf
from harness.gates.base import GateContext
from harness.render import render_html
from harness.results import GateResult, RunResult, Status
from harness.schema import Config, Workload
from harness.support import gpu

GPU = "NVIDIA H100 80GB HBM3"
ANCHORS = {"fa2": 351.0, "cudnn": 591.0, "efficient": 280.0, "fa3": 625.0}
DECODE = {"flashcore": 3.1, "fa2": 2.49, "cudnn": 3.08, "efficient": 2.2, "fa3": 3.05}
Rate = Callable[[Workload, str], float | None]


def rate(ours: float = 400.0) -> Rate:
    """Throughput per (workload, backend): TFLOPS, TB/s for decode; None = not available (FA3 on fp16)."""

    def f(wl: Workload, backend: str) -> float | None:
        if backend == "fa3" and wl.dtype == "fp16":
            return None
        if wl.kind == "memory-bound":
            return DECODE[backend]
        return ours if backend == "flashcore" else ANCHORS[backend]

    return f


class StandIn:
    """Measurer with the real one's interface: each group in its own synthetic rounds; planted faults act like
    the real ones (the slow path 1.3x slower; noise: bursts alongside FlashCore's calls from mid-rounds on)."""

    ROUNDS = 25

    def __init__(self, options: runner.Options, throughput: Rate) -> None:
        self.options, self.throughput = options, throughput
        self.groups: list[list[str]] = []

    def seed(self, wl: Workload) -> int:
        return 7

    def release(self) -> None:
        pass

    def measure_group(self, group: Sequence[Workload], backends: Sequence[str]) -> dict[tuple[str, str], Measurement]:
        self.groups.append([w.name for w in group])
        out: dict[tuple[str, str], Measurement] = {}
        calls: dict[tuple[Workload, str], float] = {}
        for wl in group:
            for b in backends:
                t = self.throughput(wl, b)
                if t is None:
                    out[(wl.name, b)] = not_available(wl, b, "fa3_fwd_interface (fa3-fwd 0.0.3) is built without "
                                                      "fp16 (only bf16)")
                    continue
                if b == "flashcore" and self.options.fault == SLOW_FAULT:
                    t /= 1.3
                work = fl.workload_kv_bytes(wl) if wl.kind == "memory-bound" else fl.workload_flops(wl)
                calls[(wl, b)] = work / (t * 1e12) * 1e3 / MEDIAN_FACTOR
        half = self.ROUNDS // 2
        burst = (lambda r, key: 1.4 if key[1] == "flashcore" and r >= half else 1.0) if self.options.noisy else None
        got = paired_rounds(calls, self.ROUNDS, burst=burst, jitter_amount=0.0)
        for key, m in got.items():
            planted = [*(["kernel debug_fault 4"] if self.options.fault == SLOW_FAULT else []),
                       *(["noise: side-stream matmul bursts"] if self.options.noisy else [])]
            out[key] = dataclasses.replace(m, implementation=f"stand-in {key[1]}",
                                           planted=", ".join(planted) if key[1] == "flashcore" else "")
        return {(w.name, b): out[(w.name, b)] for w in group for b in backends}


@pytest.fixture
def gpu_stand_in(monkeypatch: pytest.MonkeyPatch) -> Callable[[Rate], None]:
    monkeypatch.setattr(gpu, "cuda_unavailable_reason", lambda: None)
    monkeypatch.setattr(gpu, "load_flashcore", lambda fault=0: object())
    here = {"gpu": GPU, "gpu_sm_count": 132}
    monkeypatch.setattr(perf, "_gpu_now", lambda: here)
    collect = env.collect  # the measurements file (a stored run) records the stand-in GPU, as on the H100
    monkeypatch.setattr(env, "collect", lambda root: {**collect(root), **here})

    def install(throughput: Rate) -> None:
        monkeypatch.setattr(runner, "shared", lambda run_dir, options: StandIn(options, throughput))

    install(rate())
    return install


def context(config: Config, gate: str, run_dir: Path, fault: int = 0, **params: object) -> GateContext:
    spec = next(g for p in config.phases for g in p.gates if g.name == gate)
    spec = dataclasses.replace(spec, params=dataclasses.replace(spec.params, **params))
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    return GateContext(spec=spec, config=config, run_dir=run_dir, repo_root=run_dir, seed=3, fault=fault)


def checks_of(result: GateResult, metric: str) -> list[Status]:
    return [c.status for c in result.checks if c.metric == metric]


def html(result: GateResult) -> str:
    return render_html(RunResult("t", result.phase, (result,), {}, "", 0.0))


@pytest.fixture
def config(gates_dir: Path) -> Config:
    return load_config(gates_dir)


@pytest.fixture
def stored(config: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None]) -> Path:
    """A stored run: the gate's own measurements file of a clean run (what make bench-baseline would keep)."""
    first = perf.run_perf(context(config, "perf-fa2", tmp_path / "first"))
    return tmp_path / "first" / first.details["measurements_file"]

def fa3_rate(ratio: float, worst: str | None = None, worst_ratio: float = 0.0) -> Rate:
    """FlashCore at `ratio` x FA3's anchor on every workload (`worst` at worst_ratio)."""
    base = rate()

    def f(wl: Workload, backend: str) -> float | None:
        if backend != "flashcore":
            return base(wl, backend)
        return ANCHORS["fa3"] * (worst_ratio if wl.name == worst else ratio)

    return f


@pytest.fixture
def fp8_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.bench import ceiling

    monkeypatch.setattr(ceiling, "measure", lambda kind, n, reps=20, device="cuda": ceiling.Ceiling(
        kind, n, 1250.0, f"stand-in {kind} {n}^3"))

