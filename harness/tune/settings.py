"""gates/tune.yaml, parsed with the gate files' strictness (harness.config): the search space, the shapes tuned,
the adoption margin and the table's path."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashcore.points import HEAD_DIMS, Point
from flashcore.tuning import SCHEDULES
from harness.bench.settings import expand
from harness.schema import Config, ConfigError, Workload, read_yaml

TUNE_FILE = "tune.yaml"


POINT_KEYS = ("block_n", "stages", "consumer_wgs", "pingpong", "rescale_early", "producer_regs")


@dataclass(frozen=True)
class Space:
    block_n: str | tuple[int, ...]  # "compiled" or explicit values (each still checked against the library)
    schedule: tuple[str, ...]
    l2_section_pct: tuple[int, ...]
    # Compile-time points per head dim: the product of each key's values (flashcore/points.py), built by make tune.
    points: dict[int, tuple[Point, ...]] = field(default_factory=dict)
    # split-KV targets in CTAs per SM tried on decode buckets, each against the rule of kernel/heuristics.h (the
    # default); the launch turns one into its shape's split count (flashcore/tuning.py splits_for_target)
    decode_split_ctas_per_sm: tuple[float, ...] = ()


@dataclass(frozen=True)
class TuneSettings:
    file: Path
    space: Space
    workloads: tuple[Workload, ...]
    adopt_min_speedup: float
    table: str


def load_tune_settings(config: Config, file: Path | None = None) -> TuneSettings:
    file = file or config.gates_dir / TUNE_FILE
    data = read_yaml(file, ("space", "workloads", "adopt_min_speedup", "table"))
    space = _space(file, data.get("space"))
    names = data.get("workloads")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(file, "workloads", names, "a non-empty list of workload or set names")
    workloads = expand(file, "workloads", tuple(names), config)
    adopt = data.get("adopt_min_speedup")
    if isinstance(adopt, bool) or not isinstance(adopt, int | float) or adopt < 1.0:
        raise ConfigError(file, "adopt_min_speedup", adopt, "a number >= 1.0")
    table = data.get("table")
    if not isinstance(table, str) or not table.endswith((".yaml", ".yml")):
        raise ConfigError(file, "table", table, "a repository-relative .yaml path")
    return TuneSettings(file, space, workloads, float(adopt), table)


def _space(file: Path, raw: Any) -> Space:
    keys = {"block_n", "schedule", "l2_section_pct", "points", "decode_split_ctas_per_sm"}
    if not isinstance(raw, dict) or set(raw) != keys:
        raise ConfigError(file, "space", raw, f"a mapping with {', '.join(sorted(keys))}")
    block_n = raw["block_n"]
    if block_n != "compiled" and not (isinstance(block_n, list) and block_n
                                      and all(isinstance(b, int) and not isinstance(b, bool) and b > 0
                                              for b in block_n)):
        raise ConfigError(file, "space.block_n", block_n, "'compiled' or a list of ints > 0")
    schedule = raw["schedule"]
    if not isinstance(schedule, list) or not schedule or any(s not in SCHEDULES or s == "default" for s in schedule):
        raise ConfigError(file, "space.schedule", schedule, "a list of static / dynamic")
    pct = raw["l2_section_pct"]
    if not isinstance(pct, list) or not pct or any(isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= 100
                                                   for x in pct):
        raise ConfigError(file, "space.l2_section_pct", pct, "a list of ints in 1..100")
    targets = raw["decode_split_ctas_per_sm"]
    if not isinstance(targets, list) or any(isinstance(x, bool) or not isinstance(x, int | float)
                                            or not 0 < x < float("inf") for x in targets):
        raise ConfigError(file, "space.decode_split_ctas_per_sm", targets, "a list of numbers > 0 ([]: none)")
    return Space(block_n if block_n == "compiled" else tuple(block_n), tuple(schedule), tuple(pct),
                 _points(file, raw["points"]), tuple(float(x) for x in targets))


def _points(file: Path, raw: Any) -> dict[int, tuple[Point, ...]]:
    """space.points: {head_dim: {key: [values]}} -> every combination, in file order (validity is judged later, so
    a rejected point is reported with its rule rather than dropped here)."""
    if not isinstance(raw, dict):
        raise ConfigError(file, "space.points", raw, f"a mapping of head dim ({HEAD_DIMS}) to {{key: [values]}}")
    out: dict[int, tuple[Point, ...]] = {}
    for hd, axes in raw.items():
        where = f"space.points.{hd}"
        if hd not in HEAD_DIMS or isinstance(hd, bool):
            raise ConfigError(file, where, hd, f"a head dim the kernel has: {HEAD_DIMS}")
        if not isinstance(axes, dict) or set(axes) != set(POINT_KEYS):
            raise ConfigError(file, where, axes, f"a mapping with exactly {', '.join(POINT_KEYS)}")
        values = []
        for key in POINT_KEYS:
            vals = axes[key]
            want = bool if key in ("pingpong", "rescale_early") else int
            if not isinstance(vals, list) or not vals or any(
                    not isinstance(v, want) or (want is int and isinstance(v, bool)) for v in vals):
                raise ConfigError(file, f"{where}.{key}", vals, f"a non-empty list of {want.__name__}s")
            values.append(vals)
        out[hd] = tuple(Point(*combo) for combo in itertools.product(*values))
    return out
