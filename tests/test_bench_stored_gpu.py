"""Stored runs per GPU model and the perf verdicts' minimums: each attack on the regression check, fed and judged.

A stored run of another GPU model, one that records no GPU, or none at all for this GPU: NOT_APPLICABLE with the
reason (never a pass, and the paired ratios still judge); a ratio from too few rounds or spread groups, today's or
the stored run's: ERROR, never "0.00 % spread"."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_bench_verdicts import ENV, GPU, pair, stored_run

from harness.bench import stored as per_gpu
from harness.bench.record import Run
from harness.bench.settings import JudgedParams
from harness.results import Check, GateResult, Status, combine
from harness.support import perf_verdict as pv
from harness.support.notices import NOTICE_KEY, run_notice

REPO = Path(__file__).resolve().parents[1]
H100 = per_gpu.GpuModel(GPU, 132)
H200 = per_gpu.GpuModel("NVIDIA H200", 132)
JUDGED = JudgedParams(min_rounds=20, min_spread_groups=5, stored_min_rounds=20, stored_min_spread_groups=5)


def regression(stored: Run | pv.Missing | None, env: dict[str, object] = ENV, rounds: int = 50,
               groups: int = 5) -> Check:
    ours, fa2 = pair(4.0, 6.0, rounds=rounds, spread_groups=groups)
    return pv.verdict_regression("w", ours, fa2, pv.stored_pair(stored, ours, fa2, env), 0.05, 0.02, JUDGED)


# ---- the regression check against stored runs of other GPUs ------------------------------------------------


def test_stored_run_of_another_gpu_is_not_applicable_not_a_pass() -> None:
    check = regression(stored_run(*pair(4.0, 6.0), gpu="NVIDIA H200"))
    assert check.status is Status.NOT_APPLICABLE and "NVIDIA H200" in check.message
    assert "make prepare" in check.message


def test_stored_run_with_an_empty_gpu_name_is_not_comparable() -> None:
    check = regression(stored_run(*pair(4.0, 6.0), gpu=""))
    assert check.status is Status.NOT_APPLICABLE and "records no GPU" in check.message


def test_unknown_gpu_today_is_not_comparable() -> None:
    check = regression(stored_run(*pair(4.0, 6.0)), env={"gpu": None, "torch": "2.11.0"})
    assert check.status is Status.NOT_APPLICABLE and "GPU is unknown" in check.message


def test_same_name_other_sm_count_is_another_gpu_model() -> None:
    stored = stored_run(*pair(4.0, 6.0))
    stored = Run(stored.path, {**stored.environment, "gpu_sm_count": 114}, stored.measurements)
    check = regression(stored, env={**ENV, "gpu_sm_count": 132})
    assert check.status is Status.NOT_APPLICABLE and "114 SMs" in check.message


def test_workload_missing_from_the_stored_run_is_not_applicable() -> None:
    ours, fa2 = pair(4.0, 6.0)
    other = stored_run(*(pair(4.0, 6.0, wl=ours.spec.__class__(**{**ours.spec.__dict__, "name": "other"}))))
    check = pv.verdict_regression("w", ours, fa2, pv.stored_pair(other, ours, fa2, ENV), 0.05, 0.02, JUDGED)
    assert check.status is Status.NOT_APPLICABLE and "not in the stored run" in check.message


def test_gate_of_only_not_applicable_is_never_a_pass() -> None:
    assert combine([Status.NOT_APPLICABLE, Status.NOT_APPLICABLE]) is Status.NOT_APPLICABLE
    assert combine([Status.PASS, Status.NOT_APPLICABLE]) is Status.PASS  # the paired ratios still judge


# ---- minimum rounds and spread groups ----------------------------------------------------------------------


def test_two_rounds_in_one_group_is_an_error_not_zero_spread() -> None:
    ours, fa2 = pair(4.0, 6.0, rounds=2, spread_groups=1)
    spread = pv.verdict_ratio_spread("w", ours, fa2, 0.02, JUDGED)
    ratio = pv.verdict_ratio("w", ours, fa2, 1.0, 0.02, JUDGED)
    assert spread.status is Status.ERROR and "2 rounds in 1 spread group" in spread.message
    assert ratio.status is Status.ERROR and "0.00 %" not in ratio.message
    assert pv.verdict_geomean("g", [(ours, fa2)], 1.0, 0.02, JUDGED).status is Status.ERROR


def test_too_few_rounds_today_is_an_error_in_the_regression_check() -> None:
    check = regression(stored_run(*pair(4.0, 6.0)), rounds=12, groups=5)
    assert check.status is Status.ERROR and "12 rounds" in check.message


def test_stored_run_with_too_few_rounds_is_an_error() -> None:
    check = regression(stored_run(*pair(4.0, 6.0, rounds=10, spread_groups=2)))
    assert check.status is Status.ERROR and "the stored run's paired ratio rests on 10 rounds" in check.message


def test_enough_rounds_judges() -> None:
    assert regression(stored_run(*pair(4.0, 6.0))).status is Status.PASS


# ---- finding the file of this GPU --------------------------------------------------------------------------


def _write(path: Path, gpu: str | None, sm: int | None = None) -> None:
    env: dict[str, object] = {"gpu": gpu}
    if sm is not None:
        env["gpu_sm_count"] = sm
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": "x", "environment": env, "measurements": []}))


def test_lookup_finds_the_file_by_the_gpu_it_records(tmp_path: Path) -> None:
    _write(tmp_path / "b/bench-h100.json", GPU)
    _write(tmp_path / "b/bench-h200.json", "NVIDIA H200", 132)
    assert per_gpu.find(tmp_path, "b/bench-*.json", H200).path == tmp_path / "b/bench-h200.json"
    assert per_gpu.find(tmp_path, "b/bench-*.json", H100).path == tmp_path / "b/bench-h100.json"


def test_lookup_file_renamed_to_another_gpu_does_not_stand_in(tmp_path: Path) -> None:
    _write(tmp_path / "b/bench-h200.json", GPU)  # an H100 run under the H200's name
    got = per_gpu.find(tmp_path, "b/bench-*.json", H200)
    assert got.path is None and not got.applicable and "no stored run for NVIDIA H200 (132 SMs)" in got.why
    assert "make prepare" in got.why


def test_lookup_two_files_for_one_gpu_is_an_error(tmp_path: Path) -> None:
    _write(tmp_path / "b/bench-a.json", GPU)
    _write(tmp_path / "b/bench-b.json", GPU)
    got = per_gpu.find(tmp_path, "b/bench-*.json", H100)
    assert got.path is None and got.applicable and "keep one" in got.why


def test_lookup_unreadable_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b/bench-x.json").write_text("{truncated")
    got = per_gpu.find(tmp_path, "b/bench-*.json", H100)
    assert got.path is None and got.applicable and "cannot be read" in got.why


def test_new_gpu_writes_a_file_named_from_it(tmp_path: Path) -> None:
    _write(tmp_path / "b/bench-h100.json", GPU)
    assert per_gpu.target(tmp_path, "b/bench-*.json", H200) == tmp_path / "b/bench-h200.json"
    assert per_gpu.target(tmp_path, "b/bench-*.json", H100) == tmp_path / "b/bench-h100.json"


def test_committed_baselines_are_found_for_the_h100_and_work_with_or_without_an_h200_file(tmp_path: Path) -> None:
    shutil.copytree(REPO / "gates/baselines", tmp_path / "gates/baselines")
    for pattern in ("gates/baselines/bench-*.json", "gates/baselines/ncu-stalls-*.json"):
        assert per_gpu.find(tmp_path, pattern, H100).found, pattern
        h200 = per_gpu.find(tmp_path, pattern, H200)
        if not (REPO / pattern.replace("*", "h200")).is_file():
            assert not h200.found and not h200.applicable
    _write(tmp_path / "gates/baselines/bench-h200.json", "NVIDIA H200", 132)
    assert per_gpu.find(tmp_path, "gates/baselines/bench-*.json", H200).found


@pytest.mark.parametrize("pattern", ["gates/baselines/bench.json", "a/*/b.json", "bench-*-*.json", "bench-*.yaml"])
def test_bad_pattern_is_refused(pattern: str) -> None:
    assert per_gpu.check_pattern(pattern) is not None


# ---- one run-level notice ----------------------------------------------------------------------------------


def test_notice_is_said_once_for_many_gates() -> None:
    why = "no stored run for NVIDIA H200 (132 SMs): run `make prepare`"
    gates = [GateResult(f"perf-{i}", 3, Status.PASS, details={NOTICE_KEY: why}) for i in range(4)]
    notice = run_notice("", gates)
    assert notice.count("make prepare") == 1
    assert run_notice("PLANTED FAULT 3 (test-only): this run must fail. ", []) == \
        "PLANTED FAULT 3 (test-only): this run must fail. "


def test_ncu_stalls_baseline_of_another_gpu_is_missing_not_compared(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from harness import env
    from harness.gates.ncu_stalls import gpu_baseline

    shutil.copytree(REPO / "gates/baselines", tmp_path / "gates/baselines")
    pattern = "gates/baselines/ncu-stalls-*.json"
    monkeypatch.setattr(env, "torch_info", lambda: {"gpu": GPU, "gpu_sm_count": 132})
    assert gpu_baseline(tmp_path, pattern, "ncu-stalls").status == "loaded"
    monkeypatch.setattr(env, "torch_info", lambda: {"gpu": "NVIDIA H999", "gpu_sm_count": 200})
    other = gpu_baseline(tmp_path, pattern, "ncu-stalls")
    assert other.status == "missing" and "no stored ncu baseline for NVIDIA H999" in other.message


# ---- the YAML bars against the committed evidence ----------------------------------------------------------

PERF_GATES = ("perf-fa2", "perf-cudnn", "perf-fa3", "perf-fp8", "perf-serving")


def test_every_perf_gate_checks_for_regression_against_the_stored_run() -> None:
    from harness.config import load_config

    params = {g.name: g.params for g in load_config(REPO / "gates").gates_through(7)}
    assert all(params[g].regression and 0 < params[g].regression_margin <= 0.05 for g in PERF_GATES)


def test_floors_sit_below_the_latest_h100_evidence_and_above_the_old_fp8_floors() -> None:
    """Each bar is what the evidence measured less its spread: the committed H100 run passes every one of them."""
    import lzma

    from harness.config import load_config

    params = {g.name: g.params for g in load_config(REPO / "gates").gates_through(7)}
    run = json.loads(lzma.open(REPO / "reports/evidence/phase7-8ea9af2.json.xz").read())
    for gate in (g for g in run["gates"] if g["name"] in PERF_GATES):
        p = params[gate["name"]]
        for c in gate["checks"]:
            if c["metric"].startswith("speed_vs_"):
                assert c["measured"] >= p.min_ratio, (gate["name"], c["workload"], c["measured"])
            if c["metric"].startswith("geomean_speed_vs_"):
                assert c["measured"] >= p.min_geomean, (gate["name"], c["measured"])
    assert params["perf-fp8"].min_ratio > 0.80 and params["perf-fp8"].min_geomean > 0.85
    assert params["perf-fa3"].min_ratio <= 0.914 * 0.99  # the H200's worst measured row keeps its margin


def test_bench_baseline_on_a_new_gpu_writes_its_own_file_and_keeps_the_others(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from harness import cli

    shutil.copytree(REPO / "gates", tmp_path / "gates")
    monkeypatch.chdir(tmp_path)
    h100 = tmp_path / "gates/baselines/bench-h100.json"
    before = h100.read_text()
    suite = json.loads((REPO / "tests/fixtures/bench/bench-suite.json").read_text())
    suite["machine_info"]["flashcore"] |= {"gpu": "NVIDIA H200", "gpu_sm_count": 132}
    (tmp_path / "h200.json").write_text(json.dumps(suite))
    assert cli.main(["bench", "--from", "h200.json", "--update-baseline"]) == 0, capsys.readouterr().err
    written = tmp_path / "gates/baselines/bench-h200.json"
    assert written.is_file() and h100.read_text() == before
    assert per_gpu.find(tmp_path, "gates/baselines/bench-*.json", H200).path == written
    suite["machine_info"]["flashcore"]["gpu"] = ""  # a run that names no GPU cannot become anyone's stored run
    (tmp_path / "nogpu.json").write_text(json.dumps(suite))
    assert cli.main(["bench", "--from", "nogpu.json", "--update-baseline"]) == 1
    assert "records no GPU" in capsys.readouterr().err


def test_perf_gates_lacking_different_workloads_raise_one_notice() -> None:
    from harness.support.perf_stored import stored_notice

    stored = stored_run(*pair(4.0, 6.0))
    na = [Check(w, "slowdown_vs_stored", 1.05, None, Status.NOT_APPLICABLE) for w in ("a", "b")]
    gates = [GateResult(g, 4, Status.PASS, details={NOTICE_KEY: stored_notice(stored, [c])})
             for g, c in (("perf-cudnn", na[0]), ("perf-fp8", na[1]))]
    assert run_notice("", gates).count("lacks workloads") == 1
    assert stored_notice(stored, [Check("a", "slowdown_vs_stored", 1.05, 1.0, Status.PASS)]) == ""
