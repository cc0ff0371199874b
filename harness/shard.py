"""`make gate-phaseN` (GPUS=all by default): the gates of phases 1..N spread over the host's GPUs, one report and
one exit code.

The fan-out is a thread pool (stdlib concurrent.futures) over worker processes, one or more per GPU: each is
`python -m harness gate --phase N --only <its gates>` with CUDA_VISIBLE_DEVICES set to its GPU (a worker holding an
`every_gpu` gate, the api gate's case of a tensor on a second GPU, sees the run's GPUs where nothing measures after
its own) and the run's base seed, so a gate sees the same inputs as in a one-GPU run. Chosen over pytest-xdist
because the gates are not pytest tests (the engine runs them and owns their verdicts), and over a process pool of
Python functions because a CUDA context must not be forked: a fresh interpreter per worker is the one safe unit. A
worker runs its gates one at a time; a timing-sensitive gate (gates/shard.yaml `measures`: perf, ncu, scaling) runs
in a worker that has its GPU to itself, while gates that only check correctness share a GPU, `workers_per_gpu`
workers at once.

Placement (gates/shard.yaml, harness/shard_plan.py): `first` gates run here before the workers start (build: the
workers load its library); with several GPUs the `isolated` gates (the perf group) then run while no other gate
does: as one part per GPU at once, each a share of the group's workloads (harness/shard_perf.py; each gate's parts
joined and judged over all of them, shard_join.py), or whole on one GPU (`isolated_parts: false`); the other
measuring gates (ncu) in one worker alone on its GPU; the rest spread by longest-first over the workers, each gate
weighted by its wall time in the last run in the history, else the estimate shipped in gates/shard.yaml
(`several_gpus_seconds` over `seconds` on a run over several GPUs); a `split` gate (sanitizer-all) runs as one part
per worker and its parts are joined into one result (`join_parts`). Every worker's FLASHCORE_WORKERS is the number
of workers of its stage (its share of the host's cores). Each merged gate carries details["gpu"]: the GPU's index,
name and UUID, and its SM clock and power when the gate started (nvidia-smi). A worker that dies (or writes no
results) makes each of its gates an ERROR naming its log; the other workers' results still count. The run's
environment records the stages, the workers per GPU and the critical path (which worker, which gates, how many
seconds), and the summary line says it.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness.results import GateResult, RunResult, Status, combine, phase_without_gates
from harness.schema import Config, GateSpec
from harness.shard_plan import (
    GPU_INDEX_ENV,
    PART_SEP,
    PARTS_ENV,
    SHARD_FILE,
    WORKERS_ENV,
    ShardSettings,
    Stage,
    Worker,
    gate_of,
    load_shard_settings,
    parts_env,
    plan,
    stage_kind,
    stage_names,
)
from harness.shard_plan import critical_path as path_of
from harness.shard_plan import stages as stages_of
from harness.support.notices import run_notice

# re-exported: the CI runners' placement and the CLI use them
__all__ = ["GPU_INDEX_ENV", "SHARD_FILE", "ShardSettings", "load_shard_settings", "plan"]



def gpu_list(spec: str, count: Callable[[], int]) -> list[int]:
    """`all` -> every visible GPU; `0,2` -> those; ValueError with why for anything else."""
    if spec == "all":
        n = count()
        if n < 1:
            raise ValueError("GPUS=all: no GPU is visible")
        return list(range(n))
    try:
        got = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"GPUS={spec!r}: expected all or a comma-separated list of GPU indices") from None
    if not got or len(set(got)) != len(got) or min(got) < 0:
        raise ValueError(f"GPUS={spec!r}: expected all or distinct GPU indices >= 0")
    return got


def physical_id(gpu: int) -> str:
    """The CUDA_VISIBLE_DEVICES entry of this process's GPU `gpu` (an index or a UUID), for a worker's own
    CUDA_VISIBLE_DEVICES and for nvidia-smi -i (which numbers GPUs physically)."""
    visible = [x.strip() for x in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip()]
    return visible[gpu] if gpu < len(visible) else str(gpu)


def gpu_state(index: str) -> dict[str, Any]:
    """This GPU's id, name, UUID, SM clock (MHz) and power (W) now, from nvidia-smi -i (an index or a UUID);
    {"index": index} when it cannot be read."""
    from harness.env import query_gpu

    got = query_gpu(("name", "uuid", "clocks.sm", "power.draw"), index)
    if not got:
        return {"index": index}

    def number(text: str) -> float | None:
        try:
            return float(text)
        except ValueError:
            return None

    return {"index": index, "name": got["name"], "uuid": got["uuid"], "sm_mhz": number(got["clocks.sm"]),
            "power_w": number(got["power.draw"])}


def worker_command(phase: int, gates: Sequence[str], out: Path, seed: int, gates_dir: Path) -> list[str]:
    return [sys.executable, "-m", "harness", "gate", "--phase", str(phase), "--only", ",".join(gates),
            "--out", str(out), "--seed", str(seed), "--gates-dir", str(gates_dir), "--no-history"]


def run_worker(cmd: list[str], gpu: int, run_dir: Path, rel: str, gate_names: Sequence[str],
               extra_env: dict[str, str] | None = None, who: str = "", others: Sequence[int] = ()) -> list[GateResult]:
    """One worker writing into run_dir/rel; its gates' results (their logs re-rooted at the run directory), or one
    ERROR per gate, naming the worker (`who`, else by its GPU), when it died or wrote no results. The worker sees
    its GPU as device 0, then the GPUs `others` (gates/shard.yaml every_gpu), if any."""
    from harness.render.stored import StoredRunError, read_run

    out = run_dir / rel
    out.mkdir(parents=True, exist_ok=True)
    log = f"{rel}/worker.log"
    device = physical_id(gpu)
    who = who or f"the worker on GPU {gpu}"
    visible = ",".join([device, *(physical_id(g) for g in others if g != gpu)])
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": visible, GPU_INDEX_ENV: device, "PYTHONUNBUFFERED": "1",
           **(extra_env or {})}
    with (run_dir / log).open("w") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, check=False).returncode
    try:
        got = {g.name: dataclasses.replace(g, logs=tuple(f"{rel}/{x}" for x in g.logs))
               for g in read_run(out / "results.json").gates}
    except (OSError, StoredRunError, ValueError) as e:
        why = f"{who} wrote no results (exit code {code}; {type(e).__name__}): see {log}"
        return [GateResult(name=n, phase=0, status=Status.ERROR, message=why, logs=(log,)) for n in gate_names]
    for view in ("index.html", "summary.md"):  # the merged report shows these gates: no second copy
        (out / view).unlink(missing_ok=True)
    missing = [n for n in gate_names if n not in got]
    lost = [GateResult(name=n, phase=0, status=Status.ERROR, logs=(log,),
                       message=f"{who} stopped before this gate (exit code {code}): see {log}")
            for n in missing]
    return [got[n] for n in gate_names if n in got] + lost


def in_config_order(config: Config, phase: int, result_for: Callable[[GateSpec], GateResult | None]) -> tuple[
        GateResult, ...]:
    """One result per gate of phases 1..N in the configuration's order (result_for: a gate's result, None to leave
    it out); a phase without gates gets its failing entry, as in a one-GPU run."""
    ordered: list[GateResult] = []
    for p in (p for p in config.phases if p.number <= phase):
        if not p.gates:
            ordered.append(phase_without_gates(p.number))
        ordered += [r for r in map(result_for, p.gates) if r is not None]
    return tuple(ordered)


def merge(config: Config, phase: int, first: Sequence[GateResult], shards: dict[int, list[GateResult]],
          base: RunResult) -> RunResult:
    """One RunResult in the configuration's gate order; each shard's gates tagged with their GPU."""
    by_name: dict[str, GateResult] = {g.name: g for g in first}
    for gpu, results in shards.items():
        for r in results:
            by_name[r.name] = dataclasses.replace(r, details={**(r.details or {}),
                                                              "gpu": (r.details or {}).get("gpu") or {"index": gpu}})

    def result_for(spec: GateSpec) -> GateResult | None:
        r = by_name.get(spec.name)
        return dataclasses.replace(r, phase=spec.phase) if r is not None else None

    return dataclasses.replace(base, gates=in_config_order(config, phase, result_for))


def joined(parts: Sequence[tuple[int, GateResult]]) -> GateResult:
    """The parts of a split gate (each ran a share of its workloads on one GPU) as one result: every check, the
    worst status, lists in the details concatenated and per-tool numbers summed; details["parts"] names each."""
    results = [r for _, r in parts]
    first = results[0]
    details: dict[str, Any] = {}
    for key, value in (first.details or {}).items():
        values = [(r.details or {}).get(key) for r in results]
        if all(isinstance(v, list) for v in values):
            details[key] = [x for v in values for x in v]  # type: ignore[union-attr]
        elif all(isinstance(v, dict) and all(isinstance(x, int | float) for x in v.values()) for v in values):
            details[key] = {k: round(sum(v.get(k, 0) for v in values), 2) for v in values for k in v}  # type: ignore[union-attr]
        else:
            details[key] = value
    details["parts"] = [{"gpu": gpu, "status": r.status.value, "elapsed_s": round(r.elapsed_s, 1),
                         "checks": len(r.checks), "message": r.message} for gpu, r in parts]
    status = combine([r.status for r in results])
    message = "; ".join(f"part {n} of {len(parts)} (GPU {gpu}): {r.message}" for n, (gpu, r) in enumerate(parts, 1))
    # each part deals the gate's runs itself: parts dealt from different inputs may have left a run out or run it
    # twice, so their join is no verdict
    dealt = sorted({repr((r.details or {}).get("dealt_by")) for r in results})
    if "dealt_by" in details:  # the parts' one input, not their numbers summed
        details["dealt_by"] = (first.details or {}).get("dealt_by")
    if len(dealt) > 1:
        status = Status.ERROR
        message = f"the parts were dealt from different inputs ({' / '.join(dealt)}): runs may be missing or " \
                  f"doubled; {message}"
    return dataclasses.replace(first, status=status, checks=tuple(c for r in results for c in r.checks),
                               message=message, elapsed_s=max(r.elapsed_s for r in results),
                               logs=tuple(x for r in results for x in r.logs), details=details)


Finish = Callable[[GateResult, Sequence[tuple[int, GateResult]]], GateResult]  # (joined, its parts) -> result


def join_parts(results: Sequence[tuple[int, GateResult]], parted: Collection[str] = (),
               finish: Finish | None = None) -> dict[int, list[GateResult]]:
    """Per GPU, its gates' results; a gate that ran in parts (on several GPUs, or named in `parted`: a part may be
    a gate's only one) is joined, under its first part's GPU, then passed to `finish` (the perf group's verdicts
    over every part: harness/shard_join.py)."""
    by_name: dict[str, list[tuple[int, GateResult]]] = {}
    for gpu, r in results:
        by_name.setdefault(r.name, []).append((gpu, r))
    shards: dict[int, list[GateResult]] = {}
    for name, got in by_name.items():
        gpu, r = got[0]
        if len(got) > 1 or name in parted:
            r = joined(got)
            r = finish(r, got) if finish is not None else r
        shards.setdefault(gpu, []).append(r)
    return shards


def who(worker: Worker) -> str:
    """A worker as a dead worker's ERROR names it."""
    return f"the worker on GPU {worker.gpu}" if worker.of == 1 else \
        f"worker {worker.slot}/{worker.of} on GPU {worker.gpu}"


def run_stage(phase: int, stage: Stage, seed: int, run_dir: Path, gates_dir: Path,
              dir_of: Callable[[Worker], str], gpus: Sequence[int] = (), every_gpu: Collection[str] = (),
              measures: Collection[str] = ()) -> dict[Worker, tuple[list[GateResult], float]]:
    """Every worker of the stage, all at once, each pinned to its GPU: per worker, its results and wall seconds.
    Each is told how many workers run at once (its share of the host's cores). A worker holding an `every_gpu`
    gate also sees the run's other GPUs (`gpus`) after its own, but those where another worker of the stage runs
    `measures` gates."""
    # GPUs where a worker of this stage measures (ncu): no other worker's process may touch them
    measuring = {w.gpu for w, ts in stage.items() if {gate_of(t) for t in ts} & set(measures)}

    def one(w: Worker, tokens: list[str]) -> tuple[list[GateResult], float]:
        names = list(dict.fromkeys(gate_of(t) for t in tokens))
        extra = {WORKERS_ENV: str(len(stage))} | ({PARTS_ENV: parts_env(tokens)} if parts_env(tokens) else {})
        others = [g for g in gpus if g not in measuring] if set(names) & set(every_gpu) else []  # run_worker: own first
        t0 = time.monotonic()
        got = run_worker(worker_command(phase, names, run_dir / dir_of(w), seed, gates_dir), w.gpu, run_dir,
                         dir_of(w), names, extra, who(w), others)
        return got, time.monotonic() - t0

    with ThreadPoolExecutor(max_workers=max(1, len(stage))) as pool:
        futures = {w: pool.submit(one, w, tokens) for w, tokens in stage.items()}
        return {w: f.result() for w, f in futures.items()}


def run_sharded(config: Config, phase: int, gpus: Sequence[int], run_first: Callable[[Sequence[str]], RunResult],
                seed: int, run_dir: Path, gates_dir: Path, seconds: dict[str, float],
                say: Callable[[str], None] = print) -> RunResult:
    """The `first` gates here (run_first: the engine over those names), then the workers stage by stage; one
    merged RunResult with the stages and the critical path in its environment."""
    settings = config.once(SHARD_FILE, load_shard_settings)
    names = [g.name for g in config.gates_through(phase)]
    first_names = [n for n in names if n in settings.first]
    t0 = time.monotonic()
    base = run_first(first_names)
    first_s = time.monotonic() - t0
    from harness import shard_join, shard_perf

    stages = stages_of(names, gpus, settings, seconds, shard_perf.holds(config))
    titles = stage_names(stages, settings)
    results: list[tuple[int, GateResult]] = []
    walls: list[dict[Worker, tuple[list[str], float]]] = []
    for n, stage in enumerate(stages, 1):
        # each kind of stage in directories of its own: a GPU's workers of two stages never share one
        prefix = {"isolated": "isolated-", "measures": "measures-"}.get(stage_kind(n, stage, len(stages), settings), "")
        for w, gs in stage.items():
            say(f"[shard] {titles[n - 1]}: {w.name}: {', '.join(gs)}")
        dirs = {w: f"shards/{prefix}{w.dir}" for w in stage}
        got = run_stage(phase, stage, seed, run_dir, gates_dir, dirs.__getitem__, gpus, settings.every_gpu,
                        settings.measures)
        walls.append({w: (stage[w], wall) for w, (_, wall) in got.items()})
        for w, (rs, wall) in got.items():
            bad = [r.name for r in rs if r.status is not Status.PASS]
            say(f"[shard] {w.name} done in {wall:.0f} s: {len(rs) - len(bad)}/{len(rs)} pass"
                + (f" ({', '.join(bad)})" if bad else ""))
            results += [(w.gpu, r) for r in rs]
    path = path_of(first_names, first_s, walls, names=titles)
    per_gpu = max(w.of for st in stages for w in st)
    say(f"[shard] critical path {path['text']}; {per_gpu} worker{'s' if per_gpu > 1 else ''} per GPU at most")
    parted = {gate_of(t) for st in stages for ts in st.values() for t in ts if PART_SEP in t}
    isolated = set(settings.isolated)

    def finish(whole: GateResult, parts: Sequence[tuple[int, GateResult]]) -> GateResult:
        return shard_join.join(config, run_dir, whole, parts) if whole.name in isolated else whole

    merged = merge(config, phase, base.gates, join_parts(results, parted, finish), base)
    placed: dict[str, list[str]] = {}
    for stage in stages:
        for w, gs in stage.items():
            placed.setdefault(w.name, []).extend(gs)
    return dataclasses.replace(merged, elapsed_s=time.monotonic() - t0,
                               notice=run_notice(merged.notice, merged.gates),
                               environment={**base.environment, "gpus_used": list(gpus),
                                            "shards": placed,
                                            "stages": [{w.name: gs for w, gs in st.items()} for st in stages],
                                            "workers_per_gpu": per_gpu, "critical_path": path})


def last_gate_seconds(db_path: Path) -> dict[str, float]:
    """Each gate's wall time in the newest run of the history that ran it ({} without a readable history)."""
    from harness.history import store

    if not db_path.is_file():
        return {}
    try:
        db = store.open_db(db_path)
    except store.HistoryError:
        return {}
    try:
        return store.latest_gate_seconds(db)
    finally:
        db.close()
