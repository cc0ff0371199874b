"""One benchmark per (workload, backend): see conftest.py for how the GPU times reach pytest-benchmark."""

from __future__ import annotations

from typing import Any

import pytest
from bench_support import PROGRESS, Case, State, progress_line, publish

from harness.bench.record import CRASHED
from harness.bench.runner import Measurer
from harness.bench.settings import BACKENDS, OURS


def test_attention(case: Case, state: State, measurer: Measurer, benchmark: Any,
                   request: pytest.FixtureRequest) -> None:
    wl, backend = case.workload, case.backend
    # the first test of a pairing group times all of its backends (and sweep points) in interleaved rounds;
    # the others take their measurement from the Measurer's cache
    group = measurer.measure_group(state.groups[wl.name], state.backends)
    state.results.update(group)
    m = group[(wl.name, backend)]
    if not m.available:  # this backend cannot run this workload here: listed, never dropped
        state.not_available.append(m)
        request.node.user_properties.append((PROGRESS, progress_line(state, m)))
        if backend == OURS:
            pytest.fail(f"FlashCore did not run {wl.name}: {m.why}")
        if m.why.startswith(CRASHED):
            pytest.fail(f"{BACKENDS[backend]} on {wl.name}: {m.why}")
        pytest.skip(f"{BACKENDS[backend]} not available on {wl.name}: {m.why}")
    publish(benchmark, benchmark.pedantic(lambda: m, rounds=1, iterations=1))
    request.node.user_properties.append((PROGRESS, progress_line(state, m)))
