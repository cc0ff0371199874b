"""`python -m harness.shard_costs [RESULTS_JSON ...]`: the `seconds:` block of gates/shard.yaml from measured runs.

The placement of a run over several GPUs weighs each gate by its latest wall time in the history store, and by the
estimates shipped in gates/shard.yaml where the history has none (a first run on a new host). This prints those
estimates from the newest run of the history store (gates/history.yaml `file`, $FLASHCORE_HISTORY, or --db) or from
the given results.json files (.json.xz too; the median per gate over the files that ran it), rounded up to whole
seconds, to paste over the block when the gates' times have moved; `--several-gpus`: the same numbers as the
`several_gpus_seconds:` block, which wins on a run over several GPUs (give it such runs). `--workloads`: the
`workload_seconds:` block instead, by which the perf group's workloads are dealt to its parts
(harness/shard_perf.py): each workload's GPU seconds in the perf gates of the given runs, from their rounds and
medians, less the pairs a gate run leaves untimed (harness/bench/selection.py).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.results import gate_work_seconds

if TYPE_CHECKING:
    from harness.schema import Config


def seconds_block(seconds: Mapping[str, float], order: Sequence[str], key: str = "seconds") -> str:
    """'seconds:' and one '  gate: N' line per gate in `order` that has a time (N rounded up, at least 1)."""
    lines = [f"{key}:"] + [f"  {g}: {max(1, math.ceil(seconds[g]))}" for g in order if g in seconds]
    return "\n".join(lines) + "\n"


def workload_cost(rows: Sequence[Mapping[str, Any]], rounds: int, timing: Mapping[str, Any],
                  skip: Collection[str] = ()) -> float:
    """GPU seconds one workload's rows of a perf gate took (harness/bench/timing.py): per backend timed, its
    rounds (each call with its clock probe) and its warm-up (`warmup` calls, at least `warmup_ms`); the backends
    in `skip` (now left untimed) not counted."""
    probe_ms = float(timing.get("clock_probe_us", 0)) / 1000
    total = 0.0
    for row in rows:
        t = row.get("median_ms")
        if t is None or row.get("backend") in skip:
            continue
        total += rounds * (t + probe_ms) + max(int(timing.get("warmup", 0)) * t, float(timing.get("warmup_ms", 0)))
    return total / 1000


def workload_seconds(paths: Sequence[Path], untimed: Collection[tuple[str, str]] = ()) -> dict[str, float]:
    """Each workload's GPU seconds in the perf gates of the given results.json files (the first gate that lists a
    workload: the others reuse its measurements), less the pairs `untimed` (harness/bench/selection.py)."""
    from harness.render.stored import read_run

    got: dict[str, float] = {}
    for path in paths:
        found: dict[str, float] = {}
        for g in read_run(path).gates:
            timing = (g.details or {}).get("timing") or {}
            for wl in (g.details or {}).get("workloads") or []:
                if not isinstance(wl, Mapping) or not isinstance(wl.get("rounds"), int) or wl.get("name") in found:
                    continue  # another gate's workload list (names only), or a workload counted already
                name = str(wl["name"])
                skip = {b for w, b in untimed if w == name}
                found[name] = workload_cost(wl.get("rows") or [], wl["rounds"], timing, skip)
        got.update(found)
    return got


def from_results(paths: Sequence[Path]) -> dict[str, float]:
    from harness.render.stored import read_run

    got: dict[str, list[float]] = {}
    for path in paths:
        for g in read_run(path).gates:
            secs = gate_work_seconds({"details": g.details, "elapsed_s": g.elapsed_s})  # a split gate: every part
            if secs is not None and secs > 0:
                got.setdefault(g.name, []).append(secs)
    # the median: one run's time moves with what shared the host with it (random-shapes 3-18 s in six runs)
    return {name: statistics.median(times) for name, times in got.items()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.shard_costs", description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="*", help="results.json files (default: the history store)")
    ap.add_argument("--db", type=Path, help="history file (default $FLASHCORE_HISTORY, else gates/history.yaml)")
    ap.add_argument("--gates-dir", type=Path, default=Path("gates"))
    block = ap.add_mutually_exclusive_group()  # each prints one block of gates/shard.yaml
    block.add_argument("--workloads", action="store_true",
                       help="the `workload_seconds:` block instead: each perf workload's GPU seconds in the given runs")
    block.add_argument("--several-gpus", action="store_true",
                       help="print the `several_gpus_seconds:` block (runs over several GPUs) instead of `seconds:`")
    args = ap.parse_args(argv)
    from harness.config import load_config
    from harness.render.stored import StoredRunError
    from harness.shard import last_gate_seconds

    if args.workloads:
        return print_workloads(args.results, load_config(args.gates_dir))
    if args.results:
        try:
            seconds = from_results(args.results)
        except StoredRunError as e:
            print(f"python -m harness.shard_costs: {e}", file=sys.stderr)
            return 1
    else:
        from harness.history.cli import history_path
        from harness.history.trends import load_history_settings

        seconds = last_gate_seconds(args.db or history_path(load_history_settings(args.gates_dir)))
    config = load_config(args.gates_dir)
    order = [g.name for p in config.phases for g in p.gates]
    if not seconds:
        print("no gate times found: run a phase first, or name a results.json", file=sys.stderr)
        return 1
    sys.stdout.write(seconds_block(seconds, order, "several_gpus_seconds" if args.several_gpus else "seconds"))
    return 0


def print_workloads(paths: Sequence[Path], config: Config) -> int:
    """The `workload_seconds:` block from the perf gates of `paths`, in workloads.yaml then sweep order, the pairs
    a gate run leaves untimed today not counted."""
    from harness.bench.selection import untimed
    from harness.render.stored import StoredRunError
    from harness.shard_perf import bench_settings

    settings = bench_settings(config)
    try:
        seconds = workload_seconds(paths, untimed(config, settings))
    except StoredRunError as e:
        print(f"python -m harness.shard_costs: {e}", file=sys.stderr)
        return 1
    if not seconds:
        print("no perf gate measurements found: name a results.json of a run with the perf gates", file=sys.stderr)
        return 1
    order = [*config.workloads, *(w.name for w in settings.sweep_workloads)]
    sys.stdout.write(seconds_block(seconds, list(dict.fromkeys(order)), "workload_seconds"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
