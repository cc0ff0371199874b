"""Readers of a stored run (render, merge) trust nothing its checks contradict, merge joins only the distinct shares
of one run, and a large run's results.json stays small with the whole run in a sidecar read through it. Each attack
is a hand-edited file fed to the command; the test asserts the verdict."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.config import load_config
from harness.render import write_all
from harness.render.json_out import FULL_FILE, RESULTS_MAX_BYTES
from harness.render.stored import StoredRunError, read_run
from harness.results import Check, GateResult, RunResult, Status, gate_status, status_contradictions
from harness.shard import load_shard_settings
from harness.shard_runners import shard_gates

REPO = Path(__file__).resolve().parent.parent
PHASE = 7


def _ok(workload: str = "w") -> Check:
    return Check(workload, "max_abs_err", 2e-3, 1e-4, Status.PASS, margin=1.9e-3)


def _share(i: int, n: int, **env: Any) -> dict[str, Any]:
    """Share i of n of one run, every gate passing on one check, as `gate --shard i/n --run-id r` writes it."""
    config = load_config(REPO / "gates")
    names = shard_gates([g.name for g in config.gates_through(PHASE)], i, n, load_shard_settings(REPO / "gates"))
    environment = {"git_commit": "c" * 40, "git_dirty": False, "seed": 11, "shard": f"{i}/{n}", "shard_run": "r",
                   **env}
    run = RunResult(f"r-{i}of{n}", PHASE, tuple(GateResult(g, 1, Status.PASS, (_ok(),)) for g in names),
                    environment, "2026-01-01T00:00:00Z", 1.0)
    return run.to_dict()


def _write(tmp_path: Path, name: str, data: dict[str, Any]) -> str:
    f = tmp_path / name / "results.json"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(json.dumps(data))
    return str(f)


def _merge(tmp_path: Path, *files: str, extra: tuple[str, ...] = ()) -> int:
    return cli.main(["merge", "--phase", str(PHASE), "--out", str(tmp_path / "merged"), *extra, *files])


# ---- statuses recomputed ---------------------------------------------------------------------------------------


def _pass_over_a_failing_check(g: dict[str, Any]) -> None:
    g["checks"] = [{**g["checks"][0], "status": "fail", "measured": 0.5}]


def _pass_without_checks(g: dict[str, Any]) -> None:
    g["checks"] = []


def _pass_outside_its_threshold(g: dict[str, Any]) -> None:
    g["checks"][0]["measured"] = 0.5  # the check still says pass: 0.5 <= 2e-3 does not hold


ATTACKS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "gate pass whose only check fails": (_pass_over_a_failing_check, "stored pass, its 1 checks give fail"),
    "gate pass without any check": (_pass_without_checks, "stored pass, its no checks: error"),
    "check pass outside its threshold": (_pass_outside_its_threshold, "stored pass, but 0.5 <= 0.002 does not hold"),
}


@pytest.mark.parametrize("attack", ATTACKS)
def test_render_refuses_a_stored_status_its_checks_contradict(tmp_path: Path, attack: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    edit, says = ATTACKS[attack]
    data = _share(1, 1)
    edit(data["gates"][1])
    f = _write(tmp_path, "edited", data)
    assert cli.main(["render", f, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f in err and f"gate {data['gates'][1]['name']}" in err and says in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("attack", ATTACKS)
def test_merge_refuses_a_share_whose_statuses_its_checks_contradict(tmp_path: Path, attack: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    edit, says = ATTACKS[attack]
    one, two = _share(1, 2), _share(2, 2)
    edit(two["gates"][-1])
    files = [_write(tmp_path, "s1", one), _write(tmp_path, "s2", two)]
    assert _merge(tmp_path, *files) == 2
    err = capsys.readouterr().err
    assert files[1] in err and f"gate {two['gates'][-1]['name']}" in err and says in err
    assert not (tmp_path / "merged").exists()


def test_every_gate_pass_with_no_checks_and_every_phase_pass_is_refused(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The whole file hand-made green: every gate pass without a check; no phase can come out PASS."""
    data = _share(1, 1)
    for g in data["gates"]:
        g["checks"] = []
    assert cli.main(["render", _write(tmp_path, "all", data), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.count("no checks: error") == 5  # the first five named, then counted
    assert all(gate_status(Status.PASS, ()) is Status.ERROR for _ in data["gates"])


def test_a_phase_cannot_pass_over_a_failing_gate() -> None:
    """A phase's status is never read from a file: it is the worst of its (verified) gates."""
    from harness.render.format import phase_summaries

    run = RunResult("r", 1, (GateResult("build", 1, Status.PASS, (_ok(),)),
                             GateResult("correctness", 1, Status.FAIL, (Check("w", "m", 1.0, 2.0, Status.FAIL),))),
                    {}, "", 1.0)
    assert status_contradictions(run.gates) == []
    assert [p.status for p in phase_summaries(run)] == [Status.FAIL]


# ---- merge: the shares of one run ------------------------------------------------------------------------------


@pytest.mark.parametrize("field, other", [("git_commit", "d" * 40), ("shard_run", "another-run"), ("seed", 12),
                                          ("git_dirty", True)])
def test_merge_refuses_shares_of_different_runs(tmp_path: Path, field: str, other: Any,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    files = [_write(tmp_path, "s1", _share(1, 2)), _write(tmp_path, "s2", _share(2, 2, **{field: other}))]
    assert _merge(tmp_path, *files) == 2
    err = capsys.readouterr().err
    assert f"environment.{field} differs" in err and files[0] in err and files[1] in err


def test_merge_refuses_different_shard_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [_write(tmp_path, "s1", _share(1, 2)), _write(tmp_path, "s2", _share(2, 3))]
    assert _merge(tmp_path, *files) == 2
    assert "different shard counts" in (err := capsys.readouterr().err) and "1/2" in err and "2/3" in err


def test_merge_refuses_two_files_claiming_one_share(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = [_write(tmp_path, "a", _share(1, 2)), _write(tmp_path, "b", _share(1, 2))]
    assert _merge(tmp_path, *files) == 2
    assert f"{files[0]} and {files[1]} both claim share 1/2" in capsys.readouterr().err


def test_merge_refuses_overlapping_shares(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Share 2 also carries a gate of share 1 (not one every share runs): two verdicts for one gate."""
    one, two = _share(1, 2), _share(2, 2)
    first = set(load_shard_settings(REPO / "gates").first)
    stolen = next(g for g in one["gates"] if g["name"] not in first)
    two["gates"].append(copy.deepcopy(stolen))
    files = [_write(tmp_path, "s1", one), _write(tmp_path, "s2", two)]
    assert _merge(tmp_path, *files) == 2
    assert f"both ran gate {stolen['name']} (overlapping shares)" in capsys.readouterr().err


def test_merge_refuses_a_file_that_is_not_a_share(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = _share(1, 1)
    del whole["environment"]["shard"]
    assert _merge(tmp_path, _write(tmp_path, "w", whole)) == 2
    assert "not a share of a run" in capsys.readouterr().err


def test_merge_joins_the_shares_of_one_run_and_reads_their_exit_codes(tmp_path: Path) -> None:
    files = [_write(tmp_path, f"s{i}", _share(i, 2)) for i in (1, 2)]
    for f in files:
        (Path(f).parent / "exit-code").write_text("0\n")
    assert _merge(tmp_path, *files, extra=("--exit-codes",)) == 0
    (Path(files[0]).parent / "exit-code").write_text("1\n")  # share 1 failed after its passing report
    assert _merge(tmp_path, *files, extra=("--exit-codes",)) == 1
    merged = read_run(tmp_path / "merged/results.json")
    assert [g.name for g in merged.gates if g.status is not Status.PASS] == ["share1of2-exit-code"]
    failing = _share(1, 2)  # a failing share whose make exited 2 (a failed recipe): consistent, no extra entry
    failing["gates"][-1]["checks"][0] |= {"status": "fail", "measured": 0.5}
    failing["gates"][-1]["status"] = failing["status"] = "fail"
    files[0] = _write(tmp_path, "f1", failing)
    (Path(files[0]).parent / "exit-code").write_text("2\n")
    assert _merge(tmp_path, *files, extra=("--exit-codes",)) == 1
    merged = read_run(tmp_path / "merged/results.json")
    assert [g.name for g in merged.gates if g.status is not Status.PASS] == [failing["gates"][-1]["name"]]
    (Path(files[0]).parent / "exit-code").write_text("0\n")  # and a failing share that exited 0 is one too
    assert _merge(tmp_path, *files, extra=("--exit-codes",)) == 1
    assert "share1of2-exit-code" in [g.name for g in read_run(tmp_path / "merged/results.json").gates]


# ---- a large run: a small results.json, the whole run in its sidecar --------------------------------------------


def _large_run(gates: int = 4, checks: int = 2000) -> RunResult:
    """Thousands of checks with long messages and large details: many times the results.json budget."""
    rows = tuple(Check(f"workload-{j}-" + "x" * 40, "max_abs_err", 2e-3, 1e-4 if j % 97 else 3e-3,
                       Status.PASS if j % 97 else Status.FAIL, message="m" * 300) for j in range(checks))
    return RunResult("big", PHASE, tuple(
        GateResult(f"gate-{i}", 1 + i % PHASE, Status.FAIL, rows, message="why " * 2000, elapsed_s=1.0,
                   details={"rows": ["d" * 200] * 500}) for i in range(gates)), {"gpu": "H100"}, "", 5.0)


def test_a_large_run_keeps_results_json_under_its_budget_and_reads_back_whole(tmp_path: Path) -> None:
    run = _large_run()
    paths = write_all(run, tmp_path)
    summary = json.loads(paths["json"].read_text())
    assert paths["json"].stat().st_size <= RESULTS_MAX_BYTES and paths["full"].name == FULL_FILE
    assert summary["full"]["file"] == FULL_FILE and summary["status"] == "fail"
    assert summary["gates"][0]["check_counts"] == {"pass": 1979, "fail": 21}
    assert len(summary["gates"][0]["failing_checks"]) == 10 and summary["gates"][0]["failing_checks_left_out"] == 11
    assert read_run(paths["json"]).to_dict() == json.loads(json.dumps(run.to_dict()))
    assert cli.main(["render", str(paths["json"]), "--out", str(tmp_path / "again")]) == 0
    assert read_run(tmp_path / "again/results.json").to_dict() == read_run(paths["json"]).to_dict()
    small = write_all(_large_run(gates=1, checks=3), tmp_path)  # a small run again: no stale sidecar left
    assert "full" not in small and not (tmp_path / FULL_FILE).exists()


def test_a_summary_and_its_sidecar_must_agree(tmp_path: Path) -> None:
    paths = write_all(_large_run(gates=2), tmp_path)
    summary = json.loads(paths["json"].read_text())
    edited = copy.deepcopy(summary)
    edited["gates"][0]["status"] = edited["status"] = "pass"  # the summary hand-made green
    paths["json"].write_text(json.dumps(edited))
    with pytest.raises(StoredRunError, match="differ from results-full.json.xz's: one of the two was edited"):
        read_run(paths["json"])
    paths["json"].write_text(json.dumps(summary))
    import lzma

    data = json.loads(lzma.decompress(paths["full"].read_bytes()))
    for g in data["gates"]:  # the sidecar hand-made green
        g["status"] = "pass"
        g["checks"] = [c | {"status": "pass"} for c in g["checks"]]
    paths["full"].write_bytes(lzma.compress(json.dumps(data).encode()))
    with pytest.raises(StoredRunError, match="is not the file it names"):
        read_run(paths["json"])
    summary["full"]["sha256"] = hashlib.sha256(paths["full"].read_bytes()).hexdigest()  # and the digest updated
    paths["json"].write_text(json.dumps(summary))
    with pytest.raises(StoredRunError, match="one of the two was edited"):
        read_run(paths["json"])
    paths["full"].unlink()
    with pytest.raises(StoredRunError, match="keep the sidecar beside results.json"):
        read_run(paths["json"])
