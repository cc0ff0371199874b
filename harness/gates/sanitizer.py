"""Sanitizer gate: compute-sanitizer tools (memcheck, racecheck, synccheck, initcheck) on the standalone driver.

Never on torch: PyTorch's caching allocator hides out-of-bounds accesses inside its slabs, so the gate runs
build/flashcore_driver, whose buffers are plain cudaMalloc allocations. One check per (tool, workload);
the verdict (harness/sanitizer/verdict.py) fails closed: only a complete log with nothing unsuppressed passes.
Each tool runs on `workloads`, or on its own `<tool>_workloads` when set. With `batch_s`, a tool's small workloads
share one process (harness/sanitizer/batch.py: a small run is mostly its process's start); a batch that is not
clean runs each workload again alone, whose run is its verdict (harness/sanitizer/runs.py). Batches start longest
first by the run-cost model (harness/sanitizer/cost.py), several at once; the report lists the runs tool by tool.
`run_sanitizer` with a Budget is the phase-7 variant over every workload (harness/gates/sanitizer_all.py). With
`racecheck_min_tiles_per_sm`, racecheck runs a big workload with fewer batch entries and heads (harness/sanitizer/
shrink.py says why that is sound); the other tools always run the whole shape.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from typing import Any, ClassVar

from harness.env import find_cuda_tool
from harness.gates.base import Gate, GateContext, SelfTest
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.sanitizer import parallel, runner
from harness.sanitizer.budget import Budget, budget_check
from harness.sanitizer.cost import COST_FILE, load_cost_model, run_cost
from harness.sanitizer.model import TOOLS
from harness.sanitizer.runs import COMPLETION, LOG_DIR, excerpt, run_all
from harness.sanitizer.setup import Setup
from harness.sanitizer.suppressions import load_suppressions
from harness.schema import PHASES_FILE, ConfigError, param
from harness.shard_plan import part_for

__all__ = ["COMPLETION", "LOG_DIR", "SanitizerGate", "SanitizerParams", "Setup", "excerpt", "run_sanitizer"]


@dataclass(frozen=True)
class SanitizerParams:
    # small ones: racecheck is ~100x slower than a plain run; any layout (the driver runs them all)
    workloads: tuple[str, ...] = param(workloads=True, serving=True)
    tools: tuple[str, ...] = param()
    memcheck_timeout_s: int = param(gt=0)  # per run (one tool on one workload)
    racecheck_timeout_s: int = param(gt=0)
    synccheck_timeout_s: int = param(gt=0)
    initcheck_timeout_s: int = param(gt=0)
    padding: int = param(gt=0)  # memcheck --padding bytes; 0 would let a write past the end land unseen
    suppressions: str = param()  # the reviewed file, relative to the repository root
    # each run's modelled seconds, by which parts are dealt and runs started (harness/sanitizer/cost.py)
    cost_model: str = param(default=COST_FILE)
    driver: str = param(default="build/flashcore_driver")
    fail_on_warnings: bool = param(default=True)  # racecheck warnings fail too
    report_log_chars: int = param(default=20000, gt=0)  # of each raw log shown in the report (full log in logs/)
    # per-tool workloads instead of `workloads` (e.g. racecheck, the slowest, on fewer shapes); () = `workloads`
    memcheck_workloads: tuple[str, ...] = param(default=(), workloads=True, serving=True)
    racecheck_workloads: tuple[str, ...] = param(default=(), workloads=True, serving=True)
    synccheck_workloads: tuple[str, ...] = param(default=(), workloads=True, serving=True)
    initcheck_workloads: tuple[str, ...] = param(default=(), workloads=True, serving=True)
    # runs at once (harness/sanitizer/parallel.py): at most this many, one per `parallel_cpus_per_run` cores of
    # this worker and per `parallel_gpu_mib_per_run` MiB of free GPU memory; 1: one at a time
    parallel_max: int = param(default=1, ge=1)
    parallel_cpus_per_run: int = param(default=1, ge=1)
    parallel_gpu_mib_per_run: int = param(default=4096, gt=0)
    # racecheck on fewer batch entries and heads, keeping this many query tiles per SM of the GPU (harness/sanitizer/
    # shrink.py); 0: every racecheck on the whole shape
    racecheck_min_tiles_per_sm: int = param(default=0, ge=0)
    # several workloads of one tool in one process, up to this many modelled seconds (harness/sanitizer/batch.py: a
    # small run's cost is its process's start); 0: every run alone
    batch_s: float = param(default=0, ge=0)

    def __post_init__(self) -> None:
        bad = [t for t in self.tools if t not in TOOLS]
        if bad or len(set(self.tools)) != len(self.tools):
            raise ConfigError(PHASES_FILE, "gates.<sanitizer gate>.tools", list(self.tools),
                              f"each of {{{', '.join(TOOLS)}}} at most once")
        for tool in TOOLS:
            if tool not in self.tools and getattr(self, f"{tool}_workloads"):
                raise ConfigError(PHASES_FILE, f"gates.<sanitizer gate>.{tool}_workloads",
                                  list(getattr(self, f"{tool}_workloads")),
                                  f"{tool} is not in `tools`: these workloads would never run")

    def timeout_s(self, tool: str) -> int:
        return int(getattr(self, f"{tool}_timeout_s"))

    def workloads_for(self, tool: str) -> tuple[str, ...]:
        return tuple(getattr(self, f"{tool}_workloads")) or self.workloads

    def plan(self) -> list[tuple[str, str]]:
        """(tool, workload) of every run, in report order: tool by tool as `tools` lists them (runs start longest
        first instead: run_all)."""
        return [(tool, wl) for tool in self.tools for wl in self.workloads_for(tool)]


def message(runs: list[dict[str, Any]], checks: list[Check], timed: list[dict[str, Any]]) -> str:
    """`timed`: the processes (runs alone and batches), whose logs hold the findings (a batch's, suppressed ones
    included: its workloads' runs have none of their own)."""
    bad = [c for c in checks if c.status is not Status.PASS]
    if not bad:
        tools = sorted({r["tool"] for r in runs})
        suppressed = sum(f["count"] for r in timed for f in r["findings"] if f["suppressed"])
        together = f" in {len(timed)} processes" if len(timed) != len(runs) else ""
        return (f"{len(runs)} runs clean{together} ({', '.join(tools)} on {len({r['workload'] for r in runs})} "
                "workloads)" + (f"; {suppressed} reports suppressed by reviewed entries" if suppressed else ""))
    shown = "; ".join(f"{c.metric} on {c.workload}: {c.message}" for c in bad[:2])
    return f"{len(bad)} of {len(checks)} runs not clean: {shown}" + (f" (+{len(bad) - 2} more)" if len(bad) > 2 else "")


def setup(ctx: GateContext) -> Setup | GateResult:
    """The tool, its version and Hopper options, the reviewed suppressions and the run-cost model; or the ERROR
    saying which is missing."""
    p: SanitizerParams = ctx.params
    if not (ctx.repo_root / p.driver).is_file():
        return ctx.verdict_only(Status.ERROR, f"{p.driver} not found: run `make build` (the sanitizer runs the "
                                "standalone driver, never torch)")
    sanitizer = find_cuda_tool("compute-sanitizer")
    if sanitizer is None:
        return ctx.verdict_only(Status.ERROR,
                                "compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    try:
        suppressions = ctx.config.once(p.suppressions, lambda _: load_suppressions(ctx.repo_root / p.suppressions))
    except ConfigError as e:
        return ctx.verdict_only(Status.ERROR, f"bad suppressions file: {e}")
    try:
        cost = ctx.config.once(p.cost_model, lambda _: load_cost_model(ctx.repo_root / p.cost_model))
    except ConfigError as e:
        return ctx.verdict_only(Status.ERROR, f"bad run-cost model: {e}")
    try:
        version, hopper = runner.probe(sanitizer)
    except (OSError, subprocess.SubprocessError) as e:
        return ctx.verdict_only(Status.ERROR, f"compute-sanitizer cannot run: {e}")
    reduce = p.racecheck_min_tiles_per_sm if "racecheck" in p.tools else 0
    # the driver's GPU is this process's device 0 (the same CUDA_VISIBLE_DEVICES); unknown: no shape is reduced
    sms = gpu_sm_count() if reduce else None
    return Setup(sanitizer, suppressions, version, hopper, cost, sms, reduce)


def gpu_sm_count() -> int | None:
    """The SM count of this process's GPU 0, as the run's environment records it (harness/env.py); None without."""
    from harness.env import torch_info

    sms = torch_info().get("gpu_sm_count")
    return sms if isinstance(sms, int) and sms > 0 else None


def run_sanitizer(ctx: GateContext, budget: Budget | None = None, part: tuple[int, int] | None = None) -> GateResult:
    """Every planned (tool, workload) run, several at once within the CPU and GPU-memory limits; with a budget,
    runs it cut short are ERRORs and the rest NOT_RUN; with `part` (i, n), only that share of the workloads."""
    p: SanitizerParams = ctx.params
    s = setup(ctx)
    if isinstance(s, GateResult):
        return s
    # every worker deals by the shapes its runs take: the reduced racechecks' at its GPU's SM count (the GPUs of one
    # host are one model, so every worker deals alike)
    cost = run_cost(s.cost, ctx.config.workloads, s.shape)
    plan = p.plan() if part is None else parallel.share(p.plan(), cost, *part)
    if part is not None and not plan:  # more parts than workloads: the other parts hold every run
        return ctx.verdict_only(Status.NOT_APPLICABLE, f"part {part[0]} of {part[1]} holds no workload")
    at_once, why = parallel.concurrency(parallel.Limits(p.parallel_max, p.parallel_cpus_per_run,
                                                        p.parallel_gpu_mib_per_run), *parallel.host_facts())
    ctx.log(f"{len(plan)} runs{f' (part {part[0]} of {part[1]})' if part else ''}, {why}")
    outcomes, batches = run_all(ctx, s, budget, plan, at_once)
    checks = [o.check for o in outcomes] + [b.unreproduced for b in batches if b.unreproduced is not None]
    runs = [o.run for o in outcomes if o.run is not None]
    views = [b.view for b in batches if b.view is not None]  # the processes of several workloads
    not_run = [o.not_run for o in outcomes if o.not_run is not None]
    cut = [f"{o.run['tool']} {o.run['workload']}" for o in outcomes if o.cut and o.run is not None]
    # seconds of the processes: the runs alone (a batch's workloads have none of their own) and the batches
    timed = [r for r in runs if r.get("wall_s") is not None] + views
    wall = {t: round(sum(r["wall_s"] for r in timed if r["tool"] == t), 2) for t in p.tools}
    details: dict[str, Any] = {"version": s.version, "tools": list(p.tools), "padding": p.padding,
                               "hopper_checks": s.hopper, "suppressions_file": p.suppressions,
                               "suppressions": len(s.suppressions), "wall_s_by_tool": wall, "runs": runs,
                               "batches": views, "batch_s": p.batch_s,
                               # per tool, so that the join of parts sums them (harness/shard.py joined)
                               "processes_by_tool": {t: sum(r["tool"] == t for r in timed) for t in p.tools},
                               "workloads_by_tool": {t: list(p.workloads_for(t)) for t in p.tools},
                               "at_once": at_once, "at_once_why": why, "sm_count": s.sms,
                               # of the whole gate's racechecks, so that every part (and their join) says the same
                               "racecheck_shapes": s.shapes_note([ctx.config.workloads[w] for t, w in p.plan()
                                                                  if t == "racecheck"]),
                               "part": f"{part[0]}/{part[1]}" if part else None,
                               # what this part's share was dealt by: parts that disagree may have left runs out or
                               # run them twice, which the join refuses (harness/shard.py joined)
                               "dealt_by": {"sm_count": s.sms}}
    text = message(runs, [c for c in checks if c.status is not Status.NOT_RUN], timed)
    if budget is not None:
        spent = budget_check(budget, cut, [f"{r['tool']} {r['workload']}" for r in not_run])
        checks.append(spent)
        details |= {"budget_s": budget.total_s, "budget_spent_s": spent.measured, "not_run": not_run}
        text = text if spent.status is Status.PASS else f"{spent.message}. {text}"
    ctx.log(f"{len(runs)} of {len(plan)} runs made: {text}")
    return ctx.result(checks, details=details, message=text, logs=list(dict.fromkeys(r["log"] for r in timed)))


@register("sanitizer")
class SanitizerGate(Gate):
    Params = SanitizerParams
    needs_gpu = True
    # compute-sanitizer on tests/planted/planted.cu: each tool FAILs on its bug and PASSes the clean mode
    selftests: ClassVar[tuple[SelfTest, ...]] = (
        SelfTest("memcheck-oob", "sanitizer", "memcheck:oob",
                 "a write one past the end of a buffer, into the next allocation unless padded"),
        SelfTest("memcheck-leak", "sanitizer", "memcheck:leak", "a cudaMalloc never freed"),
        SelfTest("racecheck-race", "sanitizer", "racecheck:race",
                 "shared memory written and read by other threads with the barrier left out"),
        SelfTest("synccheck-divergent", "sanitizer", "synccheck:divergent",
                 "__syncthreads reached by half of each warp"),
        SelfTest("synccheck-mbar", "sanitizer", "synccheck:mbar",
                 "an arrive on an mbarrier that was never initialized"),
        SelfTest("initcheck-uninit", "sanitizer", "initcheck:uninit", "a kernel reads device memory nothing wrote"),
        *(SelfTest(f"{tool}-clean", "sanitizer", f"{tool}:clean", f"{tool} passes the planted program's clean mode",
                   must_fail="-") for tool in ("memcheck", "racecheck", "synccheck", "initcheck")),
    )

    def run(self, ctx: GateContext) -> GateResult:
        return self.run_part(ctx, None)

    def run_part(self, ctx: GateContext, budget: Budget | None) -> GateResult:
        """The gate, or in a sharded run the part its worker was given (gates/shard.yaml `split`: the worker's
        FLASHCORE_GATE_PARTS names it; harness/shard.py joins the parts)."""
        try:
            part = part_for(ctx.spec.name)
        except ValueError as e:
            return ctx.verdict_only(Status.ERROR, str(e))
        return run_sanitizer(ctx, budget, part)
