"""Gate configuration: `gates/workloads.yaml` and `gates/phases.yaml`, parsed once into frozen dataclasses.

Every problem in a file raises `ConfigError`, whose message names the file, the key path
(`workloads.s17-causal.head_dim`), the value and what is allowed. Gate parameters are typed by each
gate's own `Params` dataclass (see `param()`); thresholds live in the YAML, never in code.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
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


def _mapping(file: Path, key: str, value: Any) -> Mapping[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(file, key, value, "must be a mapping (key: value lines)")
    return value


def parse_dataclass(cls: type, raw: Any, file: Path, key: str, fixed: Mapping[str, Any] | None = None) -> Any:
    """Build `cls` from a YAML mapping: unknown, missing and wrongly typed keys are ConfigErrors."""
    fixed = fixed or {}
    raw = _mapping(file, key, raw)
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
        k = loader.construct_object(key_node, deep=True)
        if k in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {k!r}", key_node.start_mark
            )
        seen.add(k)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def _read_yaml(file: Path, top_keys: tuple[str, ...]) -> Mapping[str, Any]:
    try:
        text = file.read_text()
    except OSError as e:
        raise ConfigError(file, "(file)", str(file), f"cannot be read: {e.strerror or e}") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise ConfigError(file, "(yaml)", str(e).splitlines()[0], f"not valid YAML: {e}") from None
    data = _mapping(file, "(top level)", data)
    for k in data:
        if k not in top_keys:
            raise ConfigError(file, str(k), data[k], f"unknown key; allowed: {', '.join(top_keys)}")
    return data


def _parse_workloads(file: Path) -> tuple[dict[str, Workload], dict[str, tuple[str, ...]]]:
    data = _read_yaml(file, ("workloads", "sets"))
    raw_workloads = _mapping(file, "workloads", data.get("workloads"))
    if not raw_workloads:
        raise ConfigError(file, "workloads", data.get("workloads", _MISSING), "required: at least one workload")
    workloads: dict[str, Workload] = {}
    for name, raw in raw_workloads.items():
        key = f"workloads.{name}"
        if not isinstance(name, str) or not _NAME.match(name) or name == ALL_SET:
            raise ConfigError(file, key, name, f"a workload name is [a-z0-9._-]+ and not '{ALL_SET}'")
        wl = parse_dataclass(Workload, raw, file, key, fixed={"name": name})
        if wl.heads_q % wl.heads_kv:
            raise ConfigError(file, f"{key}.heads_q", wl.heads_q, f"must be a multiple of heads_kv ({wl.heads_kv})")
        workloads[name] = wl
    sets: dict[str, tuple[str, ...]] = {ALL_SET: tuple(n for n, w in workloads.items() if w.kind not in NOT_IN_ALL)}
    for name, members in _mapping(file, "sets", data.get("sets")).items():
        key = f"sets.{name}"
        if not isinstance(name, str) or not _NAME.match(name) or name in workloads or name == ALL_SET:
            raise ConfigError(file, key, name, f"a set name is [a-z0-9._-]+, not '{ALL_SET}' nor a workload name")
        names = _coerce(file, key, tuple[str, ...], members)
        for i, n in enumerate(names):
            if n not in workloads:
                raise ConfigError(file, f"{key}[{i}]", n, "unknown workload")
        sets[name] = names
    return workloads, sets


def _resolve(file: Path, key: str, names: tuple[str, ...], workloads: Mapping[str, Workload],
             sets: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """Expand set names into workload names (order kept, duplicates dropped)."""
    out: dict[str, None] = {}
    for i, n in enumerate(names):
        if n in sets:
            out.update(dict.fromkeys(sets[n]))
        elif n in workloads:
            out[n] = None
        else:
            known = ", ".join([*sets, *workloads])
            raise ConfigError(file, f"{key}[{i}]", n, f"unknown workload or set; known: {known}")
    return tuple(out)


def _parse_gate(file: Path, phase: int, name: Any, raw: Any, workloads: Mapping[str, Workload],
                sets: Mapping[str, tuple[str, ...]]) -> GateSpec:
    from harness.gates import registry  # late: gate modules import this module

    key = f"phases.{phase}.gates.{name}"
    gate = registry.get(name) if isinstance(name, str) else None
    if gate is None:
        raise ConfigError(file, key, name, f"unknown gate; registered: {', '.join(registry.names())}")
    params = parse_dataclass(gate.Params, raw, file, key)
    for f in dataclasses.fields(params):
        if f.metadata.get("workloads"):
            names = _resolve(file, f"{key}.{f.name}", getattr(params, f.name), workloads, sets)
            params = dataclasses.replace(params, **{f.name: names})
    return GateSpec(name=name, phase=phase, params=params)


def _parse_phases(file: Path, workloads: Mapping[str, Workload],
                  sets: Mapping[str, tuple[str, ...]]) -> tuple[PhaseSpec, ...]:
    data = _read_yaml(file, ("phases",))
    raw_phases = _mapping(file, "phases", data.get("phases"))
    if not raw_phases:
        raise ConfigError(file, "phases", data.get("phases", _MISSING), "required: at least phase 1")
    for number in raw_phases:
        if isinstance(number, bool) or not isinstance(number, int) or number not in PHASES:
            raise ConfigError(file, f"phases.{number}", number, "a phase number is an integer 1..7")
    numbers = sorted(raw_phases)
    if numbers != list(range(1, len(numbers) + 1)):
        raise ConfigError(file, "phases", numbers, "phase numbers must be contiguous from 1 (1, 2, ..., N)")
    phases: list[PhaseSpec] = []
    seen: dict[str, int] = {}
    for number in numbers:
        key = f"phases.{number}"
        raw = _mapping(file, key, raw_phases[number])
        for k in raw:
            if k not in ("name", "gates"):
                raise ConfigError(file, f"{key}.{k}", raw[k], "unknown key; allowed: name, gates")
        if "name" not in raw:
            raise ConfigError(file, f"{key}.name", _MISSING, "required: a non-empty string")
        name = _coerce(file, f"{key}.name", str, raw["name"])
        if "gates" not in raw:
            raise ConfigError(file, f"{key}.gates", _MISSING, "required: a mapping gate name -> params ({} for none)")
        gates = []
        for gate_name, params in _mapping(file, f"{key}.gates", raw["gates"]).items():
            if gate_name in seen:
                raise ConfigError(file, f"{key}.gates.{gate_name}", gate_name,
                                  f"already a gate of phase {seen[gate_name]}; gate names are unique")
            gates.append(_parse_gate(file, number, gate_name, params, workloads, sets))
            seen[gate_name] = number
        phases.append(PhaseSpec(number=number, name=name, gates=tuple(gates)))
    return tuple(phases)


def load_config(gates_dir: Path) -> Config:
    """Parse `<gates_dir>/workloads.yaml` and `<gates_dir>/phases.yaml`; raise ConfigError on any problem."""
    gates_dir = Path(gates_dir)
    workloads, sets = _parse_workloads(gates_dir / WORKLOADS_FILE)
    phases = _parse_phases(gates_dir / PHASES_FILE, workloads, sets)
    return Config(
        gates_dir=gates_dir,
        workloads=MappingProxyType(workloads),
        sets=MappingProxyType(sets),
        phases=phases,
    )
