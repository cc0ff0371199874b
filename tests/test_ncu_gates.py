"""ncu throughput gates (ncu-dram, ncu-sm): verdicts on real H100 captures, and the whole run on the CPU with a
stand-in `ncu` script that replays those captures (profiling errors, empty selections and timeouts included)."""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import REPO, make_context

from harness.config import load_config
from harness.gates import ncu as ncu_gate
from harness.gates.base import GateContext
from harness.gates.ncu import NcuThroughputParams, verdict_profile
from harness.ncu.parse import parse_csv
from harness.render import render_html
from harness.results import GateResult, RunResult, Status
from harness.schema import Workload
from harness.selftest import CASES

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
DECODE = Workload("decode", 64, 32, 32, 1, 8192, 128, "bf16", False, "memory-bound", "test")
PREFILL = Workload("prefill-d128", 4, 16, 16, 8192, 8192, 128, "bf16", False, "compute-bound", "test")

FAKE_NCU = '''
import json, os, pathlib, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_NCU_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (build 36398880) (public-release)")
    sys.exit(0)
if "--import" in args:
    if os.environ.get("FAKE_NCU_MODE") == "bad-import":
        print("==ERROR== Failed to open report", file=sys.stderr)
        sys.exit(1)
    report = pathlib.Path(args[args.index("--import") + 1])
    sys.stdout.write(pathlib.Path(report.read_text()).read_text())
    sys.exit(0)
mode = os.environ.get("FAKE_NCU_MODE", "ok")
print("==PROF== Connected to process 4242 (driver)")
if mode == "hang":
    time.sleep(60)
if mode == "perm":
    print(pathlib.Path(os.environ["FAKE_NCU_PERM"]).read_text())
    sys.exit(0)
unknown = os.environ.get("FAKE_NCU_UNKNOWN")
if unknown and unknown in args[args.index("--metrics") + 1].split(","):
    print(f"==ERROR== Failed to find metric {unknown}", file=sys.stderr)
    sys.exit(1)
print("RESULT status=ok max_abs_err=0 nonfinite=0")
if mode == "none":
    print("==WARNING== No kernels were profiled.")
    sys.exit(0)
seqlen_q = args[args.index("--seqlen-q") + 1]
csv = json.loads(os.environ["FAKE_NCU_CSVS"])[seqlen_q]
pathlib.Path(args[args.index("--export") + 1]).write_text(csv)
print("==PROF== Disconnected from process 4242")
sys.exit(int(os.environ.get("FAKE_NCU_RC", "0")))
'''


def fake_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, csvs: dict[int, Path], mode: str = "ok") -> Path:
    """An executable `ncu` that records its arguments and replays the CSV chosen by the workload's seqlen_q."""
    script = tmp_path / "bin" / "ncu"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"#!{sys.executable}\n{FAKE_NCU}")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "driver").write_text("")
    monkeypatch.setenv("FAKE_NCU_LOG", str(tmp_path / "ncu-args.jsonl"))
    monkeypatch.setenv("FAKE_NCU_CSVS", json.dumps({str(k): str(v) for k, v in csvs.items()}))
    monkeypatch.setenv("FAKE_NCU_PERM", str(FIXTURES / "permission-error.txt"))
    monkeypatch.setenv("FAKE_NCU_MODE", mode)
    return script


def calls(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "ncu-args.jsonl").read_text().splitlines()]


def dram_params(tool: Path, **changes: object) -> NcuThroughputParams:
    p = NcuThroughputParams(workloads=("decode",), kernel_filter="attention_forward", metrics=(DRAM, SM),
                            launch_skip=1, launch_count=2, timeout_s=30, driver="driver", ncu=str(tool),
                            metric=DRAM, min_pct=85.0, applies_to="memory-bound")
    return replace(p, **changes)  # type: ignore[arg-type]


def run_gate(tmp_path: Path, name: str, params: NcuThroughputParams, fault: int = 0,
             run: str = "run") -> tuple[GateResult, GateContext]:
    ctx = make_context(tmp_path / run, name, params, (DECODE, PREFILL), repo_root=tmp_path)
    ctx.fault = fault
    gate_cls = {"ncu-dram": ncu_gate.NcuDramGate, "ncu-sm": ncu_gate.NcuSmGate}[name]
    return gate_cls().run(ctx), ctx


# ---- verdicts on real captures (pure) --------------------------------------------------------------


def _checks(fixture: str, metric: str, minimum: float, metrics: tuple[str, ...] = (DRAM, SM),
            kernel_filter: str = "attention_forward", launch_count: int = 2) -> list:
    return verdict_profile("w", parse_csv((FIXTURES / fixture).read_text()), metrics, metric, minimum, kernel_filter,
                           launch_count)


@pytest.mark.parametrize(("fixture", "metric", "minimum", "status", "median", "kernel", "launches"), [
    ("ours-decode.csv", DRAM, 85.0, Status.PASS, 91.755, "attention_forward", 2),
    ("ours-prefill.csv", SM, 70.0, Status.FAIL, 44.935, "attention_forward", 2),  # the phase-1 kernel: the point
    ("sdpa-cudnn-prefill.csv", SM, 70.0, Status.PASS, 75.62, "cudnn", 1),
    ("sdpa-flash-prefill.csv", SM, 70.0, Status.FAIL, 55.77, "flash_fwd", 1),
    ("sdpa-flash-decode.csv", DRAM, 85.0, Status.FAIL, 82.79, "flash_fwd", 1),
    ("sdpa-cudnn-decode.csv", DRAM, 85.0, Status.PASS, 92.41, "cudnn", 1),
])
def test_threshold_on_the_median(fixture: str, metric: str, minimum: float, status: Status, median: float,
                                 kernel: str, launches: int) -> None:
    (check,) = _checks(fixture, metric, minimum, kernel_filter=kernel, launch_count=launches)
    assert (check.status, check.comparison, check.threshold) == (status, ">=", minimum)
    assert check.measured == pytest.approx(median) and check.margin == pytest.approx(median - minimum)


def test_each_named_kernel_is_judged_apart() -> None:
    checks = _checks("na-and-noise.csv", SM, 1.0, kernel_filter="attention_forward|fill", launch_count=3)
    assert [(c.workload, c.status) for c in checks] == [
        ("w [attention_forward_kernel<128, Bf16>]", Status.PASS), ('w [fill<"odd, name">]', Status.ERROR)]
    assert "2 launches profiled, launch_count is 3" in checks[1].message


def test_na_in_every_launch_missing_metric_and_no_launch_are_errors() -> None:
    text = (FIXTURES / "na-and-noise.csv").read_text().replace('"9.68"', '"n/a"')
    checks = verdict_profile("w", parse_csv(text), (SM,), SM, 70.0, "fill", 2)
    assert checks[1].status is Status.ERROR and "n/a" in checks[1].message
    (missing,) = _checks("ours-decode.csv", DRAM, 85.0, metrics=(DRAM, "bogus__metric.sum"))
    assert (missing.status, missing.metric) == (Status.ERROR, "bogus__metric.sum")
    assert "--query-metrics" in missing.message
    header_only = '"ID","Kernel Name","dram__throughput.avg.pct_of_peak_sustained_elapsed"\n"","","%"\n'
    (none,) = verdict_profile("w", parse_csv(header_only), (DRAM,), DRAM, 85.0, "attention", 3)
    assert none.status is Status.ERROR and "zero kernel launches matched regex:attention" in none.message


# ---- the gate, end to end with a stand-in ncu -----------------------------------------------------


def test_dram_gate_passes_on_decode_and_keeps_its_artifacts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {1: FIXTURES / "ours-decode.csv"})
    result, ctx = run_gate(tmp_path, "ncu-dram", dram_params(ncu))
    assert result.status is Status.PASS, result.message
    (check,) = result.checks
    assert (check.workload, check.metric, check.measured) == ("decode", DRAM, pytest.approx(91.755))
    profile, imported, version = calls(tmp_path)
    assert version == ["--version"]
    assert profile[:2] == ["--metrics", f"{DRAM},{SM}"]
    for flag, value in [("--kernel-name", "regex:attention_forward"), ("--kernel-name-base", "function"),
                        ("--launch-skip", "1"), ("--launch-count", "2"), ("--clock-control", "none"),
                        ("--iters", "3"), ("--seqlen-q", "1"), ("--seqlen-k", "8192"), ("--dtype", "bf16")]:
        assert profile[profile.index(flag) + 1] == value, flag
    assert profile[profile.index("--export") + 1] == str(ctx.run_dir / "logs/ncu-dram/decode.ncu-rep")
    assert "--fault" not in profile and "--causal" not in profile
    assert imported == ["--import", str(ctx.run_dir / "logs/ncu-dram/decode.ncu-rep"), "--csv", "--page", "raw",
                        "--print-units", "base"]
    assert {"logs/ncu-dram/decode.ncu.log", "logs/ncu-dram/decode.ncu-rep", "logs/ncu-dram/decode.csv"} <= set(
        result.logs)
    assert (ctx.run_dir / "logs/ncu-dram/decode.csv").read_text() == (FIXTURES / "ours-decode.csv").read_text()
    assert "RESULT status=ok" in (ctx.run_dir / "logs/ncu-dram/decode.ncu.log").read_text()
    d = result.details
    assert d["ncu_version"] == "2025.3.1.0" and d["threshold"] == 85.0 and d["applies_to"] == "memory-bound"
    (kernel,) = d["workloads"]["decode"]["kernels"]
    assert (kernel["registers"], kernel["smem_per_block"], kernel["grid"]) == (166, 82984, "(1, 32, 64)")
    assert kernel["per_launch"][DRAM] == [91.74, 91.77]
    json.dumps(result.to_dict())  # the details are JSON as they are


def test_sm_gate_fails_the_phase1_kernel_on_prefill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {8192: FIXTURES / "ours-prefill.csv"})
    params = dram_params(ncu, workloads=("prefill-d128",), metric=SM, min_pct=70.0, applies_to="compute-bound")
    result, _ = run_gate(tmp_path, "ncu-sm", params)
    assert result.status is Status.FAIL
    (check,) = result.checks
    assert check.margin == pytest.approx(44.935 - 70.0) and "median of 2 launches" in check.message


def test_other_kinds_are_profiled_and_shown_not_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {1: FIXTURES / "ours-decode.csv", 8192: FIXTURES / "ours-prefill.csv"})
    result, _ = run_gate(tmp_path, "ncu-dram", dram_params(ncu, workloads=("decode", "prefill-d128")))
    assert result.status is Status.PASS and [c.workload for c in result.checks] == ["decode"]
    shown = result.details["workloads"]["prefill-d128"]
    assert shown["judged"] is False and shown["kernels"][0]["metrics"][DRAM] == pytest.approx(1.635)
    only_prefill, _ = run_gate(tmp_path, "ncu-dram", dram_params(ncu, workloads=("prefill-d128",)), run="2")
    assert only_prefill.status is Status.ERROR and "no memory-bound workload" in only_prefill.message


@pytest.mark.parametrize(("mode", "rc", "words"), [
    ("perm", "0", ["ERR_NVGPUCTRPERM", "NVreg_RestrictProfilingToAdminUsers=0"]),
    ("none", "0", ["zero kernel launches matched regex:attention_forward"]),
    ("ok", "3", ["ncu exited 3"]),
    ("bad-import", "0", ["ncu --import failed", "Failed to open report"]),
])
def test_profiler_problems_are_errors_never_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str,
                                                   rc: str, words: list[str]) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {1: FIXTURES / "ours-decode.csv"}, mode=mode)
    monkeypatch.setenv("FAKE_NCU_RC", rc)
    result, _ = run_gate(tmp_path, "ncu-dram", dram_params(ncu))
    assert result.status is Status.ERROR
    assert all(w in result.message for w in words), result.message
    assert result.details["workloads"]["decode"]["error"]


def test_timeout_kills_ncu_and_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {1: FIXTURES / "ours-decode.csv"}, mode="hang")
    result, _ = run_gate(tmp_path, "ncu-dram", dram_params(ncu, timeout_s=1))
    assert result.status is Status.ERROR and "ran past 1 s" in result.message


def test_planted_fault_reaches_the_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {1: FIXTURES / "ours-decode.csv"})
    run_gate(tmp_path, "ncu-dram", dram_params(ncu, driver_args=("--seed", "7")), fault=4)
    profile = calls(tmp_path)[0]
    assert profile[-4:] == ["--fault", "4", "--seed", "7"]


def test_missing_tools_are_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {1: FIXTURES / "ours-decode.csv"})
    no_ncu, _ = run_gate(tmp_path, "ncu-dram", dram_params(ncu, ncu=str(tmp_path / "nope/ncu")))
    assert no_ncu.status is Status.ERROR and "not found" in no_ncu.message and not no_ncu.checks
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "empty"))
    if not os.path.exists("/usr/local/cuda/bin/ncu"):
        by_name, _ = run_gate(tmp_path, "ncu-dram", dram_params(ncu, ncu="ncu"))
        assert by_name.status is Status.ERROR and "install Nsight Compute" in by_name.message
    no_driver, _ = run_gate(tmp_path, "ncu-dram", dram_params(ncu, driver="build/none"))
    assert no_driver.status is Status.ERROR and "run `make build`" in no_driver.message


# ---- report section ------------------------------------------------------------------------------


def test_report_section_shows_bars_threshold_and_kernel_facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ncu = fake_ncu(tmp_path, monkeypatch, {1: FIXTURES / "ours-decode.csv", 8192: FIXTURES / "ours-prefill.csv"})
    dram, _ = run_gate(tmp_path, "ncu-dram", dram_params(ncu, workloads=("decode", "prefill-d128")))
    sm_params = dram_params(ncu, workloads=("prefill-d128",), metric=SM, min_pct=70.0, applies_to="compute-bound")
    sm, _ = run_gate(tmp_path, "ncu-sm", sm_params, run="sm")
    errored = GateResult("ncu-stalls", 4, Status.ERROR, message="ncu not found")  # no details: section stays empty
    run = RunResult("r", 4, (dram, sm, errored), {}, "2025-01-01T00:00:00Z", 1.0)
    html = render_html(run)
    assert html.count('class="ncu-threshold"') == 2  # one gated metric per judged workload
    assert 'title="threshold 85.0 %" style="position: absolute; left: 85.0%' in html
    assert f'<tr data-metric="{DRAM}" data-status="pass">' in html
    assert f'<tr data-metric="{SM}" data-status="fail">' in html
    assert "width: 91.755%" in html and "width: 44.935%" in html
    assert "void attention_forward_kernel&lt;128, Bf16&gt;(KernelParams)" in html
    assert "grid (1, 32, 64) · block (160, 1, 1)" in html and "166 registers per thread" in html
    assert "82984 B shared memory per block" in html and "ncu 2025.3.1.0" in html and "shown, not judged" in html
    assert "91.74, 91.77" in html and "<script" not in html


# ---- wiring --------------------------------------------------------------------------------------


def test_phases_yaml_wires_the_ncu_gates(gates_dir: Path) -> None:
    config = load_config(gates_dir)
    by_name = {g.name: g for g in config.gates_through(7)}
    dram, sm, stalls = by_name["ncu-dram"], by_name["ncu-sm"], by_name["ncu-stalls"]
    assert (dram.phase, sm.phase, stalls.phase) == (2, 3, 4)
    assert (dram.params.metric, dram.params.min_pct, dram.params.applies_to) == (DRAM, 85.0, "memory-bound")
    assert (sm.params.metric, sm.params.min_pct, sm.params.applies_to) == (SM, 70.0, "compute-bound")
    for spec in (dram, sm):
        assert any(config.workloads[w].kind == spec.params.applies_to for w in spec.params.workloads)
        assert spec.params.metric in spec.params.metrics and spec.params.clock_control == "none"
    assert "WarpStateStats" in stalls.params.sections
    assert all(g.name not in by_name or by_name[g.name] is g for g in config.gates_through(7))


def test_selftest_plants_a_slow_kernel_for_the_dram_gate() -> None:
    (case,) = [c for c in CASES if c.must_fail == "ncu-dram"]
    assert case.name == "slow-loads"
    from flashcore.api import MAX_FAULT
    from flashcore.faults import Fault

    assert MAX_FAULT == Fault.SLOW == 4  # the slow fault is one debug_fault accepts
    assert "kFaultSlow = 4" in (REPO / "kernel/common.h").read_text()


# ---- on the H100 ---------------------------------------------------------------------------------


@pytest.mark.gpu
def test_dram_gate_measures_the_real_kernel_and_the_slow_fault_fails_it(tmp_path: Path) -> None:
    """Needs ncu, counter access and `make build`. The planted slow loads must FAIL the gate (not ERROR)."""
    config = load_config(REPO / "gates")
    spec = next(g for phase in config.phases for g in phase.gates if g.name == "ncu-dram")
    results = {}
    for fault in (0, 4):
        ctx = GateContext(spec=spec, config=config, run_dir=tmp_path / f"fault{fault}", repo_root=REPO, seed=0,
                          fault=fault)
        results[fault] = ncu_gate.NcuDramGate().run(ctx)
    clean, slow = results[0], results[4]
    assert clean.status in (Status.PASS, Status.FAIL), clean.message  # measured: a verdict, not an error
    assert slow.status is Status.FAIL, slow.message
    assert slow.checks[0].measured is not None and clean.checks[0].measured is not None
    assert slow.checks[0].measured < clean.checks[0].measured
