"""Run the gates of phases 1..N in order and collect one RunResult.

A gate that raises becomes an ERROR (traceback in its log); a GPU gate on a machine without a GPU is NOT_RUN.
The GPU gates listed in gates/watchdog.yaml run in a worker process with a time limit (harness/gate_worker.py): one
that hangs or kills its worker is an ERROR naming the workload it was on, and the next gate gets a fresh worker.
None of these aborts the run, and none passes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import secrets
import sys
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TextIO

from flashcore.faults import Fault
from harness import watchdog
from harness.gate_run import run_gate as run_gate
from harness.gate_worker import GateWorker, Job
from harness.gates import registry
from harness.gates.base import GateContext
from harness.progress import Progress
from harness.results import GateResult, RunResult, phase_without_gates
from harness.schema import Config, GateSpec
from harness.shard import GPU_INDEX_ENV, gpu_state
from harness.support.gpu import cuda_unavailable_reason
from harness.support.notices import run_notice
from harness.watchdog import WatchdogSettings, load_watchdog


def run_watched(spec: GateSpec, ctx: GateContext, gpu_reason: str | None, worker: GateWorker,
                limit_s: float, plant: str = "") -> GateResult:
    """One gate in the worker, at most `limit_s` seconds: a hang or a dead worker is the gate's ERROR. `plant`: a
    test-only change to flashcore the worker makes (harness/planted_checks.py)."""
    gate_cls = registry.get(spec.name)
    if gate_cls is None or (gate_cls.needs_gpu and gpu_reason is not None):
        return run_gate(spec, ctx, gpu_reason)  # nothing to run on the GPU: answered here
    job = Job(gate_cls, spec, ctx.config, ctx.run_dir, ctx.repo_root, ctx.seed, ctx.fault, gpu_reason, plant,
              ctx.peers)
    out = worker.run(job, limit_s, ctx.step)
    if out.result is not None:
        if out.why:
            ctx.log(f"{spec.name}: the worker was replaced after this gate: {out.why}")
        return out.result
    planted = ", ".join(x for x in (fault_name(ctx.fault), plant) if x)
    if out.timed_out:
        result = watchdog.hung(spec.name, spec.phase, out.step, limit_s, out.elapsed_s, planted)
    else:
        result = watchdog.died(spec.name, spec.phase, out.step, out.exit_code, planted, out.why)
    ctx.log(result.message)
    return dataclasses.replace(result, logs=(ctx.log_rel,))


def gate_runner(spec: GateSpec, limits: WatchdogSettings, worker: GateWorker, gpu_reason: str | None,
                plant: str = "") -> tuple[Callable[[GateContext], GateResult], float | None]:
    """How the engine runs `spec`: in the worker with its time limit when it is a GPU gate the watchdog lists, else
    here (a gate that needs no GPU launches no kernel that could hang)."""
    gate_cls = registry.get(spec.name)
    if not limits.watches(spec.name) or gate_cls is None or not gate_cls.needs_gpu:
        return (lambda ctx: run_gate(spec, ctx, gpu_reason)), None
    limit = limits.limit(spec.name)
    return (lambda ctx: run_watched(spec, ctx, gpu_reason, worker, limit, plant)), limit


def fault_name(fault: int) -> str:
    """The planted fault's name for a message ("" when none)."""
    if not fault:
        return ""
    return Fault(fault).cli_name if fault in set(Fault) else f"fault {fault}"


def run_phase(
    config: Config,
    phase: int,
    *,
    run_id: str,
    run_dir: Path,
    environment: dict[str, Any],
    repo_root: Path,
    seed: int | None = None,
    fault: int = 0,
    stream: TextIO | None = None,
    live: bool | None = None,
    only: Collection[str] | None = None,
    limits: WatchdogSettings | None = None,
    plant: str = "",
) -> RunResult:
    """Run every gate of phases 1..`phase` (only those named in `only`, when given: a shard of a run over several
    GPUs, harness/shard.py); write raw logs under `run_dir/logs`. `limits`: the watchdog's (default: the gates
    directory's watchdog.yaml). `plant` (test-only, make selftest): a change to flashcore made in the gate worker,
    so in the watched gates only (harness/planted_checks.py)."""
    progress = Progress(stream or sys.stderr, live=live)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    t_run = time.monotonic()
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    base_seed = secrets.randbelow(2**31) if seed is None else seed
    specs = tuple(s for s in config.gates_through(phase) if only is None or s.name in only)
    gpu_reason = cuda_unavailable_reason()
    needs_gpu = any((g := registry.get(s.name)) is not None and g.needs_gpu for s in specs)
    notice = gpu_reason if gpu_reason is not None and needs_gpu else ""
    if fault or plant:
        what = ", ".join(x for x in (f"{fault} ({fault_name(fault)})" if fault else "", plant) if x)
        notice = f"PLANTED FAULT {what} (test-only): this run must fail. " + notice
    if notice:
        progress.line(notice)
    limits = limits if limits is not None else load_watchdog(config.gates_dir)
    results: list[GateResult] = []
    shard_gpu = os.environ.get(GPU_INDEX_ENV)  # a worker of a run over several GPUs: say which GPU ran each gate
    with contextlib.ExitStack() as stack:
        worker = stack.enter_context(GateWorker(limits.startup_s))
        for phase_spec in (p for p in config.phases if p.number <= phase):
            if not phase_spec.gates and only is None:
                results.append(phase_without_gates(phase_spec.number))
            for spec in (s for s in phase_spec.gates if s in specs):
                run, limit = gate_runner(spec, limits, worker, gpu_reason, plant)
                # the hang is planted in a worker only: in this process the gate runs unplanted
                planted = fault if limit is not None or fault != Fault.HANG else 0
                ctx = GateContext(spec=spec, config=config, run_dir=run_dir, repo_root=repo_root, seed=base_seed,
                                  step=progress.step, fault=planted, peers=specs)
                progress.start(f"[phase {spec.phase}] {spec.name}", limit_s=limit)
                gpu_at_start = gpu_state(shard_gpu) if shard_gpu else None
                t0 = time.monotonic()
                result = run(ctx)
                result = dataclasses.replace(result, phase=spec.phase, elapsed_s=time.monotonic() - t0)
                if gpu_at_start is not None:
                    result = dataclasses.replace(result, details={**result.details, "gpu": gpu_at_start})
                progress.finish(result)
                results.append(result)
    notice = run_notice(notice, results)
    return RunResult(
        run_id=run_id,
        phase=phase,
        gates=tuple(results),
        environment=environment,
        started_at=started,
        elapsed_s=time.monotonic() - t_run,
        notice=notice,
        phase_names={p.number: p.name for p in config.phases if p.number <= phase},
    )
