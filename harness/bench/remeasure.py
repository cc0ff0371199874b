"""`make bench-baseline`'s second look: the workloads whose stored ratio spread above its limit timed again.

Why: the stored run is refused when any workload's FlashCore / reference pair spreads above stored_run's limit,
and that reference is another library. On a lent H200 FA2 alone moved 6 % run to run on sweep-s4096, and one
2.24 % pair refused a whole 282 s suite (reports/evidence/README.md, after phase7-h200-ab2078d), so a new GPU
could not be prepared in one command. Timing those workloads again (every backend of them, in rounds of their own:
the pair stays paired) settles a passing disturbance; a pair noisy every time stays refused. Up to
stored_run.remeasure times (gates/bench.yaml); each new measurement of a workload replaces the old one whole, never
picked from by its spread, and the stored run names every file it came from.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence

from harness.bench.record import Run

# (workloads to time again, attempt number from 1) -> that run, or None when it could not be measured
Measure = Callable[[Sequence[str], int], Run | None]


def complete(run: Run, again: Run, workload: str) -> bool:
    """Whether `again` holds every backend `run` has for `workload` (a test that errored or a cut run records
    fewer): only then may its measurements replace the old ones, else the stored run would lose the workload."""
    return {b for w, b in run.measurements if w == workload} <= {b for w, b in again.measurements if w == workload}


def merged(run: Run, again: Run, workloads: Sequence[str]) -> Run:
    """`run` with every measurement of `workloads` taken from `again`."""
    names = set(workloads)
    kept = {k: m for k, m in run.measurements.items() if k[0] not in names}
    kept.update({k: m for k, m in again.measurements.items() if k[0] in names})
    return dataclasses.replace(run, path=f"{run.path} + {again.path}", measurements=kept)


def settle(run: Run, noisy: Callable[[Run], list[str]], measure: Measure, attempts: int) -> Run:
    """The run after timing its noisy workloads again, up to `attempts` times, while some stay noisy and the new
    run is of the same GPU."""
    for attempt in range(1, attempts + 1):
        names = noisy(run)
        if not names:
            break
        print(f"flashcore bench: {', '.join(names)}: the stored ratio spread above its limit; timing "
              f"{'it' if len(names) == 1 else 'them'} again ({attempt} of {attempts})", file=sys.stderr, flush=True)
        again = measure(names, attempt)
        if again is None:
            break
        if again.gpu != run.gpu:
            print(f"flashcore bench: the new measurement ran on {again.gpu}, the run on {run.gpu}: not merged",
                  file=sys.stderr)
            break
        whole = [w for w in names if complete(run, again, w)]
        if len(whole) < len(names):
            print(f"flashcore bench: {', '.join(w for w in names if w not in whole)}: not every backend measured "
                  "again; the first measurement stays", file=sys.stderr)
        if not whole:
            break
        run = merged(run, again, whole)
    return run
