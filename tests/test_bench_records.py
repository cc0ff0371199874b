"""Measurement records and the JSON files that carry them: the suite's pytest-benchmark JSON, a stored run,
`python -m harness bench --from` (table, anchors) and `--update-baseline`. Fixtures under tests/fixtures/bench
are SYNTHETIC (tests/fixtures/bench/synthesize.py)."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest
from conftest import REPO

from harness import cli
from harness.bench import cli as bench_cli
from harness.bench.record import RUN_SCHEMA, Measurement, RecordError, parse_run, read_run
from harness.gates import perf_verdict as pv
from harness.results import Status

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
    """Today's FlashCore (suite fixture) against the stored one: faster on prefill, within 5 % on decode."""
    now, stored = read_run(SUITE), read_run(STORED)
    for workload, expected in (("prefill-d128", 640.0 / 646.8), ("decode", 3.08 / 3.10)):
        ours = now.get(workload, "flashcore")
        assert ours is not None
        ref, why = pv.stored_measurement(stored, ours, now.gpu)
        check = pv.verdict_regression(workload, ours, ref, why, 0.05, 0.02)
        assert check.status is Status.PASS and check.measured == pytest.approx(expected, rel=1e-3)
    # the same comparison with a stricter margin than decode's 0.6 % gain... still passes (faster is fine),
    # while a 10 % slower run fails
    ours = now.get("decode", "flashcore")
    assert ours is not None
    slow = Measurement(ours.workload, ours.backend, ours.spec, True, times_ms=tuple(t * 1.1 for t in ours.times_ms))
    ref, why = pv.stored_measurement(stored, slow, now.gpu)
    assert pv.verdict_regression("decode", slow, ref, why, 0.05, 0.02).status is Status.FAIL


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
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("workload"))
    assert header.split()[:7] == ["workload", "unit", "flashcore", "fa2", "cudnn", "efficient", "fa3"]
    row = next(line for line in lines if line.startswith("prefill-d128 "))
    assert "646.5" in row and "1.84x" in row  # FlashCore TFLOPS and its speed over FA2
    assert "prefill-d128: fa2 350.9 vs 351 (-0.0 %)" in out  # baselines against the ROADMAP anchors
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
    ({"times_ms": [1.0, 1.2] * 10}, "rel std"),
    ({"planted": "kernel debug_fault 4"}, "planted test-only fault"),
    ({"available": False, "why": "crashed", "times_ms": []}, "FlashCore not measured (crashed)"),
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
    from harness.gates import gpu

    monkeypatch.setattr(gpu, "cuda_unavailable_reason", lambda: gpu.NO_GPU_LINE)
    assert cli.main(["bench"]) == 1
    assert gpu.NO_GPU_LINE in capsys.readouterr().err


def test_baseline_problems_lists_every_workload() -> None:
    assert bench_cli.baseline_problems(read_run(SUITE), 0.02) == []
    assert bench_cli.baseline_problems(read_run(SUITE), 0.001) and all(
        "rel std" in p for p in bench_cli.baseline_problems(read_run(SUITE), 0.001))
