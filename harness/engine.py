"""Run the gates of phases 1..N in order and collect one RunResult.

A gate that raises becomes an ERROR (traceback in its log); a GPU gate on a machine without a GPU is NOT_RUN.
Neither aborts the run, and neither passes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import secrets
import sys
import time
import traceback
from collections.abc import Collection
from pathlib import Path
from typing import Any, TextIO

from harness.gates import registry
from harness.gates.base import GateContext
from harness.progress import Progress
from harness.results import GateResult, RunResult, Status, unchecked_status
from harness.schema import Config, GateSpec
from harness.shard import GPU_INDEX_ENV, gpu_state
from harness.support.gpu import cuda_unavailable_reason, nvtx_range
from harness.support.notices import run_notice


def run_gate(spec: GateSpec, ctx: GateContext, gpu_reason: str | None) -> GateResult:
    """One gate, never raising: exceptions, wrong return values and check-less passes become ERRORs."""
    gate_cls = registry.get(spec.name)
    if gate_cls is None:
        return ctx.verdict_only(Status.ERROR, f"gate {spec.name!r} is not registered")
    if gate_cls.needs_gpu and gpu_reason is not None:
        return ctx.verdict_only(Status.NOT_RUN, "not run: no usable CUDA GPU (see the run notice)")
    try:
        with nvtx_range(f"gate/{spec.name}"):
            result = gate_cls().run(ctx)
        if not isinstance(result, GateResult):
            raise TypeError(f"{gate_cls.__qualname__}.run returned {type(result).__name__}, not GateResult")
    except Exception as e:  # noqa: BLE001 - a crashing gate is an ERROR, never an abort
        ctx.log(f"gate {spec.name} raised:\n{traceback.format_exc()}")
        return ctx.verdict_only(Status.ERROR, f"gate crashed: {type(e).__name__}: {e}")
    if not result.checks and unchecked_status(result.status) is not result.status:
        return dataclasses.replace(result, status=Status.ERROR, message="gate reported PASS without any check")
    return result


def phase_without_gates(number: int) -> GateResult:
    """A phase whose gates are not written yet cannot be certified: an ERROR, never a silent pass."""
    return GateResult(
        name=f"phase{number}-gates",
        phase=number,
        status=Status.ERROR,
        message=f"phase {number} has no gates implemented yet (gates/phases.yaml): it cannot pass",
    )


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
) -> RunResult:
    """Run every gate of phases 1..`phase` (only those named in `only`, when given: a shard of a run over several
    GPUs, harness/shard.py); write raw logs under `run_dir/logs`."""
    progress = Progress(stream or sys.stderr, live=live)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    t_run = time.monotonic()
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    base_seed = secrets.randbelow(2**31) if seed is None else seed
    specs = tuple(s for s in config.gates_through(phase) if only is None or s.name in only)
    gpu_reason = cuda_unavailable_reason()
    needs_gpu = any((g := registry.get(s.name)) is not None and g.needs_gpu for s in specs)
    notice = gpu_reason if gpu_reason is not None and needs_gpu else ""
    if fault:
        notice = f"PLANTED FAULT {fault} (test-only): this run must fail. " + notice
    if notice:
        progress.line(notice)
    results: list[GateResult] = []
    shard_gpu = os.environ.get(GPU_INDEX_ENV)  # a worker of a run over several GPUs: say which GPU ran each gate
    for phase_spec in (p for p in config.phases if p.number <= phase):
        if not phase_spec.gates and only is None:
            results.append(phase_without_gates(phase_spec.number))
        for spec in (s for s in phase_spec.gates if s in specs):
            ctx = GateContext(spec=spec, config=config, run_dir=run_dir, repo_root=repo_root, seed=base_seed,
                              step=progress.step, fault=fault)
            progress.start(f"[phase {spec.phase}] {spec.name}")
            gpu_at_start = gpu_state(shard_gpu) if shard_gpu else None
            t0 = time.monotonic()
            result = run_gate(spec, ctx, gpu_reason)
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
