"""One benchmark per (workload, backend): see conftest.py for how the GPU times reach pytest-benchmark."""

from __future__ import annotations

from typing import Any

import pytest
from bench_support import PROGRESS, Case, State, progress_line, publish

from harness.bench.record import Measurement, not_available
from harness.bench.runner import Measurer
from harness.bench.settings import BACKENDS, OURS


def test_attention(case: Case, state: State, measurer: Measurer, benchmark: Any,
                   request: pytest.FixtureRequest) -> None:
    wl, backend = case.workload, case.backend
    got = measurer.prepare(wl, backend)
    if isinstance(got, Measurement):  # this backend cannot run this workload here: listed, never dropped
        state.not_available.append(got)
        request.node.user_properties.append((PROGRESS, progress_line(state, got)))
        if backend == OURS:
            pytest.fail(f"FlashCore did not run {wl.name}: {got.why}")
        pytest.skip(f"{BACKENDS[backend]} not available on {wl.name}: {got.why}")
    try:
        m = benchmark.pedantic(measurer.time, args=(wl, backend, got), rounds=1, iterations=1)
    except Exception as e:
        state.not_available.append(not_available(wl, backend, f"crashed while timed: {type(e).__name__}: {e}",
                                                 measurer.seed(wl)))
        raise
    publish(benchmark, m)
    request.node.user_properties.append((PROGRESS, progress_line(state, m)))
