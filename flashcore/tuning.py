"""Tuned tile configurations: the table `make tune` writes (flashcore/tuned.yaml) and its lookup at call time.

A table belongs to one GPU model (name and SM count) and one kernel (fc_kernel_id(): a hash of the kernel
sources). Each entry maps a shape bucket (head dim, dtype, causal, prefill/decode, GQA ratio, key-length bucket) to
the tile configuration that measured fastest there, paired against the default. A decode entry's split-KV choice is
stored as CTAs per SM (split_ctas_per_sm), not as a split count: the launch turns it into the split count of its own
batch and heads (splits_for_target), so one entry holds for every shape of its bucket. A call whose table is missing or
stale, or whose bucket has no entry, runs the hand-tuned defaults and says so once per process (TuningWarning).

    FLASHCORE_TUNE_TABLE=path   read this table instead of the packaged one
    FLASHCORE_TUNE=0            never read a table (the defaults, silently)
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from flashcore.points import Point

SCHEDULES = {"default": 0, "static": 1, "dynamic": 2, "whole": 3}  # fc_schedule (kernel/flashcore.h)
TABLE_VERSION = 2  # 2: decode entries store split_ctas_per_sm; version 1 stored a split count per bucket
PACKAGED_TABLE = Path(__file__).resolve().parent / "tuned.yaml"
DECODE_MAX_Q = 16  # seqlen_q up to this is a decode call
MAX_SPLITS = 128  # kernel/heuristics.h kMaxSplits
MIN_BLOCKS_PER_SPLIT = 4  # kernel/heuristics.h kMinBlocksPerSplit: every split reloads Q and writes fp32 partials
SEQLEN_BUCKETS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)  # key lengths round up to one of these


class TuningWarning(UserWarning):
    """A call ran the default tile configuration because the tuned table could not give one."""


class TableError(ValueError):
    """A tuned table that does not parse: `source: key = value: why`."""

    def __init__(self, source: str, key: str, value: object, why: str) -> None:
        super().__init__(f"{source}: {key} = {value!r}: {why}")


@dataclass(frozen=True)
class TileConfig:
    """The kernel's tile knobs (fc_params in kernel/flashcore.h); zeros, "" and "default" are the defaults."""

    block_n: int = 0  # keys per K/V tile; 0: kernel/tile_choice.h's choice
    schedule: str = "default"  # tile order: default, static or dynamic (atomic tile counter)
    l2_section_pct: int = 0  # dynamic order: % of L2 for one section's K/V; 0: a third
    point: str = ""  # compile-time point (flashcore/points.py name, e.g. n128-s3-w2-pp1-re0-r32); "": the default
    num_splits: int = 0  # split-KV count (decode); 0: the rule of kernel/heuristics.h. A caller's num_splits wins
    # Split-KV as CTAs per SM (decode): the launch takes splits_for_target of its own shape; 0: the kernel's rule.
    # What a table stores, because a split count tuned on one batch makes twice the CTAs at twice the batch.
    split_ctas_per_sm: float = 0.0

    def problems(self, block_n_options: tuple[int, ...] | None = None, head_dim: int | None = None,
                 compiled: tuple[Point, ...] | None = None) -> list[str]:
        """The rules this configuration breaks (empty when valid). `block_n_options`: what the library compiled for
        the head dim (fc_block_n_options); `head_dim` checks the point's rules; `compiled` (fc_points) whether the
        library has it. None checks the types only."""
        out = []
        if not isinstance(self.point, str):
            out.append(f"point {self.point!r} must be a point name (flashcore/points.py) or \"\"")
        elif self.point:
            try:
                pt = Point.parse(self.point)
            except ValueError as e:
                out.append(str(e))
            else:
                if head_dim is not None:
                    out.extend(f"point {self.point}: {why}" for why in pt.problems(head_dim))
                if compiled is not None and pt not in compiled:
                    out.append(f"point {self.point} is not compiled for this head dim (make build compiles "
                               "kernel/tuned_points.inc)")
                if self.block_n and self.block_n != pt.block_n:
                    out.append(f"block_n {self.block_n} disagrees with point {self.point} (leave block_n 0)")
            return out + self._runtime_problems(None)
        return out + self._runtime_problems(block_n_options)

    def _runtime_problems(self, block_n_options: tuple[int, ...] | None) -> list[str]:
        out = []
        if isinstance(self.block_n, bool) or not isinstance(self.block_n, int) or self.block_n < 0:
            out.append(f"block_n {self.block_n!r} must be an int >= 0 (0: the default)")
        elif self.block_n and block_n_options is not None and self.block_n not in block_n_options:
            out.append(f"block_n {self.block_n} is not compiled for this head dim (compiled: {block_n_options})")
        elif self.block_n and (self.block_n % 16 or self.block_n > 256):
            out.append(f"block_n {self.block_n}: a wgmma N and a P V k-step need a multiple of 16 up to 256")
        if self.schedule not in SCHEDULES:
            out.append(f"schedule {self.schedule!r} must be one of {tuple(SCHEDULES)}")
        if isinstance(self.l2_section_pct, bool) or not isinstance(self.l2_section_pct, int) \
                or not 0 <= self.l2_section_pct <= 100:
            out.append(f"l2_section_pct {self.l2_section_pct!r} must be an int in 0..100 (0: the default)")
        elif self.l2_section_pct and self.schedule in ("static", "whole"):
            out.append("l2_section_pct applies to the dynamic order only (schedule static takes one head at a time)")
        if isinstance(self.num_splits, bool) or not isinstance(self.num_splits, int) \
                or not 0 <= self.num_splits <= MAX_SPLITS:
            out.append(f"num_splits {self.num_splits!r} must be an int in 0..{MAX_SPLITS} (0: the split rule)")
        target = self.split_ctas_per_sm
        if isinstance(target, bool) or not isinstance(target, int | float) or not 0 <= target < math.inf:
            out.append(f"split_ctas_per_sm {target!r} must be a number >= 0 (0: the split rule)")
        elif target and self.num_splits:
            out.append("num_splits and split_ctas_per_sm both choose the split count: set one")
        return out

    @property
    def is_default(self) -> bool:
        return self == TileConfig()

    def c_fields(self) -> dict[str, int]:
        """The fc_params tile fields of this configuration (num_splits goes with the call's own: flashcore/launch.py
        `params`)."""
        return {"block_n": self.block_n, "schedule": SCHEDULES[self.schedule], "l2_section_pct": self.l2_section_pct,
                "point": Point.parse(self.point).code if self.point else 0}

    @property
    def label(self) -> str:
        if self.is_default:
            return "default"
        parts = [self.point, f"bn{self.block_n}" if self.block_n else "",
                 self.schedule if self.schedule != "default" else "",
                 f"l2 {self.l2_section_pct}%" if self.l2_section_pct else "",
                 f"splits {self.num_splits}" if self.num_splits else "",
                 f"split {self.split_ctas_per_sm:g} CTA/SM" if self.split_ctas_per_sm else ""]
        return "/".join(p for p in parts if p)


DEFAULT = TileConfig()


@dataclass(frozen=True)
class ShapeKey:
    """The bucket a call falls in: what the tuner tunes per, and what the table is looked up by."""

    head_dim: int
    dtype: str  # bf16 | fp16
    causal: bool
    mode: str  # prefill | decode (seqlen_q <= DECODE_MAX_Q)
    group: int  # heads_q // heads_kv
    seqlen: int  # seqlen_k rounded up to SEQLEN_BUCKETS (the last bucket holds every longer one)

    @property
    def label(self) -> str:
        return (f"d{self.head_dim} {self.dtype} {'causal' if self.causal else 'full'} {self.mode} g{self.group} "
                f"k<={self.seqlen}")


def splits_for_target(ctas_per_sm: float, tiles: int, n_blocks: int, sms: int) -> int:
    """The split-KV count of a launch of `tiles` query tiles (batch x grid heads x query tiles) over `n_blocks` K/V
    blocks on `sms` SMs, for a target of `ctas_per_sm` CTAs per SM: the most splits whose CTAs (tiles x splits) stay
    within target x SMs, so the grid never spills a few CTAs into one more wave; then the fewest that give the same
    blocks per split. Never more than MAX_SPLITS nor than MIN_BLOCKS_PER_SPLIT blocks per split allow; 1 when the
    tiles alone reach the target. The 1e-9 absorbs the rounding of a target stored as CTAs / SMs."""
    if tiles < 1 or sms < 1 or ctas_per_sm <= 0:
        return 1
    splits = min(int(ctas_per_sm * sms / tiles + 1e-9), MAX_SPLITS, n_blocks // MIN_BLOCKS_PER_SPLIT)
    while splits > 1 and -(-n_blocks // (splits - 1)) == -(-n_blocks // splits):
        splits -= 1
    return max(splits, 1)


def seqlen_bucket(seqlen_k: int) -> int:
    return next((b for b in SEQLEN_BUCKETS if seqlen_k <= b), SEQLEN_BUCKETS[-1])


def shape_key(head_dim: int, dtype: str, causal: bool, heads_q: int, heads_kv: int, seqlen_q: int,
              seqlen_k: int) -> ShapeKey:
    return ShapeKey(head_dim, dtype, bool(causal), "decode" if seqlen_q <= DECODE_MAX_Q else "prefill",
                    heads_q // max(heads_kv, 1), seqlen_bucket(seqlen_k))


@dataclass
class Entry:
    key: ShapeKey
    config: TileConfig
    speedup: float | None = None  # default time / tuned time, paired, when tuned (1.0: the default won)


@dataclass
class Table:
    gpu: str
    sm_count: int
    kernel_id: str
    tuned_at: str = ""
    commit: str = ""
    entries: dict[ShapeKey, Entry] = field(default_factory=dict)
    # the kernel a table was measured on when harness/tune/rekey.py carried it over identical SASS: kept as written,
    # so a rewrite of the file by `make tune` on another GPU does not lose where this table's numbers came from
    rekeyed_from: dict[str, Any] | None = None

    def matches(self, gpu: str, sm_count: int) -> bool:
        return self.gpu == gpu and self.sm_count == sm_count


_KEY_TYPES: dict[str, type] = {"head_dim": int, "dtype": str, "causal": bool, "mode": str, "group": int, "seqlen": int}
assert list(_KEY_TYPES) == [f.name for f in fields(ShapeKey)]
_CONFIG_FIELDS = {f.name for f in fields(TileConfig)}
_TABLE_KEYS = {"gpu", "sm_count", "kernel_id", "tuned_at", "commit", "entries", "rekeyed_from"}  # harness/tune/rekey.py


def parse_tables(text: str, source: str = "table") -> list[Table]:
    """Every table of a tuned-table file; raises TableError naming the key that is wrong."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise TableError(source, "(file)", "", f"not YAML: {e}") from None
    if not isinstance(data, dict) or set(data) - {"version", "tables"}:
        raise TableError(source, "(file)", type(data).__name__, "expected a mapping with `version` and `tables`")
    if data.get("version") == 1:
        raise TableError(source, "version", 1, f"this FlashCore reads version {TABLE_VERSION}: a version-1 table "
                         "stores a split-KV count per decode bucket, which does not carry across batch sizes (version "
                         f"{TABLE_VERSION} stores CTAs per SM); re-run `make tune` on this GPU")
    if data.get("version") != TABLE_VERSION:
        raise TableError(source, "version", data.get("version"), f"this FlashCore reads version {TABLE_VERSION}")
    raw_tables = data.get("tables")
    if not isinstance(raw_tables, list):
        raise TableError(source, "tables", raw_tables, "expected a list of tables")
    return [_parse_table(t, source, f"tables[{i}]") for i, t in enumerate(raw_tables)]


def _parse_table(raw: Any, source: str, where: str) -> Table:
    if not isinstance(raw, dict):
        raise TableError(source, where, raw, "expected a mapping")
    if unknown := set(raw) - _TABLE_KEYS:
        raise TableError(source, f"{where}.{sorted(unknown)[0]}", raw[sorted(unknown)[0]], "unknown key")
    for k, typ in (("gpu", str), ("sm_count", int), ("kernel_id", str)):
        if not isinstance(raw.get(k), typ) or isinstance(raw.get(k), bool):
            raise TableError(source, f"{where}.{k}", raw.get(k), f"required, a {typ.__name__}")
    rekeyed = raw.get("rekeyed_from")
    if rekeyed is not None and not isinstance(rekeyed, dict):
        raise TableError(source, f"{where}.rekeyed_from", rekeyed, "a mapping (harness/tune/rekey.py writes it)")
    table = Table(raw["gpu"], raw["sm_count"], raw["kernel_id"], str(raw.get("tuned_at", "")),
                  str(raw.get("commit", "")), rekeyed_from=rekeyed)
    entries = raw.get("entries") or []
    if not isinstance(entries, list):
        raise TableError(source, f"{where}.entries", entries, "expected a list")
    for j, e in enumerate(entries):
        entry = _parse_entry(e, source, f"{where}.entries[{j}]")
        if entry.key in table.entries:
            raise TableError(source, f"{where}.entries[{j}]", entry.key.label, "a second entry for this bucket")
        table.entries[entry.key] = entry
    return table


def _parse_entry(raw: Any, source: str, where: str) -> Entry:
    if not isinstance(raw, dict):
        raise TableError(source, where, raw, "expected a mapping")
    allowed = set(_KEY_TYPES) | _CONFIG_FIELDS | {"speedup"}
    if unknown := set(raw) - allowed:
        name = sorted(unknown)[0]
        raise TableError(source, f"{where}.{name}", raw[name], "unknown key")
    key_args: dict[str, Any] = {}
    for name, want in _KEY_TYPES.items():
        value = raw.get(name)
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise TableError(source, f"{where}.{name}", value, f"required, a {want.__name__}")
        key_args[name] = value
    key = ShapeKey(**key_args)
    if key.mode not in ("prefill", "decode") or key.dtype not in ("bf16", "fp16") or key.seqlen not in SEQLEN_BUCKETS:
        raise TableError(source, where, key.label, f"mode prefill|decode, dtype bf16|fp16, seqlen in {SEQLEN_BUCKETS}")
    if raw.get("num_splits"):
        raise TableError(source, f"{where}.num_splits", raw["num_splits"], "a table stores split_ctas_per_sm, not a "
                         "split count (one count does not carry across batch sizes); re-run `make tune`")
    if raw.get("split_ctas_per_sm") and key.mode != "decode":
        raise TableError(source, f"{where}.split_ctas_per_sm", raw["split_ctas_per_sm"], "decode buckets only")
    config = TileConfig(**{k: raw[k] for k in _CONFIG_FIELDS if k in raw})
    if bad := config.problems(head_dim=key.head_dim):
        raise TableError(source, where, config.label, "; ".join(bad))
    speedup = raw.get("speedup")
    if speedup is not None and (isinstance(speedup, bool) or not isinstance(speedup, int | float) or speedup <= 0):
        raise TableError(source, f"{where}.speedup", speedup, "a number > 0")
    return Entry(key, config, None if speedup is None else float(speedup))


def dump_tables(tables: list[Table]) -> str:
    import yaml

    out = []
    for t in tables:
        entries = []
        for e in sorted(t.entries.values(), key=lambda e: tuple(asdict(e.key).values())):
            # no point, no split target: the defaults, not written
            config = {k: v for k, v in asdict(e.config).items()
                      if k not in ("point", "num_splits", "split_ctas_per_sm") or v}
            row: dict[str, Any] = {**asdict(e.key), **config}
            if e.speedup is not None:
                row["speedup"] = round(e.speedup, 4)
            entries.append(row)
        table: dict[str, Any] = {"gpu": t.gpu, "sm_count": t.sm_count, "kernel_id": t.kernel_id}
        if t.rekeyed_from is not None:
            table["rekeyed_from"] = t.rekeyed_from
        out.append({**table, "tuned_at": t.tuned_at, "commit": t.commit, "entries": entries})
    header = "# Written by `make tune` (harness/tune); read by flashcore.attention (flashcore/tuning.py).\n"
    return header + yaml.safe_dump({"version": TABLE_VERSION, "tables": out}, sort_keys=False, width=120)


# ---- lookup at call time ------------------------------------------------------------------------------------------

_warned: set[str] = set()


def warn_once(kind: str, message: str) -> None:
    if kind not in _warned:
        _warned.add(kind)
        warnings.warn(message + " (said once per process)", TuningWarning, stacklevel=4)


def table_path() -> Path:
    return Path(os.environ.get("FLASHCORE_TUNE_TABLE") or PACKAGED_TABLE)


@lru_cache(maxsize=4)
def _load(path: str) -> tuple[list[Table], str]:
    """(tables, why none) for a file; a broken file is reported, never fatal to a call."""
    p = Path(path)
    if not p.is_file():
        return [], f"no tuned table at {p} (run `make tune` on this GPU)"
    try:
        return parse_tables(p.read_text(), str(p)), ""
    except TableError as e:
        return [], f"the tuned table does not parse: {e}"


def config_for(key: ShapeKey, gpu: str, sm_count: int, kernel_id: str) -> TileConfig:
    """The tuned configuration for this bucket on this GPU and kernel, else DEFAULT (with a one-time warning)."""
    if os.environ.get("FLASHCORE_TUNE", "1") == "0":
        return DEFAULT
    tables, why = _load(str(table_path()))
    if not tables:
        warn_once("no-table", f"FlashCore runs its default tile configuration: {why}")
        return DEFAULT
    table = next((t for t in tables if t.matches(gpu, sm_count)), None)
    if table is None:
        warn_once("no-gpu", f"FlashCore runs its default tile configuration: the tuned table has no entry for "
                             f"{gpu} with {sm_count} SMs (run `make tune` on it)")
        return DEFAULT
    if table.kernel_id != kernel_id:
        warn_once("stale", f"FlashCore runs its default tile configuration: the tuned table for {gpu} was measured "
                            f"on kernel {table.kernel_id}, this library is kernel {kernel_id} (re-run `make tune`)")
        return DEFAULT
    entry = table.entries.get(key)
    if entry is None:
        warn_once("no-entry", f"FlashCore runs its default tile configuration for {key.label}: no tuned entry for "
                               "that bucket (further buckets without one are not reported)")
        return DEFAULT
    return entry.config
