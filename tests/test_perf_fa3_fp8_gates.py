"""The perf-fa3, perf-fp8 and perf-serving gates end to end on the CPU (the stand-in GPU of tests/perf_stand_in.py):
FlashCore against FA3 per workload and by geometric mean, the measured FP8 matmul ceiling, planted slow kernels."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from perf_stand_in import ANCHORS, Rate, checks_of, context, fa3_rate, html, rate

from harness.bench.backends import SLOW_FAULT
from harness.gates import perf
from harness.results import Status
from harness.schema import Config


@pytest.mark.parametrize(("ratio", "worst", "worst_ratio", "status", "failing"), [
    (1.02, None, 0.0, Status.PASS, set()),
    (0.97, "prefill-s1k-causal", 0.91, Status.PASS, set()),  # geomean >= 0.955, worst >= 0.90
    (0.98, "prefill-s1k-causal", 0.85, Status.FAIL, {"speed_vs_fa3"}),  # one workload below 0.90, geomean 0.965
    (0.94, None, 0.0, Status.FAIL, {"geomean_speed_vs_fa3"}),  # every workload >= 0.90, geomean < 0.955
])
def test_perf_fa3_judges_each_workload_and_the_geometric_mean(
        config: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None], ratio: float, worst: str | None,
        worst_ratio: float, status: Status, failing: set[str]) -> None:
    gpu_stand_in(fa3_rate(ratio, worst, worst_ratio))
    result = perf.run_perf(context(config, "perf-fa3", tmp_path / "run"))
    assert result.status is status, result.message
    assert {c.metric for c in result.checks if c.status is Status.FAIL} == failing
    assert not any(c.workload == "prefill-d128-fp16" for c in result.checks)  # the FA3 wheel has no fp16
    geomean = next(c for c in result.checks if c.metric == "geomean_speed_vs_fa3")
    if worst:
        assert f"worst {worst} {worst_ratio:.4g}" in geomean.message


def test_perf_fa3_without_fa3_is_an_error_with_the_install_hint(config: Config, tmp_path: Path,
                                                               gpu_stand_in: Callable[[Rate], None]) -> None:
    base = rate(ours=700.0)
    gpu_stand_in(lambda wl, b: None if b == "fa3" else base(wl, b))
    result = perf.run_perf(context(config, "perf-fa3", tmp_path / "run"))
    assert result.status is Status.ERROR
    assert all(c.status is Status.ERROR for c in result.checks if "fa3" in c.metric)
    geomean = next(c for c in result.checks if c.metric == "geomean_speed_vs_fa3")
    assert "no geometric mean without every workload" in geomean.message


def test_planted_slow_kernel_turns_perf_fa3_red(config: Config, tmp_path: Path,
                                                gpu_stand_in: Callable[[Rate], None]) -> None:
    gpu_stand_in(fa3_rate(1.0))  # at FA3's speed: passes clean, and the planted 1.3x slower path must fail
    assert perf.run_perf(context(config, "perf-fa3", tmp_path / "clean")).status is Status.PASS
    result = perf.run_perf(context(config, "perf-fa3", tmp_path / "slow", fault=SLOW_FAULT))
    assert result.status is Status.FAIL
    assert set(checks_of(result, "speed_vs_fa3")) == {Status.FAIL}
    assert checks_of(result, "geomean_speed_vs_fa3") == [Status.FAIL]


def test_planted_slow_fp8_kernel_turns_perf_fp8_red(config: Config, tmp_path: Path, fp8_ceiling: None,
                                                    gpu_stand_in: Callable[[Rate], None]) -> None:
    gpu_stand_in(fa3_rate(1.0))  # at FA3's FP8 speed: passes clean; the planted 1.3x slower path must fail
    clean = perf.run_perf(context(config, "perf-fp8", tmp_path / "clean"))
    assert clean.status is Status.PASS, clean.message
    assert {w["name"] for w in clean.details["workloads"]} == set(config.sets["fp8-bench"])
    assert all(config.workloads[n].dtype == "e4m3" for n in config.sets["fp8-bench"])
    result = perf.run_perf(context(config, "perf-fp8", tmp_path / "slow", fault=SLOW_FAULT))
    assert result.status is Status.FAIL
    assert set(checks_of(result, "speed_vs_fa3")) == {Status.FAIL}  # 0.77x < min_ratio 0.80
    assert checks_of(result, "geomean_speed_vs_fa3") == [Status.FAIL]


def test_perf_fp8_shows_each_workload_against_the_measured_matmul_ceiling(
        config: Config, tmp_path: Path, fp8_ceiling: None, gpu_stand_in: Callable[[Rate], None]) -> None:
    gpu_stand_in(fa3_rate(1.0))
    result = perf.run_perf(context(config, "perf-fp8", tmp_path / "run"))
    c = result.details["ceiling"]
    assert (c["kind"], c["tflops"]) == ("fp8-matmul", 1250.0)
    assert c["fraction"]["fp8-s8k-d128"] == pytest.approx(ANCHORS["fa3"] / 1250.0, rel=0.02)
    text = html(result)
    assert "stand-in fp8-matmul 8192^3 measured in this run at 1250.0 TFLOPS" in text
    assert "fp8-s8k-d128 0.50" in text


def test_a_ceiling_that_cannot_run_is_shown_and_leaves_the_verdicts(
        config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu_stand_in: Callable[[Rate], None]) -> None:
    from harness.bench import ceiling

    def broken(kind: str, n: int, reps: int = 20, device: str = "cuda") -> ceiling.Ceiling:
        raise RuntimeError("no _scaled_mm on this torch")

    monkeypatch.setattr(ceiling, "measure", broken)
    gpu_stand_in(fa3_rate(1.0))
    result = perf.run_perf(context(config, "perf-fp8", tmp_path / "run"))
    assert result.status is Status.PASS
    assert result.details["ceiling"]["tflops"] is None
    assert "not measured" in html(result) and "no _scaled_mm on this torch" in html(result)


def test_perf_fa3_and_serving_reports_show_their_tables(config: Config, tmp_path: Path,
                                                        gpu_stand_in: Callable[[Rate], None]) -> None:
    gpu_stand_in(fa3_rate(1.0))
    for gate in ("perf-fa3", "perf-serving"):
        text = html(perf.run_perf(context(config, gate, tmp_path / gate)))
        assert "Every repetition's time, round and SM clock" in text, gate  # the section with its tables
        assert "judged per workload: FlashCore speed" in text, gate
