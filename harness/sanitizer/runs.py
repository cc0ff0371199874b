"""A sanitizer gate's compute-sanitizer runs: alone or in batches, several at once, longest first, each judged.

A run is one tool on the driver (build/flashcore_driver) for one workload, or for a batch of workloads in one process
(harness/sanitizer/batch.py says why and when that is sound). A batch that passes passes each of its workloads; one
that does not is run again workload by workload, and those runs are the verdicts. What the batch found that no
workload alone reproduces stays a failing check of its own: it needed several calls in one process (state the library
kept between calls) or the tool was flaky, and neither may pass unseen.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from harness.driver_args import driver_args
from harness.gates.base import GateContext
from harness.results import Check, Status
from harness.sanitizer import batch, runner, shrink
from harness.sanitizer.budget import Budget, not_run_check
from harness.sanitizer.setup import Setup
from harness.sanitizer.verdict import Judgement
from harness.schema import Workload
from harness.support import gpu

LOG_DIR = "logs"  # raw logs: logs/<gate>/<tool>-<workload>.log (two sanitizer gates share one run directory)
COMPLETION = "RESULT status=ok"  # the driver's line after each workload it ran to the end (kernel/driver.cu)
Plan = list[tuple[str, str]]


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


@dataclass(frozen=True)
class RunOutcome:
    """One planned (tool, workload): its check, and its report view (a run) or its not-run entry."""

    check: Check
    run: dict[str, Any] | None = None
    not_run: dict[str, str] | None = None
    cut: bool = False


@dataclass(frozen=True)
class BatchOutcome:
    """A batch's planned runs (plan index -> outcome), the batch's own process for the report (None: a batch of
    one, whose run is its member's), and its finding that no workload alone reproduced (None: none)."""

    members: dict[int, RunOutcome]
    view: dict[str, Any] | None = None
    unreproduced: Check | None = None


def options(ctx: GateContext, s: Setup, timeout_s: float) -> runner.Options:
    p = ctx.params
    return runner.Options(timeout_s=timeout_s, padding=p.padding, hopper=s.hopper,
                          fail_on_warnings=p.fail_on_warnings, suppressions=s.suppressions)


def member_args(ctx: GateContext, s: Setup, tool: str, name: str) -> list[str]:
    """The driver's flags for `name` as `tool` runs it: its shape (racecheck's may be reduced) and its own seed."""
    ran = s.shape(tool, ctx.config.workloads[name])
    return driver_args(ran, iters=1, seed=gpu.workload_seed(ctx.seed, ctx.spec.name, name), fault=ctx.fault)


def run_one(ctx: GateContext, s: Setup, budget: Budget | None, tool: str, name: str, label: str) -> RunOutcome:
    """One compute-sanitizer run (thread-safe: its own log file, its own process); with a spent budget, none."""
    p = ctx.params
    wl = ctx.config.workloads[name]
    ran = s.shape(tool, wl)
    shape = shrink.describe(ran, wl, s.min_tiles_per_sm)
    if budget is not None and budget.left() <= 0:
        return RunOutcome(not_run_check(budget, tool, name), not_run={
            "tool": tool, "workload": name, "shape": shape, "reason": budget.not_run_message()})
    timeout_s, by_budget = (p.timeout_s(tool), False) if budget is None else budget.timeout(p.timeout_s(tool))
    left = "" if budget is None else f", {budget.left():.0f} s of budget_s left"
    ctx.step(f"{tool} {name} ({label}{left})")
    log_rel = f"{LOG_DIR}/{ctx.spec.name}/{tool}-{name}.log"
    o = runner.check(s.sanitizer, tool, [str(ctx.repo_root / p.driver), *member_args(ctx, s, tool, name)],
                     ctx.run_dir / log_rel, options(ctx, s, timeout_s), completion=COMPLETION)
    check, view = outcome_check(o, name), outcome_view(o, name, log_rel, p.report_log_chars)
    cut = budget is not None and by_budget and o.timed_out
    if cut and budget is not None:
        check = dataclasses.replace(check, message=budget.cut_message(o.wall_s))
        view["reason"] = check.message
    ctx.step(f"{tool} {name}: {view['status']} in {o.wall_s:.1f} s")
    ctx.log(f"{tool} {name} ({shape}): exit {o.exit_code}, {o.wall_s:.1f} s: "
            f"{view['status']}: {view['reason']}\n  {' '.join(o.command)}")
    # model_s: the seconds the run-cost model expected, beside wall_s: each run shows how far off the model is;
    # `reduced`: the batch and heads a reduced racecheck ran (harness/sanitizer/cost_fit.py fits to them)
    run = {**view, "shape": shape, "model_s": round(s.cost.seconds(tool, ran), 1), **reduced_record(ran, wl)}
    return RunOutcome(check, run=run, cut=cut)


def reduced_record(ran: Workload, wl: Workload) -> dict[str, Any]:
    """{"reduced": the batch and heads} when a reduced racecheck ran `ran` for `wl` (cost_fit reads it), else {}."""
    if not shrink.reduced(ran, wl):
        return {}
    return {"reduced": {"batch": ran.batch, "heads_q": ran.heads_q, "heads_kv": ran.heads_kv}}


def member_outcome(ctx: GateContext, s: Setup, tool: str, name: str, status: Status, reason: str, log_rel: str,
                   cut: bool = False) -> RunOutcome:
    """A workload of a batch, judged by the batch (clean, cut by the budget, or hung in): its check, and its run in
    the report with its shape and the batch's log (no log of its own)."""
    wl = ctx.config.workloads[name]
    ran = s.shape(tool, wl)
    passed = status is Status.PASS
    check = Check(name, tool, 0, 0 if passed else None, status, "==", margin=0 if passed else None, message=reason)
    run: dict[str, Any] = {"tool": tool, "workload": name, "status": status.value, "reason": reason, "findings": [],
                           "shape": shrink.describe(ran, wl, s.min_tiles_per_sm), "batch": log_rel,
                           "log": log_rel, "model_s": round(s.cost.work(tool, ran), 1), **reduced_record(ran, wl)}
    return RunOutcome(check, run=run, cut=cut)


def hung_member(text: str, names: list[str]) -> str | None:
    """The workload a batch was running when it was killed: the last one whose BEGIN line (kernel/driver.cu) the log
    holds (None: the driver never reached one)."""
    begun = [int(line.split()[1]) for line in text.splitlines()
             if line.startswith("BEGIN ") and line.split()[1:2] and line.split()[1].isdigit()]
    return names[begun[-1]] if begun and begun[-1] < len(names) else None


def run_batch(ctx: GateContext, s: Setup, budget: Budget | None, plan: Plan, members: list[int],
              label: str, model_s: float) -> BatchOutcome:
    """The batch's workloads in one run; if it is not clean, each again alone (module docstring). The batch has one
    run's timeout: its modelled seconds are a small part of it (batch_s), and a hang must not cost n timeouts."""
    if len(members) == 1:
        return BatchOutcome({members[0]: run_one(ctx, s, budget, *plan[members[0]], label)})
    p = ctx.params
    tool, names = plan[members[0]][0], [plan[i][1] for i in members]
    if budget is not None and budget.left() <= 0:
        return BatchOutcome({i: run_one(ctx, s, budget, *plan[i], label) for i in members})  # each: not run
    timeout_s, by_budget = (p.timeout_s(tool), False) if budget is None else budget.timeout(p.timeout_s(tool))
    ctx.step(f"{tool} on {len(names)} workloads in one run ({label})")
    log_rel = f"{LOG_DIR}/{ctx.spec.name}/{tool}-batch-{names[0]}.log"
    target = [str(ctx.repo_root / p.driver), *batch.series([member_args(ctx, s, tool, n) for n in names])]
    o = runner.check(s.sanitizer, tool, target, ctx.run_dir / log_rel, options(ctx, s, timeout_s),
                     completion=COMPLETION, completions=len(names))
    j = o.judgement
    view = {**outcome_view(o, f"{len(names)} workloads", log_rel, p.report_log_chars), "workloads": names,
            "model_s": round(model_s, 1)}
    ctx.log(f"{tool} on {', '.join(names)}: exit {o.exit_code}, {o.wall_s:.1f} s: {j.status.value}: {j.reason}")
    ctx.step(f"{tool} on {len(names)} workloads: {j.status.value} in {o.wall_s:.1f} s")
    if j.status is Status.PASS:
        why = f"clean in one {tool} run of {len(names)} workloads ({j.reason})"
        return BatchOutcome({i: member_outcome(ctx, s, tool, plan[i][1], Status.PASS, why, log_rel) for i in members},
                            view=view)
    hung = hung_member(o.log_path.read_text(errors="replace"), names) if o.timed_out else None
    if budget is not None and by_budget and o.timed_out:  # the budget is spent: no second try
        why = budget.cut_message(o.wall_s)
        return BatchOutcome({i: member_outcome(ctx, s, tool, plan[i][1], Status.ERROR, why, log_rel, cut=True)
                             for i in members}, view={**view, "reason": why})
    return alone_after(ctx, s, budget, plan, members, label, view, j, hung)


def alone_after(ctx: GateContext, s: Setup, budget: Budget | None, plan: Plan, members: list[int], label: str,
                view: dict[str, Any], j: Judgement, hung: str | None) -> BatchOutcome:
    """Each workload of a batch that was not clean, alone; a workload the batch hung in is an ERROR without a second
    hang. The batch's own failing check stays when its findings outnumber those of the runs alone."""
    tool, names, log_rel = plan[members[0]][0], [plan[i][1] for i in members], view["log"]
    ctx.log(f"{tool}: the run of {len(names)} workloads was not clean; each runs again alone"
            + (f" but {hung}, which it was running when killed" if hung else ""))
    out: dict[int, RunOutcome] = {}
    for i in members:
        name = plan[i][1]
        if name == hung:
            why = (f"killed inside a {tool} run of {len(names)} workloads while running this one ({j.reason}; "
                   f"log {log_rel}): no verdict, not run again alone (a second hang would cost a second timeout)")
            out[i] = member_outcome(ctx, s, tool, name, Status.ERROR, why, log_rel)
        else:
            out[i] = run_one(ctx, s, budget, tool, name, f"alone after its batch, {label}")
    alone_failing = sum(o.check.measured or 0 for o in out.values() if o.check.status is Status.FAIL)
    explained = hung is not None or (any(o.check.status is not Status.PASS for o in out.values()) and (
        j.failing is None or j.failing <= alone_failing))
    if explained:
        return BatchOutcome(out, view=view)
    subject = f"{names[0]} +{len(names) - 1} in one run"
    why = (f"{j.reason}; the workloads alone reported {alone_failing:g}: what they did not reproduce needs several "
           f"calls in one process (state the library kept between calls) or the tool is flaky (log {log_rel})")
    return BatchOutcome(out, view=view, unreproduced=Check(subject, tool, 0, j.failing, j.status, "==",
                                                           margin=None, message=why))


def run_all(ctx: GateContext, s: Setup, budget: Budget | None, plan: Plan,
            at_once: int) -> tuple[list[RunOutcome], list[BatchOutcome]]:
    """Every planned run, in batches of at most `batch_s` modelled seconds, `at_once` at a time, longest batch first
    (the slowest racechecks overlap the many short runs instead of ending the part alone): the outcomes in plan
    order, and the batches."""
    def work(tool: str, name: str) -> float:
        return s.cost.work(tool, s.shape(tool, ctx.config.workloads[name]))

    def start(tool: str) -> float:
        return s.cost.tools[tool].start_s

    batches = batch.pack(plan, work, start, ctx.params.batch_s)
    cost = [batch.batch_cost(b, plan, work, start) for b in batches]
    # ties in the plan's order: runs alone start as longest_first orders them
    order = sorted(range(len(batches)), key=lambda b: (-cost[b], min(batches[b])))
    labels = {b: f"batch {n + 1}/{len(batches)}" if len(batches[b]) > 1 else f"run {n + 1}/{len(batches)}"
              for n, b in enumerate(order)}
    if at_once <= 1:
        done = {b: run_batch(ctx, s, budget, plan, batches[b], labels[b], cost[b]) for b in order}
    else:
        with ThreadPoolExecutor(max_workers=at_once) as pool:
            futures = {b: pool.submit(run_batch, ctx, s, budget, plan, batches[b], labels[b], cost[b]) for b in order}
            done = {b: f.result() for b, f in futures.items()}
    by_run = {i: o for b in done.values() for i, o in b.members.items()}
    return [by_run[i] for i in range(len(plan))], [done[b] for b in sorted(done)]
