"""CLI: `gate` writes the run directory, prints the table and exits 0 only when every gate passed; a bad gate
file exits 2 with the ConfigError message and no traceback; `list` prints the config."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch
import yaml

from harness import cli
from harness.gates import registry
from harness.gates.base import Gate, GateContext
from harness.results import Check, GateResult, Status
from harness.support import gpu


class _Passing(Gate):
    """Stands in for a real gate (same params type), so the CLI is tested without nvcc or a GPU."""

    def run(self, ctx: GateContext) -> GateResult:
        return ctx.result([Check("(stand-in)", "ok", None, None, Status.PASS)])


def _stand_in(monkeypatch: pytest.MonkeyPatch, name: str, needs_gpu: bool) -> None:
    real = registry.get(name)
    assert real is not None
    cls = type(f"Passing_{name}", (_Passing,), {"Params": real.Params, "needs_gpu": needs_gpu})
    monkeypatch.setitem(registry._REGISTRY, name, cls)


@pytest.fixture
def in_tmp(tmp_path: Path, gates_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # reports/ lands here
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return tmp_path


def test_gate_without_gpu_writes_report_and_fails(in_tmp: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _stand_in(monkeypatch, "build", needs_gpu=False)
    code = cli.main(["gate", "--phase", "1", "--out", "run"])
    out, err = capsys.readouterr()
    assert code == 1
    data = json.loads((in_tmp / "run/results.json").read_text())
    assert [(g["name"], g["status"]) for g in data["gates"]] == [
        ("build", "pass"), ("correctness", "not_run"), ("determinism", "not_run"), ("sanitizer", "not_run")]
    assert data["notice"] == gpu.NO_GPU_LINE and data["status"] == "not_run"
    assert err.count(gpu.NO_GPU_LINE) == 1
    assert re.search(r"correctness\s+NOT RUN", out)
    assert "report: run" in out
    assert (in_tmp / "run/logs").is_dir()


def test_gate_exits_0_only_when_every_gate_passes(in_tmp: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("build", "correctness", "determinism", "sanitizer"):
        _stand_in(monkeypatch, name, needs_gpu=False)
    assert cli.main(["gate", "--phase", "1"]) == 0
    (run_dir,) = (in_tmp / "reports").iterdir()
    assert re.fullmatch(r"\d{8}T\d{6}Z-phase1-[0-9a-z]+(-dirty)?", run_dir.name)
    assert json.loads((run_dir / "results.json").read_text())["status"] == "pass"
    assert "verdict: PASS" in capsys.readouterr().out
    # a phase without gates in gates/phases.yaml cannot pass on the earlier phases' gates
    for name in registry.names():
        _stand_in(monkeypatch, name, needs_gpu=False)
    assert cli.main(["gate", "--phase", "5", "--out", "p5-all"]) == 0
    phases = in_tmp / "gates/phases.yaml"
    data = yaml.safe_load(phases.read_text())
    data["phases"][5]["gates"] = {}
    phases.write_text(yaml.safe_dump(data))
    assert cli.main(["gate", "--phase", "5", "--out", "p5"]) == 1
    statuses = {g["name"]: g["status"] for g in json.loads((in_tmp / "p5/results.json").read_text())["gates"]}
    assert statuses.pop("phase5-gates") == "error"
    assert set(statuses.values()) == {"pass"}


def test_planted_fault_is_announced(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("build", "correctness", "determinism"):
        _stand_in(monkeypatch, name, needs_gpu=False)
    cli.main(["gate", "--phase", "1", "--out", "f", "--plant-fault", "tail-mask"])
    assert json.loads((in_tmp / "f/results.json").read_text())["notice"].startswith("PLANTED FAULT 1")


def test_bad_yaml_exits_2_with_the_message(in_tmp: Path, gates_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = gates_dir / "workloads.yaml"
    path.write_text(path.read_text().replace("head_dim: 128", "head_dim: 36", 1))
    for argv in (["gate", "--phase", "1", "--gates-dir", str(gates_dir)], ["list", "--gates-dir", str(gates_dir)]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert "workloads.yaml: workloads.prefill-d128.head_dim = 36: must be one of {8, 16, 24, 32, 40," in err
        assert "Traceback" not in err
    assert not (in_tmp / "reports").exists()


def test_phase_missing_from_yaml_exits_2(in_tmp: Path, gates_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = gates_dir / "phases.yaml"
    path.write_text(path.read_text().split("  2:\n")[0])
    assert cli.main(["gate", "--phase", "2", "--gates-dir", str(gates_dir)]) == 2
    assert "phase 2 is not in" in capsys.readouterr().err


def test_list_prints_phases_gates_and_workloads(in_tmp: Path, gates_dir: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["list", "--gates-dir", str(gates_dir)]) == 0
    out = capsys.readouterr().out
    assert "phase 1: skeleton" in out and "phase 7: hardening" in out
    assert "correctness:" in out and "fp16_max_abs=0.002" in out
    assert re.search(r"gqa\s+edge\s+B2 H32/8 S2048x2048 D128 bf16 causal", out)


def test_missing_renderers_fall_back_to_results_json(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stand_in(monkeypatch, "build", needs_gpu=False)
    monkeypatch.setitem(sys.modules, "harness.render", None)  # `from harness.render import ...` -> ImportError
    monkeypatch.setitem(sys.modules, "harness.render.terminal", __import__("harness.render.terminal").render.terminal)
    assert cli.main(["gate", "--phase", "1", "--out", "run"]) == 1
    assert sorted(p.name for p in (in_tmp / "run").iterdir()) == ["logs", "results.json"]


def test_run_id_names_time_phase_and_commit() -> None:
    env = {"git_commit": "0123456789abcdef", "git_dirty": True}
    assert re.fullmatch(r"\d{8}T\d{6}Z-phase4-0123456-dirty", cli.make_run_id(4, env))
    assert cli.make_run_id(1, {}).endswith("-phase1-nocommit")


def test_terminal_table_lists_gates_and_the_checks_that_failed() -> None:
    from harness.render.terminal import render
    from harness.results import RunResult

    bad = Check("s17-causal", "err_vs_fp32", 1e-3, 5e-3, Status.FAIL, message="max|ours-ref32| 0.005")
    gates = (GateResult("build", 1, Status.PASS, (Check("(library)", "arch", None, None, Status.PASS),), "ok", 1.25),
             GateResult("correctness", 1, Status.FAIL, (bad,), "1 of 1 checks not passed", 3.0))
    text = render(RunResult("rid", 1, gates, {}, "t", 4.0, notice="a notice"))
    lines = text.splitlines()
    assert re.search(r"^1\s+build\s+PASS\s+1\.2s\s+ok$", text, re.M)
    assert "    - s17-causal err_vs_fp32: FAIL: max|ours-ref32| 0.005" in lines
    assert "verdict: FAIL  (1 of 2 gates did not pass)" in lines
    assert lines[-1] == "a notice"


def test_list_into_a_closed_pipe_ends_quietly() -> None:
    import subprocess

    for reader in ("head -1", "true"):  # reads a line and leaves / never reads
        proc = subprocess.run(f"{sys.executable} -m harness list | {reader}", shell=True, capture_output=True,
                              text=True, cwd=Path(__file__).resolve().parent.parent)
        assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


def test_selftest_without_a_gpu_says_so_and_runs_nothing(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from harness import selftest

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(selftest, "judge", lambda *a: pytest.fail("a case ran"))
    assert selftest.main() == 1
    assert "needs an SM 9.0 GPU" in capsys.readouterr().err


def test_make_help_names_every_target_and_variable() -> None:
    import re
    import subprocess

    repo = Path(__file__).resolve().parent.parent
    text = subprocess.run(["make", "-s", "help"], cwd=repo, capture_output=True, text=True, check=True).stdout
    makefiles = (repo / "Makefile").read_text() + (repo / "kernel/kernel.mk").read_text()
    phony = {t for line in re.findall(r"^\.PHONY:(.*)$", makefiles, re.M) for t in line.split()}
    phony = {t for t in phony if not t.startswith("$(") and not t.startswith("gate-phase")} - {"help", "distclean"}
    assert {t for t in phony if f"make {t}" not in text and f"| {t}" not in text} == set()
    variables = set(re.findall(r"^(\w+)\s*\?=", makefiles, re.M))
    assert {v for v in variables if f"{v}=" not in text} == set()


def test_a_gate_run_is_in_the_history_before_its_report_is_written(in_tmp: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The second run's report draws both runs (its own included); --no-history leaves both out."""
    for name in ("build", "correctness", "determinism", "sanitizer"):
        _stand_in(monkeypatch, name, needs_gpu=False)
    monkeypatch.setenv("FLASHCORE_HISTORY", str(in_tmp / "h.sqlite"))
    ids = iter(f"2026010{i}T000000Z-phase1-abc1234" for i in range(1, 4))  # run ids are per second
    monkeypatch.setattr(cli, "make_run_id", lambda phase, environment: next(ids))
    assert cli.main(["gate", "--phase", "1", "--out", "one"]) == 0
    assert "a trend needs two" in (in_tmp / "one/index.html").read_text()
    assert cli.main(["gate", "--phase", "1", "--out", "two"]) == 0
    html = (in_tmp / "two/index.html").read_text()
    assert 'id="trends"' in html and "The last 2 runs" in html and "<svg" in html  # the gates' wall time
    assert "history: recorded in" in capsys.readouterr().out
    assert cli.main(["gate", "--phase", "1", "--out", "off", "--no-history"]) == 0
    assert 'id="trends"' not in (in_tmp / "off/index.html").read_text()
