"""Measurement records and the JSON files that carry them: the suite's pytest-benchmark JSON, a stored run,
`python -m harness bench --from` (table, anchors) and `--update-baseline`. Fixtures under tests/fixtures/bench
are SYNTHETIC paired rounds (tests/fixtures/bench/synthesize.py)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
from pathlib import Path

import pytest
from conftest import REPO

from harness import cli
from harness.bench import cli as bench_cli
from harness.bench import paired
from harness.bench.record import RUN_SCHEMA, Measurement, RecordError, parse_run, read_run
from harness.bench.settings import load_bench_settings
from harness.config import load_config
from harness.results import Status
from harness.support import perf_verdict as pv

FIXTURES = REPO / "tests" / "fixtures" / "bench"
SUITE = FIXTURES / "bench-suite.json"
STORED = FIXTURES / "stored-run.json"


def test_the_suite_json_gives_every_measurement_and_the_missing_ones() -> None:
    run = read_run(SUITE)
    assert run.gpu == "NVIDIA H100 80GB HBM3" and run.commit and run.commit.startswith("5717e7c")
    assert len(run.measurements) == 15  # 3 workloads x 5 backends: 14 timed + FA3 on fp16 not available
    fa3_fp16 = run.get("prefill-d128-fp16", "fa3")
    assert fa3_fp16 is not None and not fa3_fp16.available and "built without fp16" in fa3_fp16.why
    fa2 = run.get("prefill-d128", "fa2")
    assert fa2 is not None and fa2.summary is not None and fa2.summary.reps == 20
    assert fa2.throughput == pytest.approx(351, rel=0.01)  # the anchor it was synthesized from
    assert fa2.implementation == "SDPBackend.FLASH_ATTENTION"
    # paired: every backend of a workload in the same 20 rounds, with the SM clock of each repetition
    ours = run.get("prefill-d128", "flashcore")
    assert ours is not None and ours.paired and ours.pairing == fa2.pairing == "prefill-d128"
    assert fa2.rounds == tuple(range(20)) and len(fa2.clock_mhz) == 20
    r = paired.speed_ratio(ours, fa2)
    assert r is not None and r.value == pytest.approx(646.8 / 351, rel=1e-3) and r.rel_std < 0.005


def test_measurement_round_trips_through_json() -> None:
    run = read_run(SUITE)
    for m in run.measurements.values():
        again = Measurement.from_dict(json.loads(json.dumps(m.to_dict())))
        assert again == m


def test_derived_numbers_are_recomputed_not_trusted() -> None:
    data = json.loads(SUITE.read_text())
    entry = data["benchmarks"][0]["extra_info"]["measurement"]
    entry["summary"]["median_ms"] = 1e-9  # a reader must use times_ms
    entry["throughput"] = 1e9
    m = parse_run(data, "edited").get(entry["workload"], entry["backend"])
    assert m is not None and m.median_ms == pytest.approx(statistics.median(entry["times_ms"]))


@pytest.mark.parametrize(("text", "fragment"), [
    ("not json", "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"schema": "something-else/9"}', "neither"),
    (json.dumps({"schema": RUN_SCHEMA, "measurements": [{"workload": "w", "backend": "b"}]}), "malformed measurement"),
    (json.dumps({"schema": RUN_SCHEMA, "measurements": [{"workload": "w", "backend": "b", "available": True,
                                                          "spec": {"name": "w"}}]}), "malformed measurement"),
])
def test_bad_files_are_record_errors(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(text)
    with pytest.raises(RecordError, match=fragment):
        read_run(path)
    with pytest.raises(RecordError, match="no such file"):
        read_run(tmp_path / "absent.json")


def test_comparison_with_the_stored_run() -> None:
    """Today's FlashCore (suite fixture) against the stored one, each relative to the reference backend of its
    run (FA2; cuDNN on memory-bound decode): faster on prefill, within 5 % on decode."""
    now, stored = read_run(SUITE), read_run(STORED)
    env = {"gpu": now.gpu, "torch": now.environment["torch"]}
    for workload, ref_name, expected in (("prefill-d128", "fa2", 640.0 / 646.8), ("decode", "cudnn", 3.08 / 3.10)):
        ours, ref = now.get(workload, "flashcore"), now.get(workload, ref_name)
        assert ours is not None and ref is not None
        pair = pv.stored_pair(stored, ours, ref, env)
        check = pv.verdict_regression(workload, ours, ref, pair, 0.05, 0.02)
        assert check.status is Status.PASS and check.measured == pytest.approx(expected, rel=1e-3), check
    # a 10 % slower FlashCore (in every round, the reference unchanged) fails
    ours, ref = now.get("decode", "flashcore"), now.get("decode", "cudnn")
    assert ours is not None and ref is not None
    slow = dataclasses.replace(ours, times_ms=tuple(t * 1.1 for t in ours.times_ms))
    pair = pv.stored_pair(stored, slow, ref, env)
    assert pv.verdict_regression("decode", slow, ref, pair, 0.05, 0.02).status is Status.FAIL
    # another torch: the reference may have changed, so no verdict until the baseline is stored again
    pair = pv.stored_pair(stored, ours, ref, {**env, "torch": "2.12.0"})
    assert isinstance(pair, pv.Missing) and pair.why.startswith("reference changed: re-store the baseline")


# ---- python -m harness bench --from / --update-baseline -----------------------------------------------------


@pytest.fixture
def repo_copy(tmp_path: Path, gates_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with gates/ (the repository's YAML) and no stored run yet."""
    shutil.rmtree(gates_dir / "baselines", ignore_errors=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_bench_from_json_prints_the_table_anchors_and_missing(repo_copy: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "--from", str(SUITE), "--out", "out"]) == 0
    assert (repo_copy / "out" / "table.txt").read_text().startswith("workload")  # --out is honoured with --from
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("workload"))
    assert header.split()[:7] == ["workload", "unit", "flashcore", "fa2", "cudnn", "efficient", "fa3"]
    row = next(line for line in lines if line.startswith("prefill-d128 "))
    assert "648.3" in row and "1.84x" in row  # FlashCore TFLOPS and its paired speed over FA2
    assert "1800-1980" in row  # the SM clock over the rounds
    assert "prefill-d128: fa2 351.7 vs 351 (+0.2 %)" in out  # baselines against the ROADMAP anchors
    assert "Clock" in out or "clock" in out
    assert "prefill-d128-fp16 fa3: not available: fa3_fwd_interface (fa3-fwd 0.0.3) is built without fp16" in out
    assert (repo_copy / "out" / "table.txt").read_text().startswith("workload")


def test_update_baseline_writes_a_stored_run_that_reads_back(repo_copy: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    target = repo_copy / "gates" / "baselines" / "bench-h100.json"
    assert not target.exists()
    assert cli.main(["bench", "--from", str(SUITE), "--update-baseline"]) == 0
    assert "stored run written" in capsys.readouterr().out
    stored = read_run(target)
    assert json.loads(target.read_text())["schema"] == RUN_SCHEMA
    assert stored.measurements == read_run(SUITE).measurements and stored.gpu == "NVIDIA H100 80GB HBM3"


def _rewrite(src: Path, dst: Path, workload: str, backend: str, **change: object) -> Path:
    data = json.loads(src.read_text())
    for bench in data["benchmarks"]:
        m = bench["extra_info"]["measurement"]
        if (m["workload"], m["backend"]) == (workload, backend):
            m.update(change)
    dst.write_text(json.dumps(data))
    return dst


@pytest.mark.parametrize(("change", "why"), [
    ({"times_ms": [0.55] * 10 + [0.7] * 10}, "rel std of FlashCore / cudnn (paired)"),  # slower in later rounds
    ({"planted": "kernel debug_fault 4"}, "planted test-only fault"),
    ({"available": False, "why": "crashed", "times_ms": [], "rounds": [], "clock_mhz": []},
     "FlashCore not measured (crashed)"),
    ({"rounds": [], "pairing": ""}, "FlashCore and cudnn were not timed in the same rounds"),
])
def test_update_baseline_refuses_a_noisy_planted_or_missing_flashcore(
        repo_copy: Path, capsys: pytest.CaptureFixture[str], change: dict[str, object], why: str) -> None:
    bad = _rewrite(SUITE, repo_copy / "bad.json", "decode", "flashcore", **change)
    assert cli.main(["bench", "--from", str(bad), "--update-baseline"]) == 1
    err = capsys.readouterr().err
    assert "not writing" in err and f"decode: {why}" in err
    assert not (repo_copy / "gates" / "baselines" / "bench-h100.json").exists()


def test_bench_without_a_gpu_says_so(repo_copy: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.support import gpu

    monkeypatch.setattr(gpu, "cuda_unavailable_reason", lambda: gpu.NO_GPU_LINE)
    assert cli.main(["bench"]) == 1
    assert gpu.NO_GPU_LINE in capsys.readouterr().err


def test_baseline_problems_lists_every_workload(gates_dir: Path) -> None:
    settings = load_bench_settings(load_config(gates_dir))
    assert bench_cli.baseline_problems(read_run(SUITE), settings) == []
    strict = dataclasses.replace(settings, stored_run=dataclasses.replace(settings.stored_run, max_rel_std=1e-9))
    problems = bench_cli.baseline_problems(read_run(SUITE), strict)
    assert len(problems) == 3 and all("(paired)" in p for p in problems)


def test_a_stored_long_context_ratio_may_spread_what_the_gates_accept_there(gates_dir: Path) -> None:
    """The perf gates judge long-context ratios (and their stored ones) at long_context_max_rel_std: a clean H200
    suite was refused for long-64k-causal at 2.33 % under the 2 % of the other workloads. The same spread stays
    refused on a prefill workload."""
    settings = load_bench_settings(load_config(gates_dir))
    run = read_run(SUITE)
    prefill = run.get("prefill-d128", "flashcore")
    assert prefill is not None
    long_spec = dataclasses.replace(prefill.spec, kind="long-context")
    limit = settings.stored_run.spread_limit
    assert limit(long_spec) == 0.04 and limit(prefill.spec) == 0.02
    spread = paired.speed_ratio(prefill, run.get("prefill-d128", settings.stored_run.reference_for(prefill.spec)))
    assert spread is not None
    between = dataclasses.replace(settings, stored_run=dataclasses.replace(
        settings.stored_run, max_rel_std=spread.rel_std / 2, long_context_max_rel_std=spread.rel_std * 2))
    refused = bench_cli.baseline_problems(run, between)
    assert any(p.startswith("prefill-d128: rel std") for p in refused)
    as_long = dataclasses.replace(run, measurements={k: dataclasses.replace(m, spec=long_spec)
                                                     if m.workload == "prefill-d128" else m
                                                     for k, m in run.measurements.items()})
    assert not any(p.startswith("prefill-d128:") for p in bench_cli.baseline_problems(as_long, between))


def test_update_baseline_refuses_a_run_without_the_reference(repo_copy: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(SUITE.read_text())
    data["benchmarks"] = [b for b in data["benchmarks"] if b["extra_info"]["measurement"]["backend"] != "fa2"]
    (repo_copy / "nofa2.json").write_text(json.dumps(data))
    assert cli.main(["bench", "--from", "nofa2.json", "--update-baseline"]) == 1
    assert "prefill-d128: fa2 (the regression reference) not measured (not in the run)" in capsys.readouterr().err


def test_from_json_with_workloads_keeps_only_those_and_stores_only_those(repo_copy: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "--from", str(SUITE), "--workloads", "prefill-d128", "--update-baseline"]) == 0
    out = capsys.readouterr().out
    assert "left out of" in out and "decode, prefill-d128-fp16" in out.split("left out of", 1)[1].splitlines()[0]
    rows = [line.split()[0] for line in out.splitlines() if line.startswith(("prefill", "decode", "sweep"))]
    assert rows == ["prefill-d128"]
    (stored,) = (repo_copy / "gates" / "baselines").glob("bench-*.json")
    assert {w for w, _ in read_run(stored).measurements} == {"prefill-d128"}


def test_from_json_with_an_unknown_workload_is_a_config_error(repo_copy: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bench", "--from", str(SUITE), "--workloads", "no-such-workload"]) == bench_cli.EXIT_CONFIG
    assert "no-such-workload" in capsys.readouterr().err


def _suite_runs(monkeypatch: pytest.MonkeyPatch, files: list[Path]) -> list[str]:
    """bench_cli.run_suite replaced: each call returns the next of `files`; the workloads each call asked for."""
    from harness.support import gpu

    asked: list[str] = []

    def fake(args: argparse.Namespace, out: Path) -> tuple[int, Path]:
        asked.append(args.workloads)
        file = files[len(asked) - 1]
        return (1, file) if file.name.startswith("failed") else (0, file)

    monkeypatch.setattr(gpu, "cuda_unavailable_reason", lambda: None)
    monkeypatch.setattr(bench_cli, "run_suite", fake)
    return asked


def test_update_baseline_times_a_noisy_workload_again_and_stores_the_settled_run(
        repo_copy: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    noisy = _rewrite(SUITE, repo_copy / "noisy.json", "decode", "flashcore", times_ms=[0.55] * 10 + [0.7] * 10)
    asked = _suite_runs(monkeypatch, [noisy, SUITE])
    assert cli.main(["bench", "--out", "out", "--update-baseline"]) == 0
    assert asked == ["", "decode"]  # the suite, then only the noisy workload (every backend of it)
    assert "decode: the stored ratio spread above its limit; timing it again (1 of 2)" in capsys.readouterr().err
    (stored,) = (repo_copy / "gates" / "baselines").glob("bench-*.json")
    got, clean, first = read_run(stored), read_run(SUITE), read_run(noisy)
    assert got.get("decode", "flashcore") == clean.get("decode", "flashcore")
    assert all(got.get(w, b) == first.get(w, b) for w, b in first.measurements if w != "decode")
    assert f"{noisy} + {SUITE}" in json.loads(stored.read_text())["source"]


def test_update_baseline_refuses_a_workload_noisy_every_time(
        repo_copy: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    noisy = _rewrite(SUITE, repo_copy / "noisy.json", "decode", "flashcore", times_ms=[0.55] * 10 + [0.7] * 10)
    asked = _suite_runs(monkeypatch, [noisy, noisy, noisy, noisy])
    assert cli.main(["bench", "--out", "out", "--update-baseline"]) == 1
    assert asked == ["", "decode", "decode"]  # stored_run.remeasure: 2, then refused
    assert "decode: rel std of FlashCore / cudnn (paired)" in capsys.readouterr().err
    assert not (repo_copy / "gates" / "baselines").exists() or not list((repo_copy / "gates" / "baselines").iterdir())


def test_a_run_refused_for_more_than_spread_is_not_timed_again(
        repo_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    both = _rewrite(SUITE, repo_copy / "noisy.json", "decode", "flashcore", times_ms=[0.55] * 10 + [0.7] * 10)
    both = _rewrite(both, repo_copy / "both.json", "prefill-d128", "flashcore", planted="kernel debug_fault 4")
    asked = _suite_runs(monkeypatch, [both, SUITE])
    assert cli.main(["bench", "--out", "out", "--update-baseline"]) == 1
    assert asked == [""]  # a planted fault: timing decode again could not make this run storable


@pytest.mark.parametrize("again", ["without-cudnn", "failed"])
def test_a_second_measurement_that_lost_a_backend_or_failed_never_replaces_the_first(
        repo_copy: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], again: str) -> None:
    """A re-run whose suite failed, or that recorded fewer backends of the workload (a test that errored), is not
    merged: the stored run would have lost the workload's regression reference without a word."""
    noisy = _rewrite(SUITE, repo_copy / "noisy.json", "decode", "flashcore", times_ms=[0.55] * 10 + [0.7] * 10)
    data = json.loads(SUITE.read_text())
    data["benchmarks"] = [b for b in data["benchmarks"] if (b["extra_info"]["measurement"]["workload"],
                                                            b["extra_info"]["measurement"]["backend"]) !=
                          ("decode", "cudnn")]
    second = repo_copy / ("failed.json" if again == "failed" else "partial.json")
    second.write_text(json.dumps(data if again == "without-cudnn" else json.loads(SUITE.read_text())))
    asked = _suite_runs(monkeypatch, [noisy, second])
    assert cli.main(["bench", "--out", "out", "--update-baseline"]) == 1
    assert asked == ["", "decode"]
    err = capsys.readouterr().err
    assert ("the suite exited 1" if again == "failed" else "not every backend measured again") in err
    assert "decode: rel std of FlashCore / cudnn (paired)" in err  # the first, noisy measurement stands: refused
