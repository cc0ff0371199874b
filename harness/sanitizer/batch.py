"""Several workloads of one tool in one compute-sanitizer process: which runs share a process, and its command.

Why: a small run's cost is its process's start (the tool attaching, the CUDA context, the module's instrumentation).
On the H200, ten small serving workloads took 9.4 s as ten memcheck runs and 1.5 s as one run of all ten (racecheck
16.9 / 3.2 s, synccheck 8.8 / 1.4 s, initcheck 9.0 / 1.5 s: reports/evidence/sanitizer-batch-pilot-h200-b1fabb4.txt).

Sound: the driver runs the workloads of `--next`-separated flags one after another (kernel/driver.cu main); each
allocates and frees its own buffers and the library keeps no device memory between calls, so no workload sees
another's memory, and the tools check every launch as it runs. A batch passes only with a clean log that holds
every workload's completion line; otherwise each of its workloads runs again alone and that run is its verdict
(harness/gates/sanitizer.py run_batch), so a finding names the workload that has it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Run = tuple[str, str]  # (tool, workload name)
SEPARATOR = "--next"  # kernel/driver.cu: the flags after it are the next workload's


def pack(plan: Sequence[Run], work: Callable[[str, str], float], start: Callable[[str], float],
         cap_s: float) -> list[list[int]]:
    """The plan's runs as batches (indices into `plan`), each of one tool and at most `cap_s` modelled seconds
    (its process's `start` plus each run's `work`), filled first-fit with the runs longest first; a run that alone
    reaches the cap has a batch of its own, and so has every run when `cap_s` is 0. The batches come tool by tool
    in the plan's order, each longest run first: the same plan packs the same way in every worker."""
    batches: list[list[int]] = []
    for tool in dict.fromkeys(t for t, _ in plan):
        mine = sorted((i for i, (t, _) in enumerate(plan) if t == tool), key=lambda i: -work(*plan[i]))
        costs: list[float] = []  # each batch's modelled seconds so far, beside it in `bins`
        bins: list[list[int]] = []
        for i in mine:
            cost = work(*plan[i])
            fit = next((k for k, c in enumerate(costs) if cap_s > 0 and c + cost <= cap_s), None)
            if fit is None:
                costs.append(start(tool) + cost)
                bins.append([i])
            else:
                costs[fit] += cost
                bins[fit].append(i)
        batches += bins
    return batches


def series(args: Sequence[Sequence[str]]) -> list[str]:
    """The driver's flags for running each workload's `args` in turn in one process."""
    out: list[str] = []
    for n, a in enumerate(args):
        out += ([SEPARATOR] if n else []) + list(a)
    return out


def batch_cost(members: Sequence[int], plan: Sequence[Run], work: Callable[[str, str], float],
               start: Callable[[str], float]) -> float:
    """A batch's modelled seconds: one start and each member's work (a batch of one: its run alone)."""
    return start(plan[members[0]][0]) + sum(work(*plan[i]) for i in members)
