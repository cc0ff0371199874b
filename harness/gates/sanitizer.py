"""Sanitizer gate: compute-sanitizer tools (memcheck, racecheck, synccheck, initcheck) on the standalone driver.

Never on torch: PyTorch's caching allocator hides out-of-bounds accesses inside its slabs, so the gate runs
build/flashcore_driver, whose buffers are plain cudaMalloc allocations. One check per (tool, workload);
the verdict (harness/sanitizer/verdict.py) fails closed: only a complete log with nothing unsuppressed passes.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Any

from harness.config import PHASES_FILE, ConfigError, Workload, param
from harness.env import find_cuda_tool
from harness.gates import gpu
from harness.gates.base import Gate, GateContext
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.sanitizer import runner
from harness.sanitizer.model import TOOLS
from harness.sanitizer.suppressions import load_suppressions

LOG_DIR = "logs/sanitizer"
COMPLETION = "RESULT status=ok"  # the driver's last line when it ran to the end (kernel/driver.cu)


@dataclass(frozen=True)
class SanitizerParams:
    workloads: tuple[str, ...] = param(workloads=True)  # small ones: racecheck is ~100x slower than a plain run
    tools: tuple[str, ...] = param()
    memcheck_timeout_s: int = param(gt=0)  # per run (one tool on one workload)
    racecheck_timeout_s: int = param(gt=0)
    synccheck_timeout_s: int = param(gt=0)
    initcheck_timeout_s: int = param(gt=0)
    padding: int = param(gt=0)  # memcheck --padding bytes; 0 would let a write past the end land unseen
    suppressions: str = param()  # the reviewed file, relative to the repository root
    driver: str = param(default="build/flashcore_driver")
    fail_on_warnings: bool = param(default=True)  # racecheck warnings fail too
    report_log_chars: int = param(default=20000, gt=0)  # of each raw log shown in the report (full log in logs/)

    def __post_init__(self) -> None:
        bad = [t for t in self.tools if t not in TOOLS]
        if bad or len(set(self.tools)) != len(self.tools):
            raise ConfigError(PHASES_FILE, "gates.sanitizer.tools", list(self.tools),
                              f"each of {{{', '.join(TOOLS)}}} at most once")

    def timeout_s(self, tool: str) -> int:
        return int(getattr(self, f"{tool}_timeout_s"))


def driver_args(wl: Workload, seed: int, fault: int = 0) -> list[str]:
    """build/flashcore_driver flags for one workload (kernel/driver.cu); one iteration, no reference check."""
    args = ["--batch", wl.batch, "--heads-q", wl.heads_q, "--heads-kv", wl.heads_kv, "--seqlen-q", wl.seqlen_q,
            "--seqlen-k", wl.seqlen_k, "--head-dim", wl.head_dim, "--dtype", wl.dtype, "--iters", 1, "--seed", seed]
    return [str(a) for a in args] + (["--causal"] if wl.causal else []) + (["--fault", str(fault)] if fault else [])


def excerpt(text: str, limit: int) -> str:
    """The log as shown in the report: all of it, or its head and tail (the summary is at the end)."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 2 // 3], text[-(limit // 3):]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters cut: the full log is in the file ...]\n{tail}"


def outcome_view(o: runner.Outcome, workload: str, log_rel: str, limit: int) -> dict[str, Any]:
    """One run as JSON-ready data for results.json and the report's section template."""
    text = o.log_path.read_text(errors="replace")
    return {"tool": o.tool, "workload": workload, "status": o.judgement.status.value, "reason": o.judgement.reason,
            "errors": o.log.errors, "warnings": o.log.warnings, "not_printed": o.log.not_printed,
            "exit_code": o.exit_code, "timed_out": o.timed_out, "wall_s": round(o.wall_s, 2),
            "command": " ".join(o.command), "log": log_rel, "log_chars": len(text),
            "log_text": excerpt(text, limit), "findings": [f.to_dict() for f in o.log.findings]}


def outcome_check(o: runner.Outcome, workload: str) -> Check:
    j = o.judgement
    return Check(workload, o.tool, 0, j.failing, j.status, "==", margin=None if j.failing is None else -j.failing,
                 message=j.reason)


def message(runs: list[dict[str, Any]], checks: list[Check]) -> str:
    bad = [c for c in checks if c.status is not Status.PASS]
    if not bad:
        tools = sorted({r["tool"] for r in runs})
        suppressed = sum(f["count"] for r in runs for f in r["findings"] if f["suppressed"])
        return (f"{len(runs)} runs clean ({', '.join(tools)} on {len({r['workload'] for r in runs})} workloads)"
                + (f"; {suppressed} reports suppressed by reviewed entries" if suppressed else ""))
    shown = "; ".join(f"{c.metric} on {c.workload}: {c.message}" for c in bad[:2])
    return f"{len(bad)} of {len(checks)} runs not clean: {shown}" + (f" (+{len(bad) - 2} more)" if len(bad) > 2 else "")


@register("sanitizer")
class SanitizerGate(Gate):
    Params = SanitizerParams
    needs_gpu = True

    def run(self, ctx: GateContext) -> GateResult:
        p: SanitizerParams = ctx.params
        driver = ctx.repo_root / p.driver
        if not driver.is_file():
            return ctx.verdict_only(Status.ERROR, f"{p.driver} not found: run `make build` (the sanitizer runs the "
                                    "standalone driver, never torch)")
        sanitizer = find_cuda_tool("compute-sanitizer")
        if sanitizer is None:
            return ctx.verdict_only(Status.ERROR,
                                    "compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
        try:
            suppressions = load_suppressions(ctx.repo_root / p.suppressions)
            version, hopper = runner.probe(sanitizer)
        except ConfigError as e:
            return ctx.verdict_only(Status.ERROR, f"bad suppressions file: {e}")
        except (OSError, subprocess.SubprocessError) as e:
            return ctx.verdict_only(Status.ERROR, f"compute-sanitizer cannot run: {e}")
        checks: list[Check] = []
        runs: list[dict[str, Any]] = []
        workloads = ctx.workloads()
        for tool in p.tools:
            opts = runner.Options(timeout_s=p.timeout_s(tool), padding=p.padding, hopper=hopper,
                                  fail_on_warnings=p.fail_on_warnings, suppressions=suppressions)
            for i, wl in enumerate(workloads):
                ctx.step(f"{tool} {wl.name} ({i + 1}/{len(workloads)})")
                seed = gpu.workload_seed(ctx.seed, ctx.spec.name, wl.name)
                log_rel = f"{LOG_DIR}/{tool}-{wl.name}.log"
                o = runner.check(sanitizer, tool, [str(driver), *driver_args(wl, seed, ctx.fault)],
                                 ctx.run_dir / log_rel, opts, completion=COMPLETION)
                ctx.log(f"{tool} {wl.name} ({wl.label}): exit {o.exit_code}, {o.wall_s:.1f} s: "
                        f"{o.judgement.status.value}: {o.judgement.reason}\n  {' '.join(o.command)}")
                checks.append(outcome_check(o, wl.name))
                runs.append({**outcome_view(o, wl.name, log_rel, p.report_log_chars), "shape": wl.label})
        wall = {t: round(sum(r["wall_s"] for r in runs if r["tool"] == t), 2) for t in p.tools}
        details = {"version": version, "tools": list(p.tools), "padding": p.padding, "hopper_checks": hopper,
                   "suppressions_file": p.suppressions, "suppressions": len(suppressions),
                   "wall_s_by_tool": wall, "runs": runs}
        return ctx.result(checks, details=details, message=message(runs, checks), logs=[r["log"] for r in runs])
