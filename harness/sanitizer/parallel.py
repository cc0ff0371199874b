"""How many compute-sanitizer runs a sanitizer gate makes at once, and which share of its workloads it runs.

compute-sanitizer is CPU-bound: it checks every instrumented access on the host, so one run keeps a core busy while
the GPU mostly idles (sanitizer-all: 362 s for runs one at a time on the H100). Several runs at once on one GPU cut
the wall time, bounded by the CPU cores this worker may use (the host's cores shared among the workers of a run over
several GPUs) and by the GPU memory free (each run's buffers plus the tool's shadow memory): gates/phases.yaml
`parallel_max`, `parallel_cpus_per_run`, `parallel_gpu_mib_per_run`. An unreadable free memory allows one run:
too many runs at once could fail on memory, which would be the host's fault reported as the kernel's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from harness.shard_plan import WORKERS_ENV, deal


@dataclass(frozen=True)
class Limits:
    max_runs: int
    cpus_per_run: int
    gpu_mib_per_run: int


def concurrency(limits: Limits, cores: int, workers: int, free_mib: int | None) -> tuple[int, str]:
    """(runs at once, why): the least of the YAML cap, this worker's cores / cpus_per_run and free GPU memory /
    gpu_mib_per_run; at least one."""
    mine = max(1, cores // max(1, workers))
    by_cpu = max(1, mine // limits.cpus_per_run)
    by_mem = 1 if free_mib is None else max(1, free_mib // limits.gpu_mib_per_run)
    runs = max(1, min(limits.max_runs, by_cpu, by_mem))
    mem = "free GPU memory unknown" if free_mib is None else f"{free_mib} MiB GPU memory free"
    return runs, (f"{runs} at once: cap {limits.max_runs}, {mine} of {cores} cores for this worker "
                  f"({workers} on the host) at {limits.cpus_per_run} per run, {mem} at {limits.gpu_mib_per_run} MiB "
                  "per run")


def host_facts(environ: Mapping[str, str] | None = None) -> tuple[int, int, int | None]:
    """(cores this process may use, workers sharing the host, free MiB of this worker's GPU or None)."""
    from harness.env import query_gpu
    from harness.shard import GPU_INDEX_ENV, physical_id

    environ = os.environ if environ is None else environ
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        workers = max(1, int(environ.get(WORKERS_ENV, "1")))
    except ValueError:
        workers = 1
    device = environ.get(GPU_INDEX_ENV) or physical_id(0)
    free = query_gpu(("memory.free",), device).get("memory.free", "")
    return cores, workers, int(float(free)) if free.replace(".", "", 1).isdigit() else None


def share(plan: Sequence[tuple[str, str]], cost: Callable[[str, str], float], part: int, parts: int
          ) -> list[tuple[str, str]]:
    """The (tool, workload) runs of part `part` of `parts`: every tool of a workload in the same part, the
    workloads dealt by their runs' modelled seconds (harness/sanitizer/cost.py; longest first onto the lightest
    part), the same in every worker: each worker computes its own share from the same plan and model."""
    names = list(dict.fromkeys(w for _, w in plan))
    per_workload = {w: sum(cost(t, x) for t, x in plan if x == w) for w in names}
    mine = set(deal([(w, per_workload[w]) for w in names], parts)[part - 1])
    return [(t, w) for t, w in plan if w in mine]
