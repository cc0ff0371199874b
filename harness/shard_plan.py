"""Where each gate of a run over several GPUs runs, and in which stage (gates/shard.yaml); pure, no I/O but the YAML.

Weights: each gate's wall time in the newest run of the history, else the estimate shipped in gates/shard.yaml
`seconds` (so a first run on a new host is balanced too), else `default_seconds`. Units (a `together` group, or one
gate) are placed longest first, each on the GPU with the least work so far (LPT). A `split` gate (sanitizer-all,
the longest) runs as one part per GPU, each part a share of its workloads dealt the same way by estimated cost
(`deal`), so every worker computes the same shares. The parts' results are joined into one gate (harness/shard.py).

Stages: with more than one GPU, the `isolated` gates (the perf group) run first, while no other gate runs on the
host; the rest spread over every GPU after them. A perf measurement then never shares its GPU, or the host's CPUs,
PCIe or power budget, with another worker's sanitizer or ncu runs, so a sharded run judges its paired ratios as
stably as a lone one. With `isolated_parts` the group runs as one part per GPU at the same time, each part every
isolated gate on a share of the group's workloads (harness/shard_perf.py deals them by `workload_seconds`);
without it, whole in one worker on the first GPU while the others wait.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.schema import ConfigError, read_yaml

SHARD_FILE = "shard.yaml"
_KEYS = ("first", "together", "isolated", "isolated_parts", "split", "default_seconds", "seconds",
         "default_workload_seconds", "workload_seconds")
PART_SEP = "@"  # "sanitizer-all@1/2": part 1 of 2 of a split gate, in a placement
PARTS_ENV = "FLASHCORE_GATE_PARTS"  # set in a worker: "sanitizer-all=1/2[,...]", the parts it runs
WORKERS_ENV = "FLASHCORE_WORKERS"  # set in a worker: how many workers share the host (its CPU share)
GPU_INDEX_ENV = "FLASHCORE_GPU_INDEX"  # set in a worker: the physical index (or UUID) of its GPU, as nvidia-smi


@dataclass(frozen=True)
class ShardSettings:
    first: tuple[str, ...]
    together: tuple[tuple[str, ...], ...]
    default_seconds: float
    isolated: tuple[str, ...] = ()
    split: tuple[str, ...] = ()
    seconds: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    isolated_parts: bool = False  # the isolated group as one part per GPU at once (else whole on the first GPU)
    default_workload_seconds: float = 1.0
    workload_seconds: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def weight(self, gate: str, history: Mapping[str, float]) -> float:
        return history.get(gate, self.seconds.get(gate, self.default_seconds))

    def workload_weight(self, workload: str) -> float:
        """A workload's expected time in the isolated group (every backend, every gate that times it), for
        dealing the group's workloads to its parts."""
        return self.workload_seconds.get(workload, self.default_workload_seconds)


def load_shard_settings(gates_dir: Path) -> ShardSettings:
    file = gates_dir / SHARD_FILE
    data = read_yaml(file, _KEYS)

    def names(key: str, value: Any) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(n, str) and n for n in value):
            raise ConfigError(file, key, value, "a list of gate names")
        return tuple(value)

    def positive(key: str, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(file, key, value, "a number > 0")
        return float(value)

    together = data.get("together")
    if not isinstance(together, list):
        raise ConfigError(file, "together", together, "a list of lists of gate names")
    groups = tuple(names(f"together[{i}]", g) for i, g in enumerate(together))
    isolated = names("isolated", data.get("isolated", []))
    for i, g in enumerate(groups):
        if set(g) & set(isolated) and not set(g) <= set(isolated):
            raise ConfigError(file, f"together[{i}]", list(g), "partly isolated: a group runs in one worker, "
                              "so isolate all of it or none")
    split = names("split", data.get("split", []))
    for s in split:
        if any(s in g for g in groups) or s in isolated:
            raise ConfigError(file, "split", list(split), f"{s} is in a together group or isolated: not splittable")
    def table(key: str) -> dict[str, float]:
        raw = data.get(key, {})
        if not isinstance(raw, dict):
            raise ConfigError(file, key, raw, "a mapping name: seconds")
        return {str(k): positive(f"{key}.{k}", v) for k, v in raw.items()}

    parts = data.get("isolated_parts", False)
    if not isinstance(parts, bool):
        raise ConfigError(file, "isolated_parts", parts, "true or false")
    return ShardSettings(names("first", data.get("first")), groups, positive("default_seconds",
                         data.get("default_seconds")), isolated, split, MappingProxyType(table("seconds")),
                         parts, positive("default_workload_seconds", data.get("default_workload_seconds", 1.0)),
                         MappingProxyType(table("workload_seconds")))


def deal(items: Sequence[tuple[str, float]], n: int) -> list[list[str]]:
    """`items` (name, cost) in n bins, longest first onto the lightest bin (ties: the lower bin); each bin keeps the
    items' given order. The same input gives the same bins in every process."""
    bins: list[list[str]] = [[] for _ in range(n)]
    load = [0.0] * n
    for name, cost in sorted(items, key=lambda x: -x[1]):
        k = min(range(n), key=lambda i: (load[i], i))
        bins[k].append(name)
        load[k] += cost
    order = {name: i for i, (name, _) in enumerate(items)}
    return [sorted(b, key=order.__getitem__) for b in bins]


def part_name(gate: str, i: int, n: int) -> str:
    return f"{gate}{PART_SEP}{i}/{n}"


def gate_of(token: str) -> str:
    """'sanitizer-all@1/2' -> 'sanitizer-all'; a plain gate name is itself."""
    return token.split(PART_SEP, 1)[0]


def parts_env(tokens: Sequence[str]) -> str:
    """The PARTS_ENV value for a worker running `tokens`: 'sanitizer-all=1/2' ('' when it runs no part)."""
    return ",".join(f"{gate_of(t)}={t.split(PART_SEP, 1)[1]}" for t in tokens if PART_SEP in t)


def part_for(gate: str, environ: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """(i, n) when this worker runs part i of n of `gate` (PARTS_ENV), else None (the whole gate)."""
    value = (os.environ if environ is None else environ).get(PARTS_ENV, "")
    for entry in filter(None, (e.strip() for e in value.split(","))):
        name, _, share = entry.partition("=")
        if name == gate:
            i, n = (int(x) for x in share.split("/"))
            if not 1 <= i <= n:
                raise ValueError(f"{PARTS_ENV}={value!r}: part {i} of {n}")
            return i, n
    return None


def plan(gates: Sequence[str], gpus: Sequence[int], settings: ShardSettings, seconds: Mapping[str, float],
         split: bool = False) -> dict[int, list[str]]:
    """Which gates each GPU's worker runs (in the order of `gates`): the `together` groups, then single gates,
    longest first, each on the GPU with the least work so far. `first` gates are not placed (the parent runs
    them). `split`: each `split` gate becomes one part per GPU (names from part_name)."""
    todo = [g for g in gates if g not in settings.first]
    units: list[list[str]] = [[g for g in group if g in todo] for group in settings.together]
    grouped = {g for u in units for g in u}
    units = [u for u in units if u] + [[g] for g in todo if g not in grouped]
    cost: dict[str, float] = {g: settings.weight(g, seconds) for g in todo}
    if split and len(gpus) > 1:
        n = len(gpus)
        parted = [u for u in units if u[0] in settings.split]
        units = [u for u in units if u not in parted]
        for (g,) in parted:
            units += [[part_name(g, i, n)] for i in range(1, n + 1)]
            cost.update({part_name(g, i, n): cost[g] / n for i in range(1, n + 1)})
    load = dict.fromkeys(gpus, 0.0)
    placed: dict[int, list[str]] = {i: [] for i in gpus}

    def weight(unit: list[str]) -> float:
        return sum(cost[g] for g in unit)

    for unit in sorted(units, key=weight, reverse=True):
        # a worker runs a gate once: two parts of one gate never share a GPU (there is one part per GPU)
        free = [i for i in gpus if not any(gate_of(t) == gate_of(unit[0]) for t in placed[i])] or list(gpus)
        target = min(free, key=lambda i: (load[i], gpus.index(i)))
        placed[target] += unit
        load[target] += weight(unit)
    order = {g: n for n, g in enumerate(gates)}
    return {i: sorted(gs, key=lambda t: (order[gate_of(t)], t)) for i, gs in placed.items() if gs}


Holds = Callable[[str, int, int], bool]  # (gate, part i, of n): does that part of the gate hold any work


def stages(gates: Sequence[str], gpus: Sequence[int], settings: ShardSettings, seconds: Mapping[str, float],
           holds: Holds | None = None) -> list[dict[int, list[str]]]:
    """The placement in stages: with several GPUs, first the isolated gates while nothing else runs (with
    `isolated_parts`, part i of n of each on the i-th GPU, all at once, leaving out the parts `holds` says are
    empty; else whole on the first GPU), then the rest over every GPU; with one GPU (one worker: its gates run one
    at a time anyway), one stage."""
    alone = [g for g in gates if g in settings.isolated and g not in settings.first]
    if len(gpus) < 2 or not alone:
        return [plan(gates, gpus, settings, seconds, split=True)]
    rest = [g for g in gates if g not in alone]
    spread = plan(rest, gpus, settings, seconds, split=True)
    if settings.isolated_parts:
        n = len(gpus)
        has = holds or (lambda g, i, k: True)
        # a gate with nothing in any part still runs as part 1 (and says so): a gate never vanishes from a run
        runs = {g: [i for i in range(1, n + 1) if has(g, i, n)] or [1] for g in alone}
        first = {gpu: [part_name(g, i, n) for g in alone if i in runs[g]] for i, gpu in enumerate(gpus, 1)}
        first = {gpu: ts for gpu, ts in first.items() if ts}
    else:
        first = {gpus[0]: alone}
    return [first, spread] if spread else [first]


def stage_names(stages_: Sequence[Mapping[int, Sequence[str]]], settings: ShardSettings) -> list[str]:
    """What each stage is, for the progress lines and the critical path: the isolated stage says how it ran."""
    isolated = set(settings.isolated)

    def name(n: int, stage: Mapping[int, Sequence[str]]) -> str:
        if len(stages_) > 1 and n == 1 and {gate_of(t) for ts in stage.values() for t in ts} <= isolated:
            return (f"isolated in {len(stage)} parts at once" if any(PART_SEP in t for ts in stage.values() for t in ts)
                    else "isolated, alone on the host")
        return f"stage {n}/{len(stages_)}"

    return [name(n, st) for n, st in enumerate(stages_, 1)]


@dataclass(frozen=True)
class Leg:
    """One stretch of the critical path: who ran what, for how long."""

    stage: str
    worker: str
    gates: tuple[str, ...]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "worker": self.worker, "gates": list(self.gates),
                "seconds": round(self.seconds, 1)}


def critical_path(first: Sequence[str], first_s: float, walls: Sequence[Mapping[int, tuple[Sequence[str], float]]],
                  label: Callable[[int], str] = lambda g: f"GPU {g}",
                  names: Sequence[str] | None = None) -> dict[str, Any]:
    """The run's critical path: the `first` gates, then in each stage its slowest worker (walls: per stage, GPU ->
    (its gates, its wall seconds); names: what each stage is, stage_names). The sum is what a faster run must
    shorten."""
    legs = [Leg("first", "parent", tuple(first), first_s)] if first else []
    for n, stage in enumerate(walls, 1):
        if stage:
            gpu, (gs, wall) = max(stage.items(), key=lambda x: x[1][1])
            legs.append(Leg(names[n - 1] if names else f"stage {n}/{len(walls)}", label(gpu), tuple(gs), wall))
    total = sum(leg.seconds for leg in legs)
    text = " -> ".join(f"{'' if leg.stage == 'first' else leg.stage + ': '}{leg.worker} {leg.seconds:.0f} s "
                       f"({', '.join(leg.gates[:4])}{f' +{len(leg.gates) - 4}' if len(leg.gates) > 4 else ''})"
                       for leg in legs)
    return {"seconds": round(total, 1), "legs": [leg.to_dict() for leg in legs], "text": f"{total:.0f} s: {text}"}
