"""The schema of the gate files: the config types (Workload, GateSpec, PhaseSpec, Config), `param()` for a gate's
Params dataclass, strict dataclass parsing and a strict YAML reader, and `ConfigError`, whose message names the file,
the key path (`workloads.s17-causal.head_dim`), the value and what is allowed. No gate is imported here: gate modules
import this module, and the loader (harness/config.py) imports both.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HEAD_DIMS = (64, 128, 256)  # head dims the kernel is built for (kernel/config.h)
DTYPES = ("bf16", "fp16")
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
    choices: tuple[Any, ...] | None = None,
    workloads: bool = False,
) -> Any:
    """Declare one field of a gate's `Params` dataclass with its bounds (checked by the loader).

    `workloads=True` marks a list of workload or set names; the loader expands sets and checks every name.
    """
    meta = {"gt": gt, "ge": ge, "choices": choices, "workloads": workloads}
    if default is _MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Workload:
    name: str
    batch: int = param(gt=0)
    heads_q: int = param(gt=0)
    heads_kv: int = param(gt=0)
    seqlen_q: int = param(gt=0)
    seqlen_k: int = param(gt=0)
    head_dim: int = param(choices=HEAD_DIMS)
    dtype: str = param(choices=DTYPES)
    causal: bool = param()
    kind: str = param(choices=KINDS)
    why: str = param()

    @property
    def label(self) -> str:
        """Short shape text, e.g. `B4 H16/16 S8192x8192 D128 bf16 causal`."""
        causal = " causal" if self.causal else ""
        return (
            f"B{self.batch} H{self.heads_q}/{self.heads_kv} S{self.seqlen_q}x{self.seqlen_k}"
            f" D{self.head_dim} {self.dtype}{causal}"
        )


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
    gates_dir: Path
    workloads: Mapping[str, Workload]
    sets: Mapping[str, tuple[str, ...]]
    phases: tuple[PhaseSpec, ...]

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
    if meta.get("gt") is not None and not value > meta["gt"]:
        raise ConfigError(file, key, value, f"must be > {meta['gt']}")
    if meta.get("ge") is not None and not value >= meta["ge"]:
        raise ConfigError(file, key, value, f"must be >= {meta['ge']}")
    if meta.get("choices") is not None and value not in meta["choices"]:
        allowed = ", ".join(str(c) for c in meta["choices"])
        raise ConfigError(file, key, value, f"must be one of {{{allowed}}}")


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
