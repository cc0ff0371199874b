"""The sanitizer gate end to end on the CPU, with a stand-in `compute-sanitizer` that replays real logs:
command line (always --error-exitcode; memcheck --leak-check full --padding; Hopper checks recorded), one check
per (tool, workload), raw logs under logs/, and ERROR for a missing driver, a missing tool or a timeout."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, make_context, workload
from test_sanitizer_parser import FIXTURES

from flashcore import head_dims
from harness.config import load_config
from harness.driver_args import driver_args
from harness.gates.sanitizer import SanitizerGate, SanitizerParams, excerpt
from harness.results import GateResult, Status
from harness.sanitizer.cost import COST_FILE
from harness.sanitizer.model import TOOLS
from harness.schema import ConfigError

FAKE = """#!/bin/sh
# Stand-in compute-sanitizer: replays $FAKE_DIR/<tool>.log and exits with $FAKE_DIR/<tool>.rc.
case "$1" in
  --version) echo "NVIDIA (R) Compute Sanitizer"; echo "Version 2025.3.1.0 (fake)"; exit 0;;
  --help) echo "  --check-bulk-copy arg (=yes)"; echo "  --check-warpgroup-mma arg (=yes)"; exit 0;;
esac
echo "$@" >> "$FAKE_DIR/argv"
tool=""; prev=""
for a in "$@"; do [ "$prev" = "--tool" ] && tool=$a; prev=$a; done
[ -f "$FAKE_DIR/$tool.sleep" ] && sleep "$(cat "$FAKE_DIR/$tool.sleep")"
cat "$FAKE_DIR/$tool.log"
exit "$(cat "$FAKE_DIR/$tool.rc")"
"""


def install_fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repo root with a driver, an empty suppressions file and a fake compute-sanitizer replaying clean logs."""
    bin_dir, fake_dir = tmp_path / "bin", tmp_path / "fake"
    bin_dir.mkdir()
    fake_dir.mkdir()
    tool = bin_dir / "compute-sanitizer"
    tool.write_text(FAKE)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_DIR", str(fake_dir))
    for t in TOOLS:
        replay(tmp_path, t, f"kernel-{t}", 0)
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "flashcore_driver").write_text("#!/bin/sh\n")
    (tmp_path / "gates").mkdir()
    (tmp_path / "gates" / "sanitizer-suppressions.yaml").write_text("suppressions: []\n")
    (tmp_path / COST_FILE).write_text((REPO / COST_FILE).read_text())  # the shipped run-cost model
    return tmp_path


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return install_fake(tmp_path, monkeypatch)


def replay(root: Path, tool: str, fixture: str, rc: int) -> None:
    (root / "fake" / f"{tool}.log").write_text((FIXTURES / f"{fixture}.log").read_text())
    (root / "fake" / f"{tool}.rc").write_text(str(rc))


def params(**kw: object) -> SanitizerParams:
    base: dict[str, object] = dict(workloads=("w1", "w2"), tools=TOOLS, memcheck_timeout_s=30,
                                   racecheck_timeout_s=30, synccheck_timeout_s=30, initcheck_timeout_s=30,
                                   padding=32, suppressions="gates/sanitizer-suppressions.yaml")
    return SanitizerParams(**(base | kw))  # type: ignore[arg-type]


def run_gate(root: Path, p: SanitizerParams | None = None) -> GateResult:
    wls = (workload("w1", causal=True, hq=4, hkv=1), workload("w2", d=128, dtype="fp16"))
    ctx = make_context(root / "run", "sanitizer", p or params(), wls, repo_root=root)
    return SanitizerGate().run(ctx)


def test_clean_kernel_passes_with_one_check_per_tool_and_workload(fake: Path) -> None:
    result = run_gate(fake)
    assert result.status is Status.PASS, result.message
    assert [(c.metric, c.workload) for c in result.checks] == [(t, w) for t in TOOLS for w in ("w1", "w2")]
    assert result.message == "8 runs clean (initcheck, memcheck, racecheck, synccheck on 2 workloads)"
    d = result.details
    assert d["hopper_checks"] == {"--check-bulk-copy": True, "--check-warpgroup-mma": True}
    assert d["version"] == "Version 2025.3.1.0 (fake)" and d["padding"] == 32 and d["suppressions"] == 0
    assert set(d["wall_s_by_tool"]) == set(TOOLS)
    run = d["runs"][0]
    assert (run["tool"], run["workload"], run["status"], run["exit_code"]) == ("memcheck", "w1", "pass", 0)
    assert (fake / "run" / run["log"]).read_text() == (FIXTURES / "kernel-memcheck.log").read_text()
    assert "logs/sanitizer/racecheck-w2.log" in result.logs


def test_command_lines(fake: Path) -> None:
    run_gate(fake)
    lines = (fake / "fake" / "argv").read_text().splitlines()
    assert len(lines) == 8
    for line in lines:
        args = line.split()
        assert args[args.index("--error-exitcode") + 1] == "86" and "--check-exit-code yes" in line
        assert "--check-bulk-copy yes" in line and "--check-warpgroup-mma yes" in line
        assert ("--leak-check full --padding 32" in line) == ("--tool memcheck" in line)
        assert str(fake / "build" / "flashcore_driver") in args and "--iters 1" in line
    w1 = next(line for line in lines if "--heads-q 4" in line)
    assert "--heads-kv 1" in w1 and "--causal" in w1 and "--fault" not in w1


def test_a_race_fails_the_gate_even_with_exit_code_0(fake: Path) -> None:
    replay(fake, "racecheck", "racecheck-race-exit0", 0)
    result = run_gate(fake)
    assert result.status is Status.FAIL
    bad = [c for c in result.checks if c.status is not Status.PASS]
    assert [(c.metric, c.measured) for c in bad] == [("racecheck", 1), ("racecheck", 1)]
    assert "racecheck on w1: 1 error, 0 warnings: shared-memory race in smem_race" in result.message
    run = next(r for r in result.details["runs"] if r["tool"] == "racecheck")
    assert run["findings"][0]["location"] == "planted.cu:28"


def test_crash_and_truncation_are_errors(fake: Path) -> None:
    replay(fake, "synccheck", "synccheck-barcount", 3)
    replay(fake, "memcheck", "memcheck-oob-truncated", 86)
    result = run_gate(fake)
    assert result.status is Status.ERROR
    statuses = {(c.metric, c.workload): c.status for c in result.checks}
    assert statuses[("synccheck", "w1")] is Status.ERROR and statuses[("memcheck", "w2")] is Status.ERROR
    assert statuses[("racecheck", "w1")] is Status.PASS


def test_missing_completion_line_is_an_error(fake: Path) -> None:
    (fake / "fake" / "initcheck.log").write_text("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    result = run_gate(fake, params(tools=("initcheck",)))
    assert result.status is Status.ERROR and "completion line 'RESULT status=ok' is missing" in result.message


def test_timeout_kills_the_run_and_is_an_error(fake: Path) -> None:
    (fake / "fake" / "synccheck.sleep").write_text("30")
    t0 = time.monotonic()
    result = run_gate(fake, params(tools=("synccheck",), synccheck_timeout_s=1, workloads=("w1",)))
    assert time.monotonic() - t0 < 15
    assert result.status is Status.ERROR and "ran past its 1 s timeout" in result.message
    assert result.details["runs"][0]["timed_out"] is True and result.details["runs"][0]["exit_code"] is None


def test_missing_driver_tool_or_bad_suppressions_are_errors(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (fake / "gates" / "sanitizer-suppressions.yaml").write_text("suppressions:\n  - {tool: racecheck, kind: x}\n")
    result = run_gate(fake)
    assert result.status is Status.ERROR and "justification" in result.message and not result.checks
    result = run_gate(fake, params(driver="build/missing_driver"))
    assert result.status is Status.ERROR and "run `make build`" in result.message
    monkeypatch.setattr("harness.gates.sanitizer.find_cuda_tool", lambda name: None)
    result = run_gate(fake)
    assert result.status is Status.ERROR and "compute-sanitizer not found" in result.message


def test_suppressed_finding_passes_and_is_marked(fake: Path) -> None:
    replay(fake, "racecheck", "kernel-racecheck-old-race", 86)
    (fake / "gates" / "sanitizer-suppressions.yaml").write_text(yaml.safe_dump({"suppressions": [{
        "tool": "racecheck", "kind": "shared-memory race", "file": r"^loader\.h:13$",
        "justification": "test-only: pretend the cp.async refill is ordered by its mbarrier"}]}))
    result = run_gate(fake)
    assert result.status is Status.PASS, result.message
    assert "32 reports suppressed by reviewed entries" in result.message
    run = next(r for r in result.details["runs"] if r["tool"] == "racecheck")
    assert all(f["suppressed"] and f["suppression"].startswith("test-only") for f in run["findings"])


def test_driver_args() -> None:
    wl = workload("w", b=2, hq=8, hkv=2, sq=77, sk=130, d=256, dtype="fp16", causal=True)
    assert driver_args(wl, seed=7, fault=3) == [
        "--batch", "2", "--heads-q", "8", "--heads-kv", "2", "--seqlen-q", "77", "--seqlen-k", "130",
        "--head-dim", "256", "--dtype", "fp16", "--iters", "1", "--seed", "7", "--causal", "--fault", "3"]


def test_excerpt_keeps_head_and_tail() -> None:
    text = "HEAD" + "x" * 1000 + "TAIL SUMMARY"
    assert excerpt(text, 5000) == text
    short = excerpt(text, 300)
    assert short.startswith("HEAD") and short.endswith("TAIL SUMMARY") and "characters cut" in short


def test_phase1_yaml_entry(gates_dir: Path) -> None:
    config = load_config(gates_dir)
    (spec,) = [g for g in config.phase(1).gates if g.name == "sanitizer"]
    p = spec.params
    assert p.tools == TOOLS and p.padding > 0 and p.workloads == (
        config.sets["sanitizer"] + config.sets["serving"] + config.sets["fp8"])
    # every compiled kernel head dim runs unpaged (a paged call runs on a kernel of 128-byte spans), and padded ones too
    unpaged = {head_dims.kernel_head_dim(config.workloads[w].head_dim) for w in p.workloads
               if config.workloads[w].layout != "paged"}
    assert unpaged >= set(head_dims.KERNEL_HEAD_DIMS)
    assert any(config.workloads[w].head_dim not in head_dims.KERNEL_HEAD_DIMS for w in p.workloads)
    assert any(config.workloads[w].heads_q > config.workloads[w].heads_kv for w in p.workloads)  # GQA
    assert any(config.workloads[w].causal for w in p.workloads)
    assert all(config.workloads[w].seqlen_q * config.workloads[w].seqlen_k <= 100_000 for w in config.sets["sanitizer"])
    # issue 15's features, each edge once, still small: racecheck runs every one
    assert {config.workloads[w].layout for w in p.workloads} == {"dense", "varlen", "kvcache", "paged"}
    assert all(config.workloads[w].seqlen_q * config.workloads[w].seqlen_k <= 400_000 for w in config.sets["serving"])


@pytest.mark.parametrize(("key", "value", "why"), [
    ("tools", ["memcheck", "addrcheck"], "at most once"), ("tools", ["memcheck", "memcheck"], "at most once"),
    ("padding", 0, "must be > 0"), ("racecheck_timeout_s", 0, "must be > 0"),
])
def test_bad_params_are_config_errors(gates_dir: Path, key: str, value: object, why: str) -> None:
    path = gates_dir / "phases.yaml"
    data = yaml.safe_load(path.read_text())
    data["phases"][1]["gates"]["sanitizer"][key] = value
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=why):
        load_config(gates_dir)


def test_ncu_and_the_sanitizer_build_driver_flags_the_same_way() -> None:
    from harness.ncu.runner import driver_command

    wl = workload("w", b=2, hq=8, hkv=2, sq=77, sk=130, d=256, dtype="fp16", causal=True)
    assert driver_command("drv", wl, 4, fault=4, extra=("--seed", "7")) == [
        "drv", "--batch", "2", "--heads-q", "8", "--heads-kv", "2", "--seqlen-q", "77", "--seqlen-k", "130",
        "--head-dim", "256", "--dtype", "fp16", "--iters", "4", "--causal", "--fault", "4", "--seed", "7"]
