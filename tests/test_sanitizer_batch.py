"""Several workloads of one tool in one compute-sanitizer process (harness/sanitizer/batch.py, runs.py), on the CPU
with a stand-in compute-sanitizer that runs the batch's workloads as the driver would (a BEGIN and a RESULT line each)
and plants a finding in the workloads whose flags hold a marker: a clean batch passes each of its workloads in one
process; a finding fails exactly the workload that has it (each runs again alone); a finding only the batch shows
stays a failing check; a batch missing a workload's completion line never passes."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, make_context, workload
from test_render_samples import gate, run_of
from test_sanitizer_gate import install_fake

from harness.gates.sanitizer import SanitizerGate, SanitizerParams, run_sanitizer
from harness.render import render_html
from harness.results import GateResult, Status
from harness.sanitizer import batch, parallel
from harness.sanitizer.budget import SUBJECT, Budget
from harness.sanitizer.model import TOOLS

FAKE = '''#!PYTHON
"""Stand-in compute-sanitizer: runs each --next-separated workload of the driver's flags as the driver would; a
workload whose flags hold $FAKE_DIR/bad's text gets a report (with $FAKE_DIR/batch_only: only in a process of several
workloads), one holding $FAKE_DIR/batch_also's text a report in such a process only; one holding $FAKE_DIR/hang's
text hangs after its BEGIN line; $FAKE_DIR/slow: seconds to sleep first; with $FAKE_DIR/drop, the last workload's
RESULT line is missing."""
import os, sys, time
from pathlib import Path
d = Path(os.environ["FAKE_DIR"])
args = sys.argv[1:]
if args[:1] == ["--version"]:
    print("NVIDIA (R) Compute Sanitizer"); print("Version 2025.3.1.0 (fake)"); sys.exit(0)
if args[:1] == ["--help"]:
    print("  --check-bulk-copy arg (=yes)"); print("  --check-warpgroup-mma arg (=yes)"); sys.exit(0)
with open(d / "argv", "a") as f:
    f.write(" ".join(args) + "\\n")
tool = args[args.index("--tool") + 1]
flags = args[next(i for i, a in enumerate(args) if a.endswith("flashcore_driver")) + 1:]
groups = [[]]
for a in flags:
    if a == "--next":
        groups.append([])
    else:
        groups[-1].append(a)
bad = (d / "bad").read_text().strip() if (d / "bad").exists() else None
also = (d / "batch_also").read_text().strip() if (d / "batch_also").exists() else None
hang = (d / "hang").read_text().strip() if (d / "hang").exists() else None
batch_only = (d / "batch_only").exists()
if (d / "slow").exists():
    time.sleep(float((d / "slow").read_text()))
errors = 0
print("========= COMPUTE-SANITIZER")
for i, g in enumerate(groups):
    if len(groups) > 1:
        print(f"BEGIN {i}", flush=True)
    if hang and hang in " ".join(g):
        time.sleep(60)
    if (bad and bad in " ".join(g) and (len(groups) > 1 or not batch_only)) or (
            also and also in " ".join(g) and len(groups) > 1):
        errors += 1
        if tool == "racecheck":
            print("========= Error: Race reported between Write access at k(float *, int)+0xa0 in x.cu:28")
            print("=========     and Read access at k(float *, int)+0xf0 in x.cu:30 [1024 hazards]")
        elif tool == "synccheck":
            print("========= Barrier error detected. Divergent thread(s) in warp.")
            print("=========     at k(float *, int)+0xb0 in x.cu:36")
            print("=========     by thread (32,0,0) in block (0,0,0)")
        elif tool == "initcheck":
            print("========= Uninitialized __global__ memory read of size 4 bytes")
            print("=========     at k(const float *, float *)+0x60 in x.cu:56")
            print("=========     by thread (64,0,0) in block (0,0,0)")
            print("=========     Address 0x7f8ee2800900")
        else:
            print("========= Invalid __global__ write of size 4 bytes")
            print("=========     at k(float *, int, int)+0x80 in x.cu:23")
            print("=========     by thread (255,0,0) in block (0,0,0)")
            print("=========     Access to 0x7f3c3e800400 is out of bounds")
        print("========= ")
    if not ((d / "drop").exists() and i == len(groups) - 1 and len(groups) > 1):
        print("RESULT status=ok max_abs_err=0 nonfinite=0 ms_per_iter=1.0 tflops=0.00")
if tool == "racecheck":
    print(f"========= RACECHECK SUMMARY: {errors} hazard{'' if errors == 1 else 's'} displayed "
          f"({errors} error{'' if errors == 1 else 's'}, 0 warnings)")
else:
    if tool == "memcheck":
        print("========= LEAK SUMMARY: 0 bytes leaked in 0 allocations")
    print(f"========= ERROR SUMMARY: {errors} error{'' if errors == 1 else 's'}")
sys.exit(86 if errors else 0)
'''.replace("PYTHON", sys.executable)

WORKLOADS = (workload("w1", causal=True, hq=4, hkv=1), workload("w2", hq=6, hkv=6, d=128, dtype="fp16"),
             workload("w3", b=3))


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """test_sanitizer_gate's repo root, with this module's batch-aware stand-in as compute-sanitizer."""
    install_fake(tmp_path, monkeypatch)
    (tmp_path / "bin" / "compute-sanitizer").write_text(FAKE)
    monkeypatch.setattr(parallel, "host_facts", lambda: (4, 1, 80_000))
    return tmp_path


def params(batch_s: float = 100.0, timeout_s: int = 30, tools: tuple[str, ...] = TOOLS) -> SanitizerParams:
    return SanitizerParams(workloads=("w1", "w2", "w3"), tools=tools, memcheck_timeout_s=timeout_s,
                           racecheck_timeout_s=timeout_s, synccheck_timeout_s=timeout_s, initcheck_timeout_s=timeout_s,
                           padding=32, suppressions="gates/sanitizer-suppressions.yaml", parallel_max=4,
                           batch_s=batch_s)


def run_gate(root: Path, batch_s: float = 100.0, budget: Budget | None = None, **kw: Any) -> GateResult:
    ctx = make_context(root / "run", "sanitizer", params(batch_s, **kw), WORKLOADS, repo_root=root)
    return SanitizerGate().run(ctx) if budget is None else run_sanitizer(ctx, budget)


def processes(root: Path) -> list[str]:
    return (root / "fake" / "argv").read_text().splitlines()


def test_a_clean_batch_passes_each_workload_in_one_process_per_tool(root: Path) -> None:
    result = run_gate(root)
    assert result.status is Status.PASS, result.message
    assert len(processes(root)) == len(TOOLS)  # one process per tool for the three workloads
    assert all(p.count("--next") == 2 for p in processes(root))
    assert sorted((c.metric, c.workload) for c in result.checks) == sorted((t, w) for t in TOOLS for w in
                                                                           ("w1", "w2", "w3"))
    d = result.details
    assert d["processes_by_tool"] == dict.fromkeys(TOOLS, 1) and len(d["batches"]) == len(TOOLS)
    assert all(b["workloads"] and b["status"] == "pass" for b in d["batches"])
    assert all(r["batch"] in {b["log"] for b in d["batches"]} for r in d["runs"])
    assert "12 runs clean in 4 processes" in result.message
    batch_logs = [x for x in result.logs if "-batch-" in x]
    assert sorted(batch_logs) == sorted(b["log"] for b in d["batches"])  # each batch's log once


def test_batch_s_0_runs_every_workload_alone(root: Path) -> None:
    result = run_gate(root, batch_s=0)
    assert result.status is Status.PASS and len(processes(root)) == 12
    assert not any("--next" in p for p in processes(root)) and result.details["batches"] == []


@pytest.mark.parametrize("tool", TOOLS)
def test_a_finding_fails_exactly_the_workload_that_has_it(root: Path, tool: str) -> None:
    (root / "fake" / "bad").write_text("--heads-q 6")  # w2's flags
    result = run_gate(root)
    assert result.status is Status.FAIL
    failing = {(c.metric, c.workload) for c in result.checks if c.status is not Status.PASS}
    assert failing == {(t, "w2") for t in TOOLS}
    run = next(r for r in result.details["runs"] if r["tool"] == tool and r["workload"] == "w2")
    assert run["findings"] and "batch" not in run  # its own run alone, with its own log
    # per tool: the batch, then each workload alone
    assert len(processes(root)) == len(TOOLS) * 4
    assert all(b["status"] == "fail" for b in result.details["batches"])


def test_the_clean_control_of_the_planted_finding_stays_green(root: Path) -> None:
    (root / "fake" / "bad").write_text("--heads-q 99")  # no workload has it
    assert run_gate(root).status is Status.PASS


def test_a_finding_no_workload_reproduces_alone_still_fails(root: Path) -> None:
    (root / "fake" / "bad").write_text("--heads-q 6")
    (root / "fake" / "batch_only").write_text("")
    result = run_gate(root)
    assert result.status is Status.FAIL
    extra = [c for c in result.checks if c.workload.endswith(" +2 in one run")]
    assert len(extra) == len(TOOLS) and all(c.status is Status.FAIL for c in extra)
    assert all("the workloads alone reported 0" in c.message for c in extra)
    assert all(c.status is Status.PASS for c in result.checks if c.workload in {"w1", "w2", "w3"})


def test_a_batch_missing_a_completion_line_never_passes(root: Path) -> None:
    (root / "fake" / "drop").write_text("")
    result = run_gate(root)
    assert result.status is Status.ERROR
    assert all(b["status"] == "error" for b in result.details["batches"])
    extra = [c for c in result.checks if "in one run" in c.workload]
    assert len(extra) == len(TOOLS) and all("completion line" in c.message for c in extra)


def test_a_batch_finding_beyond_the_runs_alone_still_fails_beside_one_they_reproduce(root: Path) -> None:
    """w2 has a finding alone too; w1 only in a batch: w2 fails, and the batch's extra finding stays a failing check."""
    (root / "fake" / "bad").write_text("--heads-q 6")
    (root / "fake" / "batch_also").write_text("--heads-q 4")  # w1's flags
    result = run_gate(root)
    failing = {(c.metric, c.workload) for c in result.checks if c.status is Status.FAIL}
    assert {(t, "w2") for t in TOOLS} <= failing
    extra = [c for c in result.checks if c.workload.endswith(" +2 in one run")]
    assert len(extra) == len(TOOLS) and all(c.status is Status.FAIL and c.measured == 2 for c in extra)
    assert all("the workloads alone reported 1" in c.message for c in extra)


def test_a_hang_in_a_batch_costs_one_timeout_and_names_its_workload(root: Path) -> None:
    (root / "fake" / "hang").write_text("--heads-q 6")  # w2 hangs after its BEGIN line
    t0 = time.monotonic()
    result = run_gate(root, timeout_s=2, tools=("memcheck",))
    assert time.monotonic() - t0 < 2 * 2 + 5  # the batch's one timeout; w2 not hung again alone
    by = {c.workload: c for c in result.checks}
    assert by["w2"].status is Status.ERROR and "while running this one" in by["w2"].message
    assert by["w1"].status is by["w3"].status is Status.PASS  # run again alone, clean
    assert result.status is Status.ERROR and len(processes(root)) == 3  # the batch, then w1 and w3 alone


def test_a_batch_the_budget_cuts_is_an_error_for_each_workload(root: Path) -> None:
    (root / "fake" / "slow").write_text("3")
    result = run_gate(root, budget=Budget(1.0), tools=("memcheck",))
    assert result.status is Status.ERROR
    by = {c.workload: c for c in result.checks}
    assert all(by[w].status is Status.ERROR and "budget" in by[w].message for w in ("w1", "w2", "w3"))
    assert by[SUBJECT].status is Status.ERROR and len(processes(root)) == 1  # no second try


def test_one_at_a_time_batches_the_same(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "host_facts", lambda: (1, 1, None))
    result = run_gate(root)
    assert result.status is Status.PASS and len(processes(root)) == len(TOOLS)


def test_the_report_shows_each_batch_log_once(root: Path) -> None:
    (root / "fake" / "bad").write_text("--heads-q 6")
    result = run_gate(root)
    html = render_html(run_of(gate("build", 1, Status.PASS), result))
    assert html.count('class="sanitizer-log sanitizer-batch"') == len(TOOLS)
    assert html.count('data-workload="w2"') >= len(TOOLS)  # w2's own runs alone, with their logs
    assert "each ran again" in html


def test_pack_keeps_the_cap_one_tool_per_batch_and_every_run_once() -> None:
    plan = [(t, w) for t in ("memcheck", "racecheck") for w in ("a", "b", "c", "d", "big")]
    work = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 0.5, "big": 20.0}
    batches = batch.pack(plan, lambda t, w: work[w], lambda t: 2.0, 8.0)
    assert sorted(i for b in batches for i in b) == list(range(len(plan)))
    for b in batches:
        assert len({plan[i][0] for i in b}) == 1
        assert len(b) == 1 or batch.batch_cost(b, plan, lambda t, w: work[w], lambda t: 2.0) <= 8.0
    assert [plan[i][1] for i in batches[0]] == ["big"]  # alone: it reaches the cap by itself
    assert batch.pack(plan, lambda t, w: work[w], lambda t: 2.0, 0) == [[i] for i in (4, 2, 1, 0, 3, 9, 7, 6, 5, 8)]


def test_series_separates_each_workloads_flags() -> None:
    assert batch.series([["--batch", "1"], ["--batch", "2"], ["--batch", "3"]]) == [
        "--batch", "1", "--next", "--batch", "2", "--next", "--batch", "3"]
    assert batch.series([["--batch", "1"]]) == ["--batch", "1"]


def test_the_driver_splits_its_flags_at_next() -> None:
    """kernel/driver.cu runs each --next-separated group as its own workload and prints BEGIN before each."""
    src = (REPO / "kernel" / "driver.cu").read_text()
    assert '"--next"' in src and 'printf("BEGIN %d\\n"' in src and batch.SEPARATOR == "--next"


def test_the_shipped_gates_batch() -> None:
    from harness.config import load_config

    config = load_config(REPO / "gates")
    for name in ("sanitizer", "sanitizer-all"):
        spec = next(g for g in config.gates_through(7) if g.name == name)
        assert spec.params.batch_s > 0
    assert dataclasses.fields(SanitizerParams)  # the knob is a param (strict YAML refuses unknown keys)

