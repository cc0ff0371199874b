"""Helpers shared by conftest.py and test_bench.py (a module of its own: two conftest modules must not clash)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from harness.bench import paired
from harness.bench.record import Measurement
from harness.bench.settings import OURS, BenchSettings
from harness.schema import Config, Workload

PROGRESS = "bench-progress"  # user_properties key of a test's one-line result


@dataclass(frozen=True)
class Case:
    workload: Workload
    backend: str


@dataclass
class State:
    """What the suite accumulates across tests (kept on the pytest config)."""

    config: Config
    settings: BenchSettings
    cases: list[Case]
    base_seed: int
    backends: tuple[str, ...] = ()
    groups: dict[str, tuple[Workload, ...]] = field(default_factory=dict)  # workload -> its pairing group
    not_available: list[Measurement] = field(default_factory=list)
    results: dict[tuple[str, str], Measurement] = field(default_factory=dict)
    done: int = 0
    t0: float = field(default_factory=time.monotonic)


STATE = pytest.StashKey[State]()


def publish(benchmark: Any, m: Measurement) -> None:
    """Put the measurement into the benchmark's JSON entry, and its per-repetition GPU times (seconds) in place
    of the single host-timed round of `benchmark.pedantic`, so pytest-benchmark's own statistics are GPU times."""
    benchmark.extra_info["measurement"] = m.to_dict()
    data = getattr(getattr(getattr(benchmark, "stats", None), "stats", None), "data", None)
    if isinstance(data, list) and m.times_ms:
        data[:] = [t / 1e3 for t in m.times_ms]
        benchmark.extra_info["pytest_benchmark_stats"] = "GPU time per repetition (CUDA events, interleaved rounds)"
    else:  # another pytest-benchmark layout: its stats stay the host time of handing over the measurement
        benchmark.extra_info["pytest_benchmark_stats"] = "host time of handing over the measurement (meaningless)"


def progress_line(state: State, m: Measurement) -> str:
    state.done += 1
    n, width = len(state.cases), len(str(len(state.cases)))
    name_w = max(len(c.workload.name) for c in state.cases)
    head = f"[{state.done:>{width}}/{n}] {m.workload:<{name_w}} {m.backend:<9}"
    s = m.summary
    if s is None:
        body = f"not available: {m.why}"
    else:
        body = f"{m.throughput:8.4g} {m.unit:<6}  median {s.median_ms:.4g} ms  abs sd {100 * s.rel_std:.2f} %"
        ours = state.results.get((m.workload, OURS))
        r = paired.speed_ratio(ours, m) if ours is not None and m.backend != OURS else None
        if r is not None:
            body += f"  FlashCore {r.value:.3f}x (paired, sd {100 * r.rel_std:.2f} %)"
        if m.clock_mhz:
            body += f"  SM {min(m.clock_mhz):.0f}-{max(m.clock_mhz):.0f} MHz"
        body += f"  {s.reps} rounds"
    return f"{head} {body}  ({time.monotonic() - state.t0:.0f} s)"
