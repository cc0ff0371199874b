"""`make gate-phaseN GPUS=all`: the gates of phases 1..N spread over the host's GPUs, one report and one exit code.

The fan-out is a thread pool (stdlib concurrent.futures) over worker processes, one per GPU: each is
`python -m harness gate --phase N --only <its gates>` with CUDA_VISIBLE_DEVICES set to its GPU and the run's base
seed, so a gate sees the same inputs as in a one-GPU run. Chosen over pytest-xdist because the gates are not
pytest tests (the engine runs them and owns their verdicts), and over a process pool of Python functions because a
CUDA context must not be forked: a fresh interpreter per GPU is the one safe unit. A worker runs its gates one at a
time, so a timing-sensitive gate (perf, ncu, scaling) is alone on its GPU while it runs.

Placement (gates/shard.yaml): `first` gates run here before the workers start (build: the workers load its
library); each `together` list stays in one worker (the perf gates share one measurement); the rest are spread by
longest-first over the GPUs, each gate weighted by its wall time in the last run in the history (else
`default_seconds`). Each merged gate carries details["gpu"]: the GPU's index, name and UUID, and its SM clock and
power when the gate started (nvidia-smi). A worker that dies (or writes no results) makes each of its gates an
ERROR naming its log; the other workers' results still count.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.results import GateResult, RunResult, Status
from harness.schema import Config, ConfigError, GateSpec, read_yaml

SHARD_FILE = "shard.yaml"
_KEYS = ("first", "together", "default_seconds")
GPU_INDEX_ENV = "FLASHCORE_GPU_INDEX"  # set in a worker: the physical index of its GPU (nvidia-smi's numbering)


@dataclass(frozen=True)
class ShardSettings:
    first: tuple[str, ...]
    together: tuple[tuple[str, ...], ...]
    default_seconds: float


def load_shard_settings(gates_dir: Path) -> ShardSettings:
    file = gates_dir / SHARD_FILE
    data = read_yaml(file, _KEYS)

    def names(key: str, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(n, str) and n for n in value):
            raise ConfigError(file, key, value, "a list of gate names")
        return tuple(value)

    together = data.get("together")
    if not isinstance(together, list):
        raise ConfigError(file, "together", together, "a list of lists of gate names")
    seconds = data.get("default_seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
        raise ConfigError(file, "default_seconds", seconds, "a number > 0")
    return ShardSettings(names("first", data.get("first")),
                         tuple(names(f"together[{i}]", g) for i, g in enumerate(together)), float(seconds))


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


def plan(gates: Sequence[str], gpus: Sequence[int], settings: ShardSettings,
         seconds: dict[str, float]) -> dict[int, list[str]]:
    """Which gates each GPU's worker runs (in the order of `gates`): the `together` groups, then single gates,
    longest first, each on the GPU with the least work so far. `first` gates are not placed (the parent runs them)."""
    todo = [g for g in gates if g not in settings.first]
    units: list[list[str]] = [[g for g in group if g in todo] for group in settings.together]
    grouped = {g for u in units for g in u}
    units = [u for u in units if u] + [[g] for g in todo if g not in grouped]
    load = dict.fromkeys(gpus, 0.0)
    placed: dict[int, list[str]] = {i: [] for i in gpus}

    def weight(unit: list[str]) -> float:
        return sum(seconds.get(g, settings.default_seconds) for g in unit)

    for unit in sorted(units, key=weight, reverse=True):
        target = min(gpus, key=lambda i: (load[i], gpus.index(i)))
        placed[target] += unit
        load[target] += weight(unit)
    order = {g: n for n, g in enumerate(gates)}
    return {i: sorted(gs, key=order.__getitem__) for i, gs in placed.items() if gs}


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


def run_worker(cmd: list[str], gpu: int, run_dir: Path, rel: str, gate_names: Sequence[str]) -> list[GateResult]:
    """One worker writing into run_dir/rel; its gates' results (their logs re-rooted at the run directory), or one
    ERROR per gate when it died or wrote no results."""
    from harness.render.stored import StoredRunError, read_run

    out = run_dir / rel
    out.mkdir(parents=True, exist_ok=True)
    log = f"{rel}/worker.log"
    device = physical_id(gpu)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": device, GPU_INDEX_ENV: device, "PYTHONUNBUFFERED": "1"}
    with (run_dir / log).open("w") as f:
        code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, check=False).returncode
    try:
        got = {g.name: dataclasses.replace(g, logs=tuple(f"{rel}/{x}" for x in g.logs))
               for g in read_run(out / "results.json").gates}
    except (OSError, StoredRunError, ValueError) as e:
        why = f"the worker on GPU {gpu} wrote no results (exit code {code}; {type(e).__name__}): see {log}"
        return [GateResult(name=n, phase=0, status=Status.ERROR, message=why, logs=(log,)) for n in gate_names]
    for view in ("index.html", "summary.md"):  # the merged report shows these gates: no second copy
        (out / view).unlink(missing_ok=True)
    missing = [n for n in gate_names if n not in got]
    lost = [GateResult(name=n, phase=0, status=Status.ERROR, logs=(log,),
                       message=f"the worker on GPU {gpu} stopped before this gate (exit code {code}): see {log}")
            for n in missing]
    return [got[n] for n in gate_names if n in got] + lost


def in_config_order(config: Config, phase: int, result_for: Callable[[GateSpec], GateResult | None]) -> tuple[
        GateResult, ...]:
    """One result per gate of phases 1..N in the configuration's order (result_for: a gate's result, None to leave
    it out); a phase without gates gets its failing entry, as in a one-GPU run."""
    from harness.engine import phase_without_gates

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


def run_sharded(config: Config, phase: int, gpus: Sequence[int], run_first: Callable[[Sequence[str]], RunResult],
                seed: int, run_dir: Path, gates_dir: Path, seconds: dict[str, float],
                say: Callable[[str], None] = print) -> RunResult:
    """The `first` gates here (run_first: the engine over those names), then the workers; one merged RunResult."""
    settings = config.once(SHARD_FILE, load_shard_settings)
    names = [g.name for g in config.gates_through(phase)]
    first_names = [n for n in names if n in settings.first]
    base = run_first(first_names)
    placed = plan(names, gpus, settings, seconds)
    for gpu, gs in placed.items():
        say(f"[shard] GPU {gpu}: {', '.join(gs)}")
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, len(placed))) as pool:
        futures = {gpu: pool.submit(run_worker, worker_command(phase, gs, run_dir / f"shards/gpu{gpu}", seed,
                                                               gates_dir), gpu, run_dir, f"shards/gpu{gpu}", gs)
                   for gpu, gs in placed.items()}
        shards = {gpu: f.result() for gpu, f in futures.items()}
    for gpu, results in shards.items():
        bad = [r.name for r in results if r.status is not Status.PASS]
        say(f"[shard] GPU {gpu} done: {len(results) - len(bad)}/{len(results)} pass" + (f" ({', '.join(bad)})"
                                                                                        if bad else ""))
    merged = merge(config, phase, base.gates, shards, base)
    return dataclasses.replace(merged, elapsed_s=base.elapsed_s + time.monotonic() - t0,
                               environment={**base.environment, "gpus_used": list(placed),
                                            "shards": {str(g): gs for g, gs in placed.items()}})


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
