"""The benchmark suite (GPU): one pytest-benchmark benchmark per (workload, backend) of gates/bench.yaml.

    make bench                                      # = python -m harness bench: runs this suite, prints a table
    python -m pytest bench --benchmark-json=out.json [--bench-workloads=prefill-d128,decode] [--bench-backends=...]

Not part of `make test`: pytest's testpaths is tests/ only, and every item here is marked `gpu` (and `bench`).
Timing is harness/bench/timing.py (interleaved rounds, CUDA events, L2 flush, warm-up), the same code the perf
gates use: the backends of a workload (and the points of one scaling sweep: BenchSettings.pairing_groups) are
timed together, round by round, so clock drift hits them alike and their ratios are paired.

How the numbers reach pytest-benchmark (its own timer measures host time, which is not what we judge):
- the first benchmark of a pairing group runs the group's rounds (`Measurer.measure_group`); every benchmark of
  the group then takes its own measurement from the cache, through `benchmark.pedantic(rounds=1)`;
- its per-repetition GPU times then replace that one host-timed round in the benchmark's stats
  (`publish`), so pytest-benchmark's table, `--benchmark-json` and `--benchmark-compare` show GPU time per
  call; the complete Measurement (times, round of each, SM clock of each, NVML clocks, kernels that ran, seed)
  is in `extra_info["measurement"]`, which is what `python -m harness bench` and the gates' stored-run reader use.
- A backend that cannot run a workload is a skipped test with its reason, and is listed under
  `flashcore.not_available` in the JSON (pytest-benchmark keeps no entry for a skipped test).
  FlashCore itself not running, or a backend raising while timed, is a failed test.
Environment (GPU, driver, clocks, torch, git commit) goes into `machine_info.flashcore`.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from bench_support import PROGRESS, STATE, Case, State

from harness.bench.runner import Measurer, Options
from harness.bench.settings import BACKENDS, BenchSettings, check_backends, expand, load_bench_settings, timing_dict
from harness.config import load_config
from harness.schema import Config, ConfigError
from harness.support.gpu import cuda_unavailable_reason

REPO = Path(__file__).resolve().parent.parent
GPU_SKIP_REASON = "needs an H100"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("flashcore bench")
    group.addoption("--gates-dir", default=str(REPO / "gates"), help="directory of workloads.yaml and bench.yaml")
    group.addoption("--bench-workloads", default="", help="comma-separated workload or set names (default: suite)")
    group.addoption("--bench-backends", default="", help=f"comma-separated, of {', '.join(BACKENDS)} (default: suite)")
    group.addoption("--bench-seed", type=int, default=None, help="base seed of the inputs (default: a fresh one)")


def _split(text: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in text.split(",") if t.strip())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "bench: a GPU benchmark of bench/ (make bench)")
    config.addinivalue_line("markers", f"gpu: {GPU_SKIP_REASON}")
    try:
        gates = load_config(Path(config.getoption("--gates-dir")))
        settings = load_bench_settings(gates)
        workloads = settings.suite_workloads
        if config.getoption("--bench-workloads"):
            workloads = expand(settings.file, "--bench-workloads", _split(config.getoption("--bench-workloads")),
                               _with_sweep(gates, settings))
        backends = _split(config.getoption("--bench-backends")) or settings.suite.backends
        check_backends("--bench-backends", "", backends, tuple(BACKENDS))
    except ConfigError as e:
        raise pytest.UsageError(f"flashcore bench: {e}") from None
    seed = config.getoption("--bench-seed")
    groups = {w.name: g for g in settings.pairing_groups(workloads) for w in g}
    config.stash[STATE] = State(gates, settings, [Case(w, b) for w in workloads for b in backends],
                                secrets.randbelow(2**31) if seed is None else seed, backends, groups)


def _with_sweep(gates: Config, settings: BenchSettings) -> Config:
    """The config with the sweep's generated workloads and a `sweep` set, so --bench-workloads can name them."""
    from types import MappingProxyType

    workloads = {**gates.workloads, **{w.name: w for w in settings.sweep_workloads}}
    sets = {**gates.sets, "sweep": tuple(w.name for w in settings.sweep_workloads)}
    return Config(gates.gates_dir, MappingProxyType(workloads), MappingProxyType(sets), gates.phases)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        cases = metafunc.config.stash[STATE].cases
        metafunc.parametrize("case", cases, ids=[f"{c.workload.name}-{c.backend}" for c in cases])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu = cuda_unavailable_reason() is None
    for item in items:
        item.add_marker(pytest.mark.gpu)
        item.add_marker(pytest.mark.bench)
        if not gpu:
            item.add_marker(pytest.mark.skip(reason=GPU_SKIP_REASON))


@pytest.fixture(scope="session")
def state(pytestconfig: pytest.Config) -> State:
    return pytestconfig.stash[STATE]


@pytest.fixture(scope="session")
def measurer(state: State) -> Measurer:
    return Measurer(Options(state.settings.timing, state.base_seed))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Print each benchmark's one-line result as soon as it is known (progress while the suite runs)."""
    yield
    if call.when == "call":
        writer = item.config.pluginmanager.get_plugin("terminalreporter")
        for key, line in item.user_properties:
            if key == PROGRESS and writer is not None:
                writer.write_line(line)


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, str] | None:
    """No progress dot for a benchmark that printed its own line."""
    if report.when == "call" and any(k == PROGRESS for k, _ in report.user_properties):
        return report.outcome, "", report.outcome.upper()
    return None


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    from harness import env

    machine_info["flashcore"] = env.collect(REPO)


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: list[Any], output_json: dict[str, Any]) -> None:
    state = config.stash[STATE]
    output_json["flashcore"] = {
        "schema": "flashcore.bench-suite/1",
        "base_seed": state.base_seed,
        "timing": timing_dict(state.settings.timing),
        "cases": [f"{c.workload.name}-{c.backend}" for c in state.cases],
        "not_available": [m.to_dict() for m in state.not_available],
    }
