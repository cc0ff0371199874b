"""A SIMULATED GPU for CPU tests of the timing loop and the Measurer (tests/test_bench_timing.py,
tests/test_bench_extend.py): CUDA events, torch.cuda._sleep and synchronize are replaced by a timeline whose SM
clock steps between 1980 and 1600 MHz every `step_ms`; a call takes its time at 1980 MHz x 1980 / clock; the
backends are simulated kernels. Nothing here runs on a GPU."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import pytest
import torch

from harness.bench import backends, timing
from harness.schema import Workload
from harness.support import gpu as gpu_mod


class SimulatedGpu:
    """A timeline in ms; the clock steps every `step_ms` between 1980 and 1600 MHz."""

    def __init__(self, step_ms: float = 40.0) -> None:
        self.now = 0.0
        self.step_ms = step_ms
        self.calls: list[str] = []
        self.extra_ms = 0.0  # added to the next kernel (a neighbour's burst contending with it)

    def mhz(self) -> float:
        return 1980.0 if int(self.now // self.step_ms) % 2 == 0 else 1600.0

    def spin(self, cycles: int) -> None:
        self.now += cycles / (self.mhz() * 1000)

    def kernel(self, name: str, ms_at_max: float) -> Any:
        def run() -> None:
            self.calls.append(name)
            self.now += ms_at_max * 1980.0 / self.mhz() + self.extra_ms
            self.extra_ms = 0.0
        return run


def simulate(monkeypatch: pytest.MonkeyPatch) -> SimulatedGpu:
    """Replace torch's events, spin and synchronize and the NVML readings by a SimulatedGpu's timeline."""
    sim = SimulatedGpu()

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.t: float | None = None

        def record(self) -> None:
            self.t = sim.now

        def elapsed_time(self, end: Event) -> float:
            assert self.t is not None and end.t is not None
            return end.t - self.t

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "_sleep", sim.spin)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(timing, "read_clocks", lambda: {"sm_mhz": round(sim.mhz()), "source": "simulated"})
    monkeypatch.setattr(timing, "max_sm_clock_mhz", lambda: 1980)
    return sim


def simulated_backends(monkeypatch: pytest.MonkeyPatch, gpu: SimulatedGpu, speeds: Mapping[str, float]) -> None:
    """Backends as simulated kernels of speeds[backend] x (1 + S / 8192) ms (x 1.3 with a kernel fault); FA3 is
    not importable; inputs, NVTX, the profiler and the memory release do nothing."""

    def prepare(backend: str, wl: Workload, q: object, k: object, v: object, fault: int = 0) -> backends.Prepared:
        if backend == "fa3":
            raise backends.Unavailable("FA3 not importable: simulated")
        ms = speeds[backend] * (1 + wl.seqlen_q / 8192) * (1.3 if fault else 1.0)
        return backends.Prepared(gpu.kernel(f"{wl.name}/{backend}", ms), implementation=f"simulated {backend}",
                                 planted="kernel debug_fault 4" if fault else "")

    monkeypatch.setattr(backends, "prepare", prepare)
    monkeypatch.setattr(backends, "probe", lambda p: None)
    monkeypatch.setattr(gpu_mod, "make_inputs", lambda wl, seed, device: (None, None, None))
    monkeypatch.setattr(gpu_mod, "free_memory", lambda: None)
    monkeypatch.setattr(gpu_mod, "nvtx_range", lambda name: contextlib.nullcontext())
    monkeypatch.setattr(timing, "nvtx_span", lambda: lambda name: contextlib.nullcontext())
    monkeypatch.setattr(timing, "kernel_names", lambda fn, limit=6: ("simulated_kernel",))
