"""The self-test's timed cases (harness/selftest_perf.py) on the CPU: each planted fault turns its gate's real verdict
red and the clean control stays green, with the GPU measurement replaced by perf_stand_in's stand-in Measurer
(whose FlashCore is 1.3x slower under kernel fault 4, and here half as fast on the calls a run-twice plant doubles);
the self-test's timing (the fewest rounds bench.yaml allows), its trims and the run-twice plants themselves."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import REPO
from perf_stand_in import Rate, fp8_ceiling, gpu_stand_in  # noqa: F401 - fixtures
from test_autotune import _fake_fc, library_table  # noqa: F401 - a fixture

from harness.config import load_config
from harness.planted_checks import planted
from harness.results import Status
from harness.schema import Config, ConfigError, Workload
from harness.selftest import CASES, judge
from harness.selftest_perf import bench_settings, timed_config, trimmed_spec
from harness.selftest_settings import load_selftest_settings

SETTINGS = load_selftest_settings(REPO / "gates")


@pytest.fixture
def gates(gates_dir: Path) -> Config:
    return load_config(gates_dir)


def doubled(wl: Workload) -> bool:
    """Whether a run-twice plant doubles FlashCore's calls on `wl` now (its wrapper carries __wrapped__)."""
    if wl.layout != "dense" or wl.fp8:
        return hasattr(importlib.import_module("flashcore.serving").varlen, "__wrapped__")
    attention = importlib.import_module("flashcore").attention
    return hasattr(attention, "__wrapped__") and wl.seqlen_k >= 32768  # scaling's shortest judged length


def ahead(wl: Workload, backend: str) -> float:
    """FlashCore 1.17x every baseline (past every floor of the gates the cases trim), half that when doubled."""
    if backend != "flashcore":
        return 600.0
    return 350.0 if doubled(wl) else 700.0


def run_case(name: str, gates: Config, tmp_path: Path) -> tuple[dict[str, Status], dict[str, Status]]:
    case = next(c for c in CASES if c.name == name)
    fault = case.run(gates, tmp_path / name, True)
    control = case.run(gates, tmp_path / f"{name}-control", False)
    ok, text = judge(case, fault, control)
    assert ok, text
    return fault, control


@pytest.mark.parametrize("name", ["perf-cudnn-slow", "perf-fa3-slow", "perf-fp8-slow", "perf-serving-twice"])
def test_a_slower_flashcore_turns_each_perf_gate_red_beside_a_green_control(
        name: str, gates: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None],  # noqa: F811
        fp8_ceiling: None) -> None:  # noqa: F811
    gpu_stand_in(ahead)
    gate = next(c.gate for c in CASES if c.name == name)
    fault, control = run_case(name, gates, tmp_path)
    assert fault[gate] is Status.FAIL and fault[f"{gate}/regression"] is Status.FAIL  # slower than moments before
    assert control[gate] is Status.PASS and control[f"{gate}/regression"] is Status.PASS
    assert (tmp_path / name / "index.html").is_file() and (tmp_path / f"{gate}-stored" / "logs").is_dir()


def test_planted_collapse_turns_scaling_red_beside_a_green_control(
        gates: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None]) -> None:  # noqa: F811
    gpu_stand_in(ahead)
    fault, control = run_case("scaling-collapse", gates, tmp_path)
    assert fault["scaling"] is Status.FAIL and control["scaling"] is Status.PASS
    assert fault["scaling/spread"] is Status.PASS  # a collapse, not noise: the ratio is judged and fails


def test_planted_slow_kernel_turns_autotune_gain_red_beside_a_green_control(
        gates: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None],  # noqa: F811
        library_table: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from harness.gates import autotune_gain

    gpu_stand_in(ahead)
    monkeypatch.chdir(library_table)  # the repository whose committed table the library reads
    monkeypatch.setattr(autotune_gain, "flashcore_for", lambda ctx: _fake_fc())
    fault, control = run_case("autotune-gain-slow", gates, tmp_path)
    assert fault["autotune-gain"] is Status.FAIL and control["autotune-gain"] is Status.PASS
    assert "autotune-gain/regression" not in control  # no stored run: the gate has no regression check


def test_the_timed_cases_run_the_gates_fewest_rounds(tmp_path: Path) -> None:
    config = load_config(REPO / "gates")
    own = bench_settings(config, {}, tmp_path / "own").timing
    cfg = timed_config(config, SETTINGS.bench, tmp_path)
    settings = cfg.once("bench.yaml", lambda _: pytest.fail("the self-test's settings are already in place"))
    # a clean control judged on fewer rounds than a gate is red by noise more often than the gate it controls: its
    # base is the rounds a gate's extended workload reaches at least (and its noisy ratios are extended as a gate's)
    assert settings.timing.min_reps == settings.timing.max_reps == own.extend_min_reps >= own.min_reps
    assert settings.timing.min_reps >= settings.judged.min_rounds
    assert settings.timing.min_reps >= settings.judged.stored_min_rounds  # the stored run made here is judged too
    assert [w.seqlen_q for w in settings.sweep_workloads] == [2048, 4096, 8192, 32768]
    assert (tmp_path / "bench.yaml").is_file()  # the run's record of how it was timed
    assert config.once("bench.yaml", lambda _: None) is None  # the gates' own config is untouched


def test_an_override_below_bench_yaml_minimums_names_the_selftest_key(tmp_path: Path) -> None:
    config = load_config(REPO / "gates")
    with pytest.raises(ConfigError) as e:
        bench_settings(config, {"timing": {"min_reps": 16, "max_reps": 16}}, tmp_path)
    assert e.value.file.endswith("selftest.yaml") and e.value.key == "bench.judged.min_rounds"
    with pytest.raises(ConfigError) as e:
        bench_settings(config, {"timing": {"rounds": 3}}, tmp_path)
    assert e.value.key == "bench.timing.rounds"


def test_a_timed_case_runs_only_what_it_judges(tmp_path: Path) -> None:
    config = load_config(REPO / "gates")
    cudnn = trimmed_spec(config, "perf-cudnn", ("prefill-d64",)).params
    assert cudnn.workloads == ("prefill-d64",) and cudnn.baselines == cudnn.gated == ("cudnn",)
    assert not cudnn.sweep and cudnn.report_workloads == ()
    assert cudnn.min_ratio == 1.0 and cudnn.min_geomean == 1.08  # the gate's thresholds, untouched
    cfg = timed_config(config, SETTINGS.bench, tmp_path)
    scaling = trimmed_spec(cfg, "scaling", ()).params
    assert scaling.judged_seqlens == (32768,) and scaling.peak_seqlens == (2048, 4096, 8192)
    assert scaling.baselines == () and scaling.min_ratio == 0.9


def test_run_twice_doubles_the_serving_calls_and_restores_them(monkeypatch: pytest.MonkeyPatch) -> None:
    serving = importlib.import_module("flashcore.serving")
    calls: list[str] = []
    for name in ("varlen", "dense", "kvcache"):
        monkeypatch.setattr(serving, name, lambda *a, _n=name, **k: calls.append(_n))
    real = serving.varlen
    with planted("run-twice:serving"):
        serving.varlen(1, 2, 3)
        serving.kvcache(1, 2, 3)
    assert calls == ["varlen", "varlen", "kvcache", "kvcache"] and serving.varlen is real


def test_run_twice_from_a_length_doubles_only_the_long_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    fc = importlib.import_module("flashcore")
    calls: list[int] = []
    monkeypatch.setattr(fc, "attention", lambda q, k, v, **kw: calls.append(k.shape[1]))
    real = fc.attention
    short, long = SimpleNamespace(shape=(4, 8192, 16, 128)), SimpleNamespace(shape=(1, 32768, 16, 128))
    with pytest.raises(RuntimeError), planted("run-twice:32768"):
        fc.attention(None, short, None)
        fc.attention(None, long, None, causal=True)
        raise RuntimeError("a gate crashed")
    assert calls == [8192, 32768, 32768] and fc.attention is real
    with pytest.raises(ValueError, match="run-twice:long"):
        planted("run-twice:long").__enter__()


def _fake_run(spread: Status) -> SimpleNamespace:
    check = SimpleNamespace(workload="prefill-d128", metric="rel_std[speed_vs_fa2]", status=spread)
    return SimpleNamespace(status=Status.PASS if spread is Status.PASS else Status.FAIL, checks=[check],
                           message="", details={"measurements_file": "measurements.json"})


@pytest.mark.parametrize("spreads, reruns, chosen", [
    ([Status.FAIL, Status.PASS], 1, "perf-fa2-stored-rerun1"),  # noise in the first measurement: measured again
    ([Status.PASS], 1, "perf-fa2-stored"),                       # a clean first measurement is kept
    ([Status.FAIL, Status.FAIL], 1, "perf-fa2-stored-rerun1"),   # out of re-runs: the last one, its checks ERROR
    ([Status.FAIL], 0, "perf-fa2-stored"),                       # spread_reruns 0: never again
])
def test_a_stored_run_red_by_its_spread_is_measured_again(spreads: list[Status], reruns: int, chosen: str,
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness import selftest_perf

    runs: list[Path] = []

    def fake(config: object, spec: object, run_dir: Path, plant: str, stored: object) -> SimpleNamespace:
        assert plant == "clean" and stored is None  # the stored run is a clean one against nothing
        runs.append(run_dir)
        return _fake_run(spreads[len(runs) - 1])

    monkeypatch.setattr(selftest_perf, "timed_gate", fake)
    spec = SimpleNamespace(name="perf-fa2")
    path = selftest_perf.stored_run(SimpleNamespace(), spec, tmp_path / "perf-fa2-stored", reruns)  # type: ignore[arg-type]
    assert len(runs) == len(spreads)
    assert path == tmp_path / chosen / "measurements.json"
