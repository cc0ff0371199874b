"""A phase shared by several CI runners: each runs `python -m harness gate --shard I/N` (the `first` gates of
gates/shard.yaml, e.g. build, and its share of a placement every runner computes alike), then
`python -m harness merge` joins their results.json into one report and one exit code (ci/merge_job.sh).

The placement uses default weights only: a runner-local history must not make two runners disagree on who runs
what. Merging takes only the distinct shares of one run (one run id, commit, tree state and seed, one shard count,
no share or gate twice: check_shares refuses anything else, naming the files and what differs): each gate of phases
1..N comes from the run that ran it; a gate every runner ran (build) takes the worst verdict; a gate no runner ran is
an ERROR; each gate is tagged with its share and GPU; a share whose `gate` command exited otherwise than its results
say is an ERROR of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence

from harness.results import GateResult, RunResult, Status
from harness.schema import Config, GateSpec
from harness.shard import ShardSettings, in_config_order, plan
from harness.support.notices import run_notice


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


# What every share of one run has in common (harness/cli.py records them): a share of another run, of another
# commit or drawn from another seed would judge other code or other inputs.
SAME_IN_EVERY_SHARE = ("shard_run", "git_commit", "git_dirty", "seed")


class MergeRefused(ValueError):
    """Files that are not the shares of one run: the message names the files and what differs."""


def share_of(run: RunResult, source: str) -> tuple[int, int]:
    """The (I, N) a stored share records (environment.shard, written by gate --shard I/N)."""
    try:
        return parse_shard(str(run.environment.get("shard")))
    except ValueError:
        raise MergeRefused(f"{source}: not a share of a run (environment.shard is "
                           f"{run.environment.get('shard')!r}; written by gate --shard I/N)") from None


def check_shares(runs: Sequence[RunResult], sources: Sequence[str], first: Collection[str]) -> None:
    """MergeRefused unless the files are distinct shares of one run: the same run id, commit, tree state and
    seed (SAME_IN_EVERY_SHARE), the same number of shares, no share twice and no gate but the `first` ones (which
    every share runs) in two files."""
    shares = [share_of(r, s) for r, s in zip(runs, sources, strict=True)]
    counts = {n for _, n in shares}
    if len(counts) > 1:
        raise MergeRefused("shares of different shard counts: " + ", ".join(
            f"{s} {i}/{n}" for s, (i, n) in zip(sources, shares, strict=True)))
    for key in SAME_IN_EVERY_SHARE:
        missing = [s for r, s in zip(runs, sources, strict=True) if key not in r.environment]
        if missing:
            raise MergeRefused(f"{', '.join(missing)}: no environment.{key} recorded (a share written by gate "
                               "--shard I/N --run-id ID records it)")
        values = {str(r.environment[key]) for r in runs}
        if len(values) > 1:
            raise MergeRefused(f"shares of different runs: environment.{key} differs: " + ", ".join(
                f"{s} {r.environment[key]!r}" for r, s in zip(runs, sources, strict=True)))
    claimed: dict[int, str] = {}
    for (i, n), source in zip(shares, sources, strict=True):
        if i in claimed:
            raise MergeRefused(f"{claimed[i]} and {source} both claim share {i}/{n}")
        claimed[i] = source
    ran: dict[str, str] = {}
    for run, source in zip(runs, sources, strict=True):
        for g in (g for g in run.gates if g.name not in first):
            if g.name in ran:
                raise MergeRefused(f"{ran[g.name]} and {source} both ran gate {g.name} (overlapping shares)")
            ran[g.name] = source


def exit_code_entries(runs: Sequence[RunResult], sources: Sequence[str], codes: Sequence[int | None],
                      phase: int) -> list[GateResult]:
    """One ERROR per share whose `gate` command's exit code (None: none recorded) its results contradict: 0 for a
    pass, anything else otherwise (make reports a failed recipe as 2). A share that wrote a passing results.json and
    then failed (a renderer error) must not turn green in the merge."""
    out = []
    for run, source, code in zip(runs, sources, codes, strict=True):
        if code is not None and (code == 0) == (run.exit_code == 0):
            continue
        i, n = share_of(run, source)
        said = "no exit code was recorded" if code is None else f"the gate command exited {code}"
        out.append(GateResult(f"share{i}of{n}-exit-code", phase, Status.ERROR, message=(
            f"{source}: {said}, but its results say {run.status.value}: the share did not finish as its report "
            "says; see its gate.log")))
    return out


def merge_runs(config: Config, phase: int, runs: Sequence[RunResult], sources: Sequence[str],
               codes: Sequence[int | None] | None = None) -> RunResult:
    """The shards' runs as one: each gate of phases 1..N from the run that ran it (a gate every runner ran, like
    build, from the worst of them); a gate no shard ran is an ERROR; a phase without gates fails, as always.
    `codes`: each share's recorded exit code (exit_code_entries), when given. The caller has checked that the runs
    are the shares of one run (check_shares)."""
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
    if codes is not None:
        gates += tuple(exit_code_entries(runs, sources, codes, phase))
    first = runs[0] if runs else None
    env = dict(first.environment) if first else {}
    env.pop("shard", None)
    env["merged_from"] = [{"file": s, "run_id": r.run_id, "shard": r.environment.get("shard"),
                           "host": r.environment.get("hostname"), "gpu": r.environment.get("gpu")}
                          for r, s in zip(runs, sources, strict=True)]
    notice = run_notice(" ".join(dict.fromkeys(r.notice for r in runs if r.notice)), gates)
    return RunResult(run_id=str(env.get("shard_run") or "merged"), phase=phase, gates=gates, notice=notice,
                     environment=env, started_at=min((r.started_at for r in runs), default=""),
                     elapsed_s=max((r.elapsed_s for r in runs), default=0.0),
                     phase_names={p.number: p.name for p in config.phases if p.number <= phase})
