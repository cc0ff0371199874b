"""The schema of the gate files: the config types (Workload, GateSpec, PhaseSpec, Config), `param()` for a gate's
Params dataclass, strict dataclass parsing and a strict YAML reader, and `ConfigError`, whose message names the file,
the key path (`workloads.s17-causal.head_dim`), the value and what is allowed. No gate is imported here: gate modules
import this module, and the loader (harness/config.py) imports both.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from flashcore import head_dims
from harness.ranges import bound_problem, range_of

HEAD_DIMS = head_dims.KERNEL_HEAD_DIMS  # head dims the kernel is built for (kernel/hopper_config.h HeadDimTraits)
WORKLOAD_HEAD_DIMS = head_dims.SUPPORTED  # FC_HEAD_DIM_TABLE: those not in HEAD_DIMS run padded
DTYPES = ("bf16", "fp16", "e4m3")  # e4m3: FP8 inputs with descales, bf16 out (flashcore.attention_fp8)
FP8_HEAD_DIMS = head_dims.FP8  # the head dims flashcore.attention_fp8 runs (FC_HEAD_DIM_TABLE's fp8 column)
# How a workload's batch is laid out (flashcore.serving): dense [B, S, H, D]; varlen: packed sequences of
# seqlens_q / seqlens_k tokens (flash_attn_varlen_func); kvcache: a cache of seqlen_k slots per sequence holding
# seqlens_k keys each (flash_attn_with_kvcache); paged: that cache in pages of page_size keys behind a page table.
LAYOUTS = ("dense", "varlen", "kvcache", "paged")
KINDS = ("compute-bound", "memory-bound", "edge", "long-context")
# Kinds the implicit set `all` leaves out: a long-context workload's fp32 reference and sanitizer runs take minutes
# each, so gates name them (a set) where they want them.
NOT_IN_ALL = ("long-context",)
PHASES = range(1, 8)  # the roadmap's phases 1..7
ALL_SET = "all"  # implicit set: every workload but the NOT_IN_ALL kinds, in file order
WORKLOADS_FILE = "workloads.yaml"
PHASES_FILE = "phases.yaml"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_MISSING: Any = object()
T = TypeVar("T")


class ConfigError(Exception):
    """A bad gate file: `file: key = value: why`."""

    def __init__(self, file: Path | str, key: str, value: object, why: str) -> None:
        self.file, self.key, self.value, self.why = str(file), key, value, why
        shown = "(missing)" if value is _MISSING else repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{file}: {key} = {shown}: {why}")


def param(
    *,
    default: Any = _MISSING,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    choices: tuple[Any, ...] | None = None,
    check: Callable[[Any], str | None] | None = None,
    workloads: bool = False,
    serving: bool = False,
    fp8: bool = False,
    compare: bool = True,
) -> Any:
    """Declare one field of a gate's `Params` dataclass with its bounds (checked by the loader; a list's bounds
    apply to each item). `check(value)` returns why a value is refused, or None.

    `workloads=True` marks a list of workload or set names; the loader expands sets and checks every name.
    Such a list holds dense workloads only unless `serving=True` (the gate runs varlen, kvcache and paged ones);
    `fp8=True` admits FP8 (e4m3) dense workloads besides the plain ones. `compare=False`: prose that is not part
    of what the field's object is (a workload's `why`), so two records of one shape compare equal whatever it says.
    """
    meta = {"gt": gt, "ge": ge, "lt": lt, "le": le, "choices": choices, "check": check, "workloads": workloads,
            "serving": serving, "fp8": fp8}
    if default is _MISSING:
        return dataclasses.field(metadata=meta, compare=compare)
    return dataclasses.field(default=default, metadata=meta, compare=compare)


@dataclass(frozen=True)
class Workload:
    name: str
    batch: int = param(gt=0)
    heads_q: int = param(gt=0)
    heads_kv: int = param(gt=0)
    seqlen_q: int = param(gt=0)
    seqlen_k: int = param(gt=0)
    head_dim: int = param(choices=WORKLOAD_HEAD_DIMS)
    dtype: str = param(choices=DTYPES)
    causal: bool = param()
    kind: str = param(choices=KINDS)
    why: str = param(compare=False)  # the reason it is gated: prose, not the shape (stored runs keep older wording)
    # Serving layouts and score modifiers (flashcore.serving); the defaults are a dense batch without either.
    layout: str = param(default="dense", choices=LAYOUTS)
    seqlens_q: tuple[int, ...] = param(default=())  # varlen: query tokens per sequence (0 allowed)
    seqlens_k: tuple[int, ...] = param(default=())  # varlen: keys per sequence; kvcache/paged: cache_seqlens
    page_size: int = param(default=0, ge=0, le=65536)  # paged: keys per page (1 .. 65536, as FA3)
    window_left: int = param(default=-1, ge=-1)  # sliding window (left, right); -1 = unbounded on that side
    window_right: int = param(default=-1, ge=-1)
    softcap: float = param(default=0.0, ge=0)  # > 0: scores soft-capped to softcap * tanh(score / softcap)
    head_dim_v: int = param(default=0, ge=0)  # v's head dim when it differs (0 = head_dim): 128 with head_dim 192
    q_scale: float = param(default=1.0, gt=0)  # multiplies q's standard-normal values (large scores for softcap)

    @property
    def dense(self) -> bool:
        return self.layout == "dense"

    @property
    def plain(self) -> bool:
        """Dense 16-bit without a window or soft-capping: flashcore.attention's call, which torch SDPA also makes."""
        return self.dense and self.window == (-1, -1) and not self.softcap and self.q_scale == 1.0 and not self.fp8

    @property
    def fp8(self) -> bool:
        """FP8 (E4M3) inputs: flashcore.attention_fp8, with per-(batch, K/V head) descale factors."""
        return self.dtype == "e4m3"

    @property
    def out_dtype(self) -> str:
        """The output's dtype: the inputs' own for 16-bit inputs, bf16 for FP8."""
        return "bf16" if self.fp8 else self.dtype

    @property
    def window(self) -> tuple[int, int]:
        return self.window_left, self.window_right

    @property
    def dim_v(self) -> int:
        return self.head_dim_v or self.head_dim

    @property
    def sequences(self) -> list[tuple[int, int]]:
        """(queries, keys) of each sequence: varlen's own lengths, a cache's seqlen_q queries over its used keys."""
        if self.layout == "varlen":
            return list(zip(self.seqlens_q, self.seqlens_k, strict=True))
        if self.dense:
            return [(self.seqlen_q, self.seqlen_k)] * self.batch
        return [(self.seqlen_q, sk) for sk in self.seqlens_k]

    @property
    def label(self) -> str:
        """Short shape text, e.g. `B4 H16/16 S8192x8192 D128 bf16 causal` (a serving layout and modifiers after)."""
        causal = " causal" if self.causal else ""
        dims = f"D{self.head_dim}" + (f"/{self.head_dim_v}" if self.head_dim_v else "")
        text = f"B{self.batch} H{self.heads_q}/{self.heads_kv} S{self.seqlen_q}x{self.seqlen_k} {dims} {self.dtype}"
        extra = []
        if not self.dense:
            lengths = self.seqlens_k if self.layout != "varlen" else self.seqlens_q
            extra.append(f"{self.layout} {min(lengths)}-{max(lengths)}")
        if self.layout == "paged":
            extra.append(f"page {self.page_size}")
        if self.window != (-1, -1):
            extra.append(f"window ({self.window_left},{self.window_right})")
        if self.softcap:
            extra.append(f"softcap {self.softcap:g}")
        return text + causal + "".join(f", {e}" for e in extra)


def workload_problems(wl: Workload) -> list[tuple[str, str]]:
    """(key, why) of each inconsistency between a workload's serving fields and its shape (first one raised)."""
    n = wl.batch
    out: list[tuple[str, str]] = []
    allowed = head_dims.HEAD_DIM_V.get(wl.head_dim, (wl.head_dim,))
    if wl.head_dim_v and wl.head_dim_v not in allowed:
        out.append(("head_dim_v", f"0 or a v head dim the head-dim table pairs with head_dim {wl.head_dim}: "
                                  f"{', '.join(map(str, allowed))}"))
    if wl.fp8:
        out.extend(fp8_problems(wl))
    if any(x < 0 for x in (*wl.seqlens_q, *wl.seqlens_k)):
        out.append(("seqlens_k" if any(x < 0 for x in wl.seqlens_k) else "seqlens_q", "lengths are >= 0"))
    if wl.layout == "dense":
        for key in ("seqlens_q", "seqlens_k", "page_size"):
            if getattr(wl, key):
                out.append((key, "only for the varlen, kvcache and paged layouts"))
        return out
    if len(wl.seqlens_k) != n:
        out.append(("seqlens_k", f"one length per sequence: {n} (batch)"))
    if wl.layout == "varlen":
        if len(wl.seqlens_q) != n:
            out.append(("seqlens_q", f"one length per sequence: {n} (batch)"))
        elif max(wl.seqlens_q) != wl.seqlen_q:
            out.append(("seqlen_q", f"the longest of seqlens_q ({max(wl.seqlens_q)})"))
        if wl.seqlens_k and max(wl.seqlens_k) != wl.seqlen_k:
            out.append(("seqlen_k", f"the longest of seqlens_k ({max(wl.seqlens_k)})"))
    else:
        if wl.seqlens_q:
            out.append(("seqlens_q", "varlen only: a cache's queries are seqlen_q per sequence"))
        if wl.seqlens_k and max(wl.seqlens_k) > wl.seqlen_k:
            out.append(("seqlens_k", f"at most seqlen_k ({wl.seqlen_k}), the cache's capacity"))
    if wl.layout == "paged":
        if wl.page_size == 0 or wl.seqlen_k % wl.page_size:
            out.append(("page_size", "1 .. 65536 keys that divide seqlen_k (the capacity)"))
    elif wl.page_size:
        out.append(("page_size", "only for the paged layout"))
    return out


def fp8_problems(wl: Workload) -> list[tuple[str, str]]:
    """What flashcore.attention_fp8 does not take: it runs dense batches at head dims 64, 128 and 256, no window, no
    soft-capping, one head dim for q, k and v."""
    out: list[tuple[str, str]] = []
    if wl.head_dim not in FP8_HEAD_DIMS:
        out.append(("head_dim", f"dtype e4m3 runs head dims {', '.join(map(str, FP8_HEAD_DIMS))}"))
    if not wl.dense:
        out.append(("layout", "dtype e4m3 runs dense batches only"))
    for key, off in (("window_left", -1), ("window_right", -1), ("softcap", 0.0), ("head_dim_v", 0)):
        if getattr(wl, key) != off:
            out.append((key, "not with dtype e4m3"))
    return out


@dataclass(frozen=True)
class GateSpec:
    name: str
    phase: int
    params: Any  # an instance of the gate's Params dataclass


@dataclass(frozen=True)
class PhaseSpec:
    number: int
    name: str
    gates: tuple[GateSpec, ...]


@dataclass(frozen=True)
class Config:
    """One run's gate files: workloads.yaml and phases.yaml parsed at load, every other gates/*.yaml on first use
    (`once`) and kept for the rest of the run, so each file is read once and every reader sees the same settings."""

    gates_dir: Path
    workloads: Mapping[str, Workload]
    sets: Mapping[str, tuple[str, ...]]
    phases: tuple[PhaseSpec, ...]
    _loaded: dict[str, Any] = dataclasses.field(default_factory=dict, init=False, repr=False, compare=False)

    def once(self, file: str, load: Callable[[Path], T]) -> T:
        """What `load(gates_dir)` parses from `file`, parsed on the first call and shared by every later one. A file
        that fails to parse is not kept: each caller gets the ConfigError."""
        if file not in self._loaded:
            self._loaded[file] = load(self.gates_dir)
        return typing.cast(T, self._loaded[file])

    def phase(self, number: int) -> PhaseSpec:
        for p in self.phases:
            if p.number == number:
                return p
        raise KeyError(number)

    def gates_through(self, number: int) -> tuple[GateSpec, ...]:
        """Gates are cumulative: phase N runs the gates of phases 1..N, in order."""
        return tuple(g for p in self.phases if p.number <= number for g in p.gates)


# ---- generic typed parsing ------------------------------------------------------------------------

_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a non-empty string"}


def _describe(tp: Any) -> str:
    if typing.get_origin(tp) is tuple:
        return f"a list of {_describe(typing.get_args(tp)[0]).removeprefix('a ').removeprefix('an ')}s"
    return _TYPE_WORDS.get(tp, str(tp))


def _coerce(file: Path, key: str, tp: Any, value: Any) -> Any:
    if typing.get_origin(tp) is tuple:
        if not isinstance(value, list) or not value:
            raise ConfigError(file, key, value, f"must be {_describe(tp)} (non-empty)")
        item = typing.get_args(tp)[0]
        return tuple(_coerce(file, f"{key}[{i}]", item, v) for i, v in enumerate(value))
    is_bool = isinstance(value, bool)
    if tp is bool and is_bool:
        return value
    if tp is int and isinstance(value, int) and not is_bool:
        return value
    if tp is float and isinstance(value, (int, float)) and not is_bool:
        return float(value)
    if tp is str and isinstance(value, str) and value.strip():
        return value
    why = f"must be {_describe(tp)}"
    if tp is float and isinstance(value, str):
        why += " (YAML 1.1 reads 1e-5 as a string: write 1.0e-5)"
    raise ConfigError(file, key, value, why)


def _check_bounds(file: Path, key: str, value: Any, meta: Mapping[str, Any]) -> None:
    if isinstance(value, tuple):
        for i, item in enumerate(value):
            _check_bounds(file, f"{key}[{i}]", item, meta)
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(file, key, value, "must be a finite number (an infinite or NaN threshold judges nothing)")
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    physical = range_of(key) if numeric else None
    if physical and bound_problem(value, physical.gt, physical.ge, physical.lt, physical.le):
        raise ConfigError(file, key, value, f"must be {physical.why}")
    if numeric and (why := bound_problem(value, meta.get("gt"), meta.get("ge"), meta.get("lt"), meta.get("le"))):
        raise ConfigError(file, key, value, why)
    if meta.get("choices") is not None and value not in meta["choices"]:
        allowed = ", ".join(str(c) for c in meta["choices"])
        raise ConfigError(file, key, value, f"must be one of {{{allowed}}}")
    if meta.get("check") is not None and (why := meta["check"](value)):
        raise ConfigError(file, key, value, why)


def mapping(file: Path, key: str, value: Any) -> Mapping[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(file, key, value, "must be a mapping (key: value lines)")
    return value


def parse_dataclass(cls: type, raw: Any, file: Path, key: str, fixed: Mapping[str, Any] | None = None) -> Any:
    """Build `cls` from a YAML mapping: unknown, missing and wrongly typed keys are ConfigErrors."""
    fixed = fixed or {}
    raw = mapping(file, key, raw)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in fixed}
    for k in raw:
        if k not in fields:
            allowed = ", ".join(fields) or "no keys"
            raise ConfigError(file, f"{key}.{k}", raw[k], f"unknown key; allowed: {allowed}")
    values: dict[str, Any] = dict(fixed)
    for name, f in fields.items():
        sub = f"{key}.{name}"
        if name not in raw:
            if f.default is dataclasses.MISSING:
                raise ConfigError(file, sub, _MISSING, f"required: {_describe(hints[name])}")
            continue
        values[name] = _coerce(file, sub, hints[name], raw[name])
        _check_bounds(file, sub, values[name], f.metadata)
    return cls(**values)


# ---- YAML files -----------------------------------------------------------------------------------


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of silently keeping the last one."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: its keys may be overridden here
            continue
        k = loader.construct_object(key_node, deep=True)
        if k in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {k!r}", key_node.start_mark
            )
        seen.add(k)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def read_yaml(file: Path, top_keys: tuple[str, ...]) -> Mapping[str, Any]:
    try:
        text = file.read_text()
    except OSError as e:
        raise ConfigError(file, "(file)", str(file), f"cannot be read: {e.strerror or e}") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise ConfigError(file, "(yaml)", str(e).splitlines()[0], f"not valid YAML: {e}") from None
    data = mapping(file, "(top level)", data)
    for k in data:
        if k not in top_keys:
            raise ConfigError(file, str(k), data[k], f"unknown key; allowed: {', '.join(top_keys)}")
    return data
