"""Where each gate of a sharded run runs, which worker and which stage (gates/shard.yaml); pure, no I/O but the YAML.

Weights: each gate's wall time in the newest run of the history, else the estimate shipped in gates/shard.yaml
`seconds` (so a first run on a new host is balanced too), else `default_seconds`. Units (a `together` group, or one
gate) are placed longest first, each on the worker with the least work so far (LPT). A `split` gate (sanitizer-all,
the longest) runs as one part per worker, each part a share of its workloads dealt the same way by estimated cost
(`deal`), so every worker computes the same shares. The parts' results are joined into one gate (harness/shard.py).

Workers: `workers_per_gpu` processes share each GPU where the gates measure only correctness (the sanitizers are
CPU-bound and leave a Hopper GPU mostly idle); a gate in `measures` (perf, ncu: another process's kernels on its
GPU would move its figures) never shares its GPU with another worker. Each worker is a `Worker` (its GPU, which of
that GPU's workers it is); a one-worker run (one GPU, `workers_per_gpu: 1`) is one stage, its gates one at a time.

Stages: first the `isolated` gates (the perf group), while no other gate runs on the host: a perf measurement then
never shares its GPU, or the host's CPUs, PCIe or power budget, with another worker's sanitizer or ncu runs, so a
sharded run judges its paired ratios as stably as a lone one. With several GPUs and `isolated_parts` the group runs
as one part per GPU at the same time, each part every isolated gate on a share of the group's workloads
(harness/shard_perf.py deals them by `workload_seconds`); otherwise whole in one worker on the first GPU. Then, on
one GPU, the other `measures` gates (ncu) in one worker, alone on the host's GPU (the `host_only` gates, which use
no GPU, in a second worker beside it), and the rest over that GPU's `workers_per_gpu` workers; on several GPUs the
other `measures` gates are one worker alone on the first GPU (ncu needs its GPU, not the host: the other GPUs'
workers run beside it, as one worker per GPU always did) and the rest fill it and the other GPUs' `workers_per_gpu`
workers each, longest first. A `split` gate runs as one part per worker of its stage that shares its GPU (the
measuring worker has its share of the stage already), never two parts in one worker.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from harness.schema import ConfigError, read_yaml

SHARD_FILE = "shard.yaml"
_KEYS = ("first", "together", "isolated", "isolated_parts", "split", "default_seconds", "seconds",
         "several_gpus_seconds", "default_workload_seconds", "workload_seconds", "workers_per_gpu", "measures",
         "host_only", "every_gpu")
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
    workers_per_gpu: int = 1  # workers sharing a GPU where no gate of theirs measures
    measures: tuple[str, ...] = ()  # gates that never share their GPU with another worker (the isolated ones too)
    host_only: tuple[str, ...] = ()  # gates that use no GPU: on one GPU they run beside the measuring worker
    every_gpu: tuple[str, ...] = ()  # gates whose worker sees the run's other GPUs too, after its own
    # a run over several GPUs: these estimates over `seconds` (its gates share the host differently)
    several_gpus_seconds: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def weight(self, gate: str, history: Mapping[str, float]) -> float:
        return history.get(gate, self.seconds.get(gate, self.default_seconds))

    def on_gpus(self, n: int) -> ShardSettings:
        """These settings for a run over `n` GPUs: with several, `several_gpus_seconds` wins over `seconds`."""
        if n < 2 or not self.several_gpus_seconds:
            return self
        return replace(self, seconds=MappingProxyType({**self.seconds, **self.several_gpus_seconds}))

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

    def whole_groups(listed: Collection[str], why: str) -> None:
        """A together group runs in one worker: all of it in `listed` or none."""
        for i, g in enumerate(groups):
            if set(g) & set(listed) and not set(g) <= set(listed):
                raise ConfigError(file, f"together[{i}]", list(g), why)

    isolated = names("isolated", data.get("isolated", []))
    whole_groups(isolated, "partly isolated: a group runs in one worker, so isolate all of it or none")
    measures = names("measures", data.get("measures", list(isolated)))
    if lost := [g for g in isolated if g not in measures]:
        raise ConfigError(file, "measures", list(measures), f"{', '.join(lost)} isolated but not listed: an isolated "
                          "gate measures, list it")
    whole_groups(measures, "partly in measures: a group runs in one worker, which shares its GPU or not, so list "
                 "all of it in measures or none")
    split = names("split", data.get("split", []))
    for s in split:
        if any(s in g for g in groups) or s in measures:
            raise ConfigError(file, "split", list(split), f"{s} is in a together group or measures: not splittable")
    per_gpu = data.get("workers_per_gpu", 1)
    if isinstance(per_gpu, bool) or not isinstance(per_gpu, int) or per_gpu < 1:
        raise ConfigError(file, "workers_per_gpu", per_gpu, "a whole number >= 1")
    def table(key: str) -> dict[str, float]:
        raw = data.get(key, {})
        if not isinstance(raw, dict):
            raise ConfigError(file, key, raw, "a mapping name: seconds")
        return {str(k): positive(f"{key}.{k}", v) for k, v in raw.items()}

    first = names("first", data.get("first"))
    host_only = names("host_only", data.get("host_only", []))
    for h in host_only:
        if h in measures or h in split or h in first:
            raise ConfigError(file, "host_only", list(host_only), f"{h} is also in first, measures or split: a "
                              "host-only gate runs beside the measuring worker, whole")
    whole_groups(host_only, "partly host_only: a group runs in one worker, so list all of it in host_only or none")
    every_gpu = names("every_gpu", data.get("every_gpu", []))
    if both := [g for g in every_gpu if g in measures]:
        raise ConfigError(file, "every_gpu", list(every_gpu), f"{', '.join(both)} also in measures: a measuring gate "
                          "has its GPU to itself, so it sees no other")
    parts = data.get("isolated_parts", False)
    if not isinstance(parts, bool):
        raise ConfigError(file, "isolated_parts", parts, "true or false")
    return ShardSettings(first, groups, positive("default_seconds",
                         data.get("default_seconds")), isolated, split, MappingProxyType(table("seconds")),
                         parts, positive("default_workload_seconds", data.get("default_workload_seconds", 1.0)),
                         MappingProxyType(table("workload_seconds")), per_gpu, measures, host_only, every_gpu,
                         MappingProxyType(table("several_gpus_seconds")))


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


K = TypeVar("K", bound=Hashable)


class Worker(NamedTuple):
    """One worker process of a stage: its GPU and which of that GPU's `of` workers in the stage it is."""

    gpu: int
    slot: int = 1
    of: int = 1

    @property
    def name(self) -> str:
        return f"GPU {self.gpu}" if self.of == 1 else f"GPU {self.gpu} worker {self.slot}/{self.of}"

    @property
    def dir(self) -> str:
        return f"gpu{self.gpu}" if self.of == 1 else f"gpu{self.gpu}-w{self.slot}"


def plan(gates: Sequence[str], gpus: Sequence[K], settings: ShardSettings, seconds: Mapping[str, float],
         split: bool = False, pinned: tuple[K, Collection[str]] | None = None,
         keep_off: Collection[str] = ()) -> dict[K, list[str]]:
    """Which gates each worker runs (in the order of `gates`; `gpus`: one entry per worker): the `together`
    groups, then single gates, longest first, each on the worker with the least work so far. `first` gates are not
    placed (the parent runs them). `split`: each `split` gate becomes one part per worker (names from part_name).
    `pinned` (worker, gates): the units holding those gates go to that worker before the rest is dealt, and the
    split gates' parts to the other workers when there are two or more (the pinned worker has its share already);
    no unit holding a `keep_off` gate goes to the pinned worker."""
    todo = [g for g in gates if g not in settings.first]
    units: list[list[str]] = [[g for g in group if g in todo] for group in settings.together]
    grouped = {g for u in units for g in u}
    units = [u for u in units if u] + [[g] for g in todo if g not in grouped]
    cost: dict[str, float] = {g: settings.weight(g, seconds) for g in todo}
    others = [i for i in gpus if pinned is None or i != pinned[0]]
    parts_on = others if len(others) > 1 else list(gpus)
    if split and len(parts_on) > 1:
        n = len(parts_on)
        parted = [u for u in units if u[0] in settings.split]
        units = [u for u in units if u not in parted]
        for (g,) in parted:
            units += [[part_name(g, i, n)] for i in range(1, n + 1)]
            cost.update({part_name(g, i, n): cost[g] / n for i in range(1, n + 1)})
    load = dict.fromkeys(gpus, 0.0)
    placed: dict[K, list[str]] = {i: [] for i in gpus}

    def weight(unit: list[str]) -> float:
        return sum(cost[g] for g in unit)

    if pinned is not None:
        target, names_ = pinned
        for unit in [u for u in units if set(u) & set(names_)]:
            units.remove(unit)
            placed[target] += unit
            load[target] += weight(unit)
    # the split gates' parts first: they can go only to `parts_on`, one per worker, so dealt after the free units
    # they land on whatever those left and cannot even it out. At b4f1a27 (two H200s) the free units went first and
    # the lone worker beside the parts' workers was planned 34 s against 55-73 s on the others
    for unit in sorted(units, key=lambda u: (PART_SEP in u[0], weight(u)), reverse=True):
        # a worker runs a gate once: two parts of one gate never share a worker (there is one part per worker)
        bins = parts_on if PART_SEP in unit[0] else gpus
        if pinned is not None and set(unit) & set(keep_off) and len(bins) > 1:
            bins = [i for i in bins if i != pinned[0]]
        free = [i for i in bins if not any(gate_of(t) == gate_of(unit[0]) for t in placed[i])] or list(bins)
        target = min(free, key=lambda i: (load[i], gpus.index(i)))
        placed[target] += unit
        load[target] += weight(unit)
    order = {g: n for n, g in enumerate(gates)}
    return {i: sorted(gs, key=lambda t: (order[gate_of(t)], t)) for i, gs in placed.items() if gs}


Holds = Callable[[str, int, int], bool]  # (gate, part i, of n): does that part of the gate hold any work
Stage = dict[Worker, list[str]]  # each worker of a stage and its gates (part names for a gate's parts)


def isolated_stage(alone: Sequence[str], gpus: Sequence[int], settings: ShardSettings, holds: Holds | None) -> Stage:
    """The isolated gates, nothing else on the host meanwhile: with several GPUs and `isolated_parts`, part i of n of
    each on the i-th GPU, all at once, leaving out the parts `holds` says are empty; else whole on the first GPU."""
    if len(gpus) < 2 or not settings.isolated_parts:
        return {Worker(gpus[0]): list(alone)}
    n = len(gpus)
    has = holds or (lambda g, i, k: True)
    # a gate with nothing in any part still runs as part 1 (and says so): a gate never vanishes from a run
    runs = {g: [i for i in range(1, n + 1) if has(g, i, n)] or [1] for g in alone}
    first = {Worker(gpu): [part_name(g, i, n) for g in alone if i in runs[g]] for i, gpu in enumerate(gpus, 1)}
    return {w: ts for w, ts in first.items() if ts}


def stages(gates: Sequence[str], gpus: Sequence[int], settings: ShardSettings, seconds: Mapping[str, float],
           holds: Holds | None = None) -> list[Stage]:
    """The placement in stages (module docstring): the isolated gates alone on the host; on one GPU the other
    measuring gates alone on it, then the rest over its workers; on several GPUs the other measuring gates in one
    worker alone on the first GPU, beside the rest over every GPU's workers. One worker in all: one stage."""
    settings = settings.on_gpus(len(gpus))
    per = settings.workers_per_gpu
    if len(gpus) * per < 2:
        return [{Worker(g): ts for g, ts in plan(gates, gpus, settings, seconds).items()}]
    alone = [g for g in gates if g in settings.isolated and g not in settings.first]
    rest = [g for g in gates if g not in alone]
    measured = [g for g in rest if g in settings.measures]
    out = [isolated_stage(alone, gpus, settings, holds)] if alone else []
    if len(gpus) == 1:
        alone_on_gpu = {Worker(g): ts for g, ts in plan(measured, gpus, settings, seconds).items()}
        host = [g for g in rest if g in settings.host_only]
        if alone_on_gpu and host:  # beside the measuring worker: its figures move only with others' kernels
            beside = plan(host, [Worker(gpus[0], 2, 2)], settings, seconds)
            alone_on_gpu = {Worker(gpus[0], 1, 2): alone_on_gpu[Worker(gpus[0])], **beside}
            rest = [g for g in rest if g not in host]
        out.append(alone_on_gpu)
        rest = [g for g in rest if g not in measured]
        out.append(plan(rest, [Worker(gpus[0], s, per) for s in range(1, per + 1)], settings, seconds, split=True))
    else:
        lone = gpus[0] if measured else None
        lanes = [Worker(g, s, 1 if g == lone else per) for g in gpus for s in range(1, (1 if g == lone else per) + 1)]
        # the every_gpu gates after the measuring gates in their worker: the other GPUs they see hold no measurement
        # (a worker beside ncu's on its GPU would see ncu's GPU)
        pin = measured + ([g for g in rest if g in settings.every_gpu] if measured else [])
        # the host-only gates (cuobjdump's disassembly: CPU and disk) never in the measuring worker: at f2ceae6 the
        # dealer gave it the structure gates (31 s) after ncu gates that took 86 s beside the other GPU's workers
        # against 25 s alone, and that worker was the run's critical path (197 s)
        out.append(plan(rest, lanes, settings, seconds, split=True, pinned=(lanes[0], pin),
                        keep_off=settings.host_only if measured else ()))
    return [st for st in out if st]


def stage_kind(n: int, stage: Mapping[Worker, Sequence[str]], count: int, settings: ShardSettings) -> str:
    """'isolated' (the perf group, alone on the host), 'measures' (alone on its one GPU, host-only gates at most
    beside it) or 'shared'."""
    gates = {gate_of(t) for ts in stage.values() for t in ts}
    if count > 1 and n == 1 and gates <= set(settings.isolated):
        return "isolated"
    measuring = [w for w, ts in stage.items() if {gate_of(t) for t in ts} <= set(settings.measures)]
    host = [w for w, ts in stage.items() if {gate_of(t) for t in ts} <= set(settings.host_only)]
    alone = len(measuring) == 1 and len(measuring) + len(host) == len(stage) and len({w.gpu for w in stage}) == 1
    return "measures" if count > 1 and alone else "shared"


def stage_names(stages_: Sequence[Mapping[Worker, Sequence[str]]], settings: ShardSettings) -> list[str]:
    """What each stage is, for the progress lines and the critical path: the isolated stage says how it ran, a
    stage of shared GPUs how many workers shared each."""
    def name(n: int, stage: Mapping[Worker, Sequence[str]]) -> str:
        kind = stage_kind(n, stage, len(stages_), settings)
        if kind == "isolated":
            return (f"isolated in {len(stage)} parts at once" if any(PART_SEP in t for ts in stage.values() for t in ts)
                    else "isolated, alone on the host")
        if kind == "measures":
            return "measuring, alone on the GPU" + (", host-only gates beside it" if len(stage) > 1 else "")
        per = max(w.of for w in stage)
        return f"stage {n}/{len(stages_)}" + (f", {per} workers per GPU" if per > 1 else "")

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


def worker_name(key: object) -> str:
    """A stage's key as the report names it: a Worker by its name, a bare GPU index as 'GPU i'."""
    return key.name if isinstance(key, Worker) else f"GPU {key}"


def critical_path(first: Sequence[str], first_s: float, walls: Sequence[Mapping[Any, tuple[Sequence[str], float]]],
                  label: Callable[[Any], str] = worker_name, names: Sequence[str] | None = None) -> dict[str, Any]:
    """The run's critical path: the `first` gates, then in each stage its slowest worker (walls: per stage, worker
    -> (its gates, its wall seconds); names: what each stage is, stage_names). The sum is what a faster run must
    shorten."""
    legs = [Leg("first", "parent", tuple(first), first_s)] if first else []
    for n, stage in enumerate(walls, 1):
        if stage:
            worker, (gs, wall) = max(stage.items(), key=lambda x: x[1][1])
            legs.append(Leg(names[n - 1] if names else f"stage {n}/{len(walls)}", label(worker), tuple(gs), wall))
    total = sum(leg.seconds for leg in legs)
    text = " -> ".join(f"{'' if leg.stage == 'first' else leg.stage + ': '}{leg.worker} {leg.seconds:.0f} s "
                       f"({', '.join(leg.gates[:4])}{f' +{len(leg.gates) - 4}' if len(leg.gates) > 4 else ''})"
                       for leg in legs)
    return {"seconds": round(total, 1), "legs": [leg.to_dict() for leg in legs], "text": f"{total:.0f} s: {text}"}
