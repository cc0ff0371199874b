"""A phase shared by several CI runners: each runs `python -m harness gate --shard I/N` (the `first` gates of
gates/shard.yaml, e.g. build, and its share of a placement every runner computes alike), then
`python -m harness merge` joins their results.json into one report and one exit code (ci/merge_job.sh).

The placement uses default weights only: a runner-local history must not make two runners disagree on who runs
what. Merging: each gate of phases 1..N comes from the run that ran it; a gate every runner ran (build) takes the
worst verdict; a gate no runner ran is an ERROR; each gate is tagged with its share and GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from harness.results import GateResult, RunResult, Status
from harness.schema import Config, GateSpec
from harness.shard import ShardSettings, in_config_order, plan


def parse_shard(spec: str) -> tuple[int, int]:
    """`2/3` -> (2, 3); ValueError with why for anything else."""
    try:
        i, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise ValueError(f"--shard {spec!r}: expected I/N, e.g. 1/2") from None
    if not 1 <= i <= n:
        raise ValueError(f"--shard {spec!r}: expected 1 <= I <= N")
    return i, n


def shard_gates(names: Sequence[str], i: int, n: int, settings: ShardSettings) -> list[str]:
    """The gates runner I of N runs: the `first` gates (each runner builds its own library) and its share of a
    placement every runner computes alike (default weights: no runner-local history decides it)."""
    share = plan(names, list(range(1, n + 1)), settings, {}).get(i, [])
    return [g for g in names if g in settings.first or g in share]


def merge_runs(config: Config, phase: int, runs: Sequence[RunResult], sources: Sequence[str]) -> RunResult:
    """The shards' runs as one: each gate of phases 1..N from the run that ran it (a gate every runner ran, like
    build, from the worst of them); a gate no shard ran is an ERROR; a phase without gates fails, as always."""
    from harness.results import combine

    got: dict[str, list[tuple[GateResult, str, RunResult]]] = {}
    for run, source in zip(runs, sources, strict=True):
        for g in run.gates:
            got.setdefault(g.name, []).append((g, source, run))

    def result_for(spec: GateSpec) -> GateResult:
        ran = got.get(spec.name, [])
        if not ran:
            return GateResult(spec.name, spec.phase, Status.ERROR,
                              message=f"no shard ran this gate (merged: {', '.join(sources)})")
        worst = combine([g.status for g, _, _ in ran])
        g, source, run = next(x for x in ran if x[0].status is worst)
        gpu = (g.details or {}).get("gpu") or {"index": 0, "name": run.environment.get("gpu"),
                                               "host": run.environment.get("hostname")}
        return dataclasses.replace(g, phase=spec.phase, details={
            **(g.details or {}), "gpu": gpu, "shard": run.environment.get("shard"), "from": source,
            **({"ran_on": len(ran)} if len(ran) > 1 else {})})

    gates = in_config_order(config, phase, result_for)
    first = runs[0] if runs else None
    env = dict(first.environment) if first else {}
    env["merged_from"] = [{"file": s, "run_id": r.run_id, "shard": r.environment.get("shard"),
                           "host": r.environment.get("hostname"), "gpu": r.environment.get("gpu")}
                          for r, s in zip(runs, sources, strict=True)]
    commits = {r.environment.get("git_commit") for r in runs}
    notice = f"shards of different commits merged: {sorted(str(c) for c in commits)}" if len(commits) > 1 else ""
    return RunResult(run_id=(first.run_id + "-merged") if first else "merged", phase=phase, gates=gates,
                     environment=env, started_at=min((r.started_at for r in runs), default=""),
                     elapsed_s=max((r.elapsed_s for r in runs), default=0.0), notice=notice,
                     phase_names={p.number: p.name for p in config.phases if p.number <= phase})

