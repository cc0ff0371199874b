"""The isolated perf group of a run over several GPUs as one part per GPU: which workloads each part times.

gates/shard.yaml `isolated_parts`: the group's gates (perf-fa2 ... perf-serving, scaling) run on every GPU at the same
time, each worker running every gate of the group on its part of the group's workloads, while no other gate runs on
the host (harness/shard_plan.py stages). The unit dealt is a pairing group (gates/bench.yaml: one workload, or the
scaling sweep's points of one causal mode, timed in the same rounds), over the union of what the group's gates time,
so a workload is in the same part for every gate: perf-cudnn, perf-fa3 and scaling then find perf-fa2's pairs in
their worker's Measurer, as in a run on one GPU. Units are dealt longest first onto the lightest part, weighed by
gates/shard.yaml `workload_seconds` (measured: `python -m harness.shard_costs --workloads`); every worker computes
the same parts from the YAML alone. A gate's parts are joined into one result whose verdict is drawn over every
part's measurements (harness/shard_join.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from harness.bench.settings import BENCH_FILE, BenchSettings, load_bench_settings
from harness.shard_plan import SHARD_FILE, deal, load_shard_settings, part_for

if TYPE_CHECKING:
    from harness.gates.base import GateContext
    from harness.schema import Config, GateSpec, Workload


class Measures(Protocol):
    def measured(self, config: Config, settings: BenchSettings) -> list[Workload]: ...


def bench_settings(config: Config) -> BenchSettings:
    return config.once(BENCH_FILE, lambda _: load_bench_settings(config))


def group_specs(config: Config) -> list[GateSpec]:
    """The isolated gates of the configuration whose params say what they time."""
    isolated = set(config.once(SHARD_FILE, load_shard_settings).isolated)
    return [g for p in config.phases for g in p.gates
            if g.name in isolated and callable(getattr(g.params, "measured", None))]


def group_workloads(config: Config) -> list[Workload]:
    """Every workload some gate of the group times, once, in gate then workload order."""
    settings = bench_settings(config)
    out: dict[str, Workload] = {}
    for spec in group_specs(config):
        out.update({w.name: w for w in spec.params.measured(config, settings) if w.name not in out})
    return list(out.values())


def assignment(config: Config, parts: int) -> dict[str, int]:
    """Workload name -> its part (1..parts): the group's pairing groups dealt by their workloads' seconds."""
    shard = config.once(SHARD_FILE, load_shard_settings)
    groups = bench_settings(config).pairing_groups(group_workloads(config))
    weights = [(str(k), sum(shard.workload_weight(w.name) for w in g)) for k, g in enumerate(groups)]
    return {w.name: i for i, units in enumerate(deal(weights, parts), 1) for k in units for w in groups[int(k)]}


def part_of(ctx: GateContext) -> tuple[int, int] | None:
    """(i, n) when this worker runs part i of n of the gate, else None (ValueError for a malformed entry)."""
    return part_for(ctx.spec.name)


def mine(config: Config, part: tuple[int, int] | None, workloads: Iterable[Workload]) -> list[Workload]:
    """The workloads of `part` (all without one). A workload outside the group (none should be) is part 1's, so it
    is still timed exactly once."""
    if part is None:
        return list(workloads)
    i, n = part
    where = assignment(config, n)
    return [w for w in workloads if where.get(w.name, 1) == i]


def holds(config: Config) -> Callable[[str, int, int], bool]:
    """Whether part i of n of a gate times anything (harness/shard_plan.py stages leaves out the empty parts). A
    gate of the group that does not say what it times runs in every part."""
    specs = {s.name: s for s in group_specs(config)}
    settings = bench_settings(config)

    def has(gate: str, i: int, n: int) -> bool:
        spec = specs.get(gate)
        return spec is None or bool(mine(config, (i, n), spec.params.measured(config, settings)))

    return has


def coverage(config: Config, parts: int) -> dict[str, list[Sequence[str]]]:
    """Per gate of the group, the workload names each part times (tests: every workload in exactly one part)."""
    settings = bench_settings(config)
    return {s.name: [[w.name for w in mine(config, (i, parts), s.params.measured(config, settings))]
                     for i in range(1, parts + 1)] for s in group_specs(config)}
