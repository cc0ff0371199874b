"""README's table of current numbers (harness/numbers.py): it is the newest committed evidence's, and the
generator picks that evidence, reads its perf gates and writes the block as they say."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

from harness import numbers
from harness.cli import main as harness_main
from harness.results import Check, GateResult, RunResult, Status

REPO = Path(__file__).resolve().parents[1]


def _perf_gate(name: str, backend: str, ratios: dict[str, float | None], geomean: float | None = None,
               gpu: str = "NVIDIA H200") -> GateResult:
    checks = [Check(w, f"speed_vs_{backend}", 0.9, r, Status.PASS if r is not None else Status.ERROR, ">=")
              for w, r in ratios.items()]
    if geomean is not None:
        checks.append(Check(f"geomean over {len(ratios)} workloads", f"geomean_speed_vs_{backend}", 0.95, geomean,
                            Status.PASS, ">="))
    status = Status.PASS if all(c.status is Status.PASS for c in checks) else Status.ERROR
    rows = [{"backend": "flashcore", "label": "FlashCore"}, {"backend": backend, "label": backend.upper()}]
    return GateResult(name, 4, status, tuple(checks), details={
        "gated": [backend], "workloads": [{"name": w, "rows": rows} for w in ratios],
        "gpu": {"index": 0, "name": gpu}})


def _run(started: str, gates: list[GateResult], commit: str = "abc1234def", phase: int = 7) -> RunResult:
    env = {"gpu": "NVIDIA H100 80GB HBM3", "git_commit": commit, "git_dirty": False}
    return RunResult(f"run-{commit[:7]}", phase, tuple(gates), env, started, 1.0)


def _store(directory: Path, name: str, run: RunResult) -> Path:
    path = directory / name
    text = json.dumps(run.to_dict())
    if name.endswith(".xz"):
        path.write_bytes(lzma.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def _fa3(**ratios: float | None) -> GateResult:
    return _perf_gate("perf-fa3", "fa3", dict(ratios), geomean=0.97)


def test_readme_holds_the_newest_evidence_numbers() -> None:
    block = numbers.current_block(REPO / "reports" / "evidence", REPO / "gates", shown_root=REPO)
    readme = (REPO / "README.md").read_text()
    assert numbers.replace_block(readme, block) == readme, \
        "README's numbers are not the newest evidence's: run python -m harness numbers --write README.md"


def test_the_newest_complete_run_is_picked_over_older_and_partial_ones(tmp_path: Path) -> None:
    _store(tmp_path, "old.json.xz", _run("2026-01-01T00:00:00Z", [_fa3(a=0.9)], commit="1111111"))
    newest = _store(tmp_path, "new.json", _run("2026-03-01T00:00:00Z", [_fa3(a=1.0)], commit="2222222"))
    # later, but a re-run of another gate alone: not the whole phase's perf gates
    _store(tmp_path, "rerun.json", _run("2026-04-01T00:00:00Z", [_perf_gate("perf-fa2", "fa2", {"a": 2.0})]))
    _store(tmp_path, "phase4.json", _run("2026-05-01T00:00:00Z", [_fa3(a=1.1)], phase=4))
    (tmp_path / "bench.json").write_text(json.dumps({"benchmarks": []}))  # not a stored run
    (tmp_path / "broken.json.xz").write_bytes(b"not xz")
    path, run = numbers.latest_run(tmp_path, 7, ["perf-fa3"])
    assert path == newest and run.environment["git_commit"] == "2222222"


def test_no_complete_run_is_an_error_naming_the_directory_and_the_gates(tmp_path: Path) -> None:
    _store(tmp_path, "rerun.json", _run("2026-04-01T00:00:00Z", [_perf_gate("perf-fa2", "fa2", {"a": 2.0})]))
    with pytest.raises(numbers.NumbersError, match=rf"{tmp_path}.*perf-fa2, perf-fa3"):
        numbers.latest_run(tmp_path, 7, ["perf-fa2", "perf-fa3"])


def test_a_row_gives_the_geomean_worst_best_bar_and_verdict() -> None:
    [row] = numbers.gate_rows(_fa3(a=0.95, b=1.04, c=0.99))
    assert (row.gate, row.against, row.workloads) == ("perf-fa3", "FA3", 3)
    assert row.geomean == 0.97 and row.geomean_of == "3"
    assert row.worst == ("a", 0.95) and row.best == ("b", 1.04)
    assert row.bar == ">= 0.90x each, >= 0.95x geomean" and row.verdict == "pass"


def test_an_errored_check_is_counted_but_never_the_worst_or_best() -> None:
    [row] = numbers.gate_rows(_perf_gate("perf-fa3", "fa3", {"a": None, "b": 1.01}))
    assert row.workloads == 2 and row.worst == row.best == ("b", 1.01) and row.verdict == "error"


def test_flashcore_against_its_own_default_tiles_is_not_a_baseline_row() -> None:
    assert numbers.gate_rows(_perf_gate("autotune-gain", "flashcore-default", {"a": 1.03})) == []
    _, gates = numbers.perf_gates(REPO / "gates")
    assert "autotune-gain" not in gates and {"perf-fa3", "perf-cudnn", "perf-fa2"} <= set(gates)


def test_the_block_names_commit_gpu_verdict_and_file() -> None:
    run = _run("2026-03-01T12:00:00Z", [_fa3(a=0.95, b=1.04)], commit="2222222aaaa")
    block = numbers.render_block(run, "reports/evidence/x.json.xz", ["perf-fa3"])
    first = " ".join(block.split("\n\n")[0].splitlines())  # the header, wrapped to README's width
    assert all(len(line) <= numbers.WIDTH for line in block.split("\n\n")[0].splitlines())
    for part in ("2222222", "NVIDIA H200", "2026-03-01", "pass", "1 pass", "`reports/evidence/x.json.xz`"):
        assert part in first
    assert "| `perf-fa3` | FA3 | 2 | 0.970x of 2 | 0.950x a | 1.040x b | >= 0.90x each, >= 0.95x geomean | pass |" \
        in block


def test_a_run_of_only_some_gates_says_how_many_of_the_phase_it_ran() -> None:
    run = _run("2026-03-01T12:00:00Z", [_fa3(a=0.95, b=1.04)], commit="2222222aaaa")
    partial = numbers.render_block(run, "x.json.xz", ["perf-fa3"], phase_gates=25)
    assert partial.startswith("1 of the 25 gates of `make gate-phase7` (`--only`) at 2222222")
    whole = numbers.render_block(run, "x.json.xz", ["perf-fa3"], phase_gates=1)
    assert whole.startswith("`make gate-phase7` at 2222222")


def test_replace_block_needs_both_markers_and_keeps_the_rest() -> None:
    text = f"intro\n{numbers.BEGIN}\nold table\n{numbers.END}\noutro\n"
    new = numbers.replace_block(text, "new table")
    assert new == f"intro\n{numbers.BEGIN}\nnew table\n{numbers.END}\noutro\n"
    assert numbers.replace_block(new, "new table") == new
    with pytest.raises(numbers.NumbersError, match="README.md: no"):
        numbers.replace_block("intro only\n", "new table")


def test_the_cli_checks_then_writes_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    _, gates = numbers.perf_gates(REPO / "gates")
    _store(evidence, "run.json", _run("2026-03-01T00:00:00Z", [_perf_gate(g, "fa3", {"a": 1.0}) for g in gates]))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{numbers.BEGIN}\nstale\n{numbers.END}\n")
    common = ["numbers", "--evidence", str(evidence), "--gates-dir", str(REPO / "gates")]
    assert harness_main([*common, "--check", str(readme)]) == numbers.EXIT_STALE
    assert "python -m harness numbers --write" in capsys.readouterr().err
    assert harness_main([*common, "--write", str(readme)]) == 0
    assert harness_main([*common, "--check", str(readme)]) == 0
    assert "stale" not in readme.read_text() and "| `perf-fa3` | FA3 | 1 |" in readme.read_text()


def test_the_cli_without_evidence_exits_2_saying_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert harness_main(["numbers", "--evidence", str(tmp_path), "--gates-dir", str(REPO / "gates")]) == 2
    assert "no stored phase-7 run" in capsys.readouterr().err
