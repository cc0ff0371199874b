"""Gate configuration: `gates/workloads.yaml` and `gates/phases.yaml`, parsed once into frozen dataclasses
(the types, `param()` and the strict parsing live in harness/schema.py; this module loads and resolves).

Every problem in a file raises `ConfigError`, whose message names the file, the key path
(`workloads.s17-causal.head_dim`), the value and what is allowed. Gate parameters are typed by each
gate's own `Params` dataclass (see `param()`); thresholds live in the YAML, never in code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.gates import registry
from harness.schema import (  # noqa: F401  (re-exported: the names older imports use)
    _MISSING,
    _NAME,
    ALL_SET,
    DTYPES,
    HEAD_DIMS,
    KINDS,
    NOT_IN_ALL,
    PHASES,
    PHASES_FILE,
    WORKLOADS_FILE,
    Config,
    ConfigError,
    GateSpec,
    PhaseSpec,
    Workload,
    _coerce,
    mapping,
    param,
    parse_dataclass,
    read_yaml,
    workload_problems,
)


def _parse_workloads(file: Path) -> tuple[dict[str, Workload], dict[str, tuple[str, ...]]]:
    data = read_yaml(file, ("workloads", "sets"))
    raw_workloads = mapping(file, "workloads", data.get("workloads"))
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
        for field, why in workload_problems(wl):
            raise ConfigError(file, f"{key}.{field}", getattr(wl, field), why)
        workloads[name] = wl
    sets: dict[str, tuple[str, ...]] = {ALL_SET: tuple(n for n, w in workloads.items() if w.kind not in NOT_IN_ALL)}
    for name, members in mapping(file, "sets", data.get("sets")).items():
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
    """Expand set names into workload names (order kept, duplicates dropped); "-name" (a set or a workload: no name
    starts with "-") removes its workloads from those named before it."""
    out: dict[str, None] = {}
    for i, n in enumerate(names):
        drop = n.startswith("-")
        name = n[1:] if drop else n
        if name in sets:
            members = sets[name]
        elif name in workloads:
            members = (name,)
        else:
            known = ", ".join([*sets, *workloads])
            raise ConfigError(file, f"{key}[{i}]", n, f"unknown workload or set; known: {known} (each may be "
                              "preceded by '-': leave its workloads out)")
        for m in members:
            if drop:
                out.pop(m, None)
            else:
                out[m] = None
    if names and not out:
        raise ConfigError(file, key, list(names), "leaves no workload (each '-name' removes from those before it)")
    return tuple(out)


def _parse_gate(file: Path, phase: int, name: Any, raw: Any, workloads: Mapping[str, Workload],
                sets: Mapping[str, tuple[str, ...]]) -> GateSpec:
    key = f"phases.{phase}.gates.{name}"
    gate = registry.get(name) if isinstance(name, str) else None
    if gate is None:
        raise ConfigError(file, key, name, f"unknown gate; registered: {', '.join(registry.names())}")
    params = parse_dataclass(gate.Params, raw, file, key)
    for f in dataclasses.fields(params):
        if f.metadata.get("workloads"):
            names = _resolve(file, f"{key}.{f.name}", getattr(params, f.name), workloads, sets)
            serving = [n for n in names if not workloads[n].plain
                       and not (f.metadata.get("fp8") and workloads[n].fp8)]
            if serving and not f.metadata.get("serving"):
                raise ConfigError(file, f"{key}.{f.name}", serving[0],
                                  f"{workloads[serving[0]].label}: gate {name} runs plain dense workloads only "
                                  "(no varlen, cache, window, softcap or FP8)")
            params = dataclasses.replace(params, **{f.name: names})
    return GateSpec(name=name, phase=phase, params=params)


def _parse_phases(file: Path, workloads: Mapping[str, Workload],
                  sets: Mapping[str, tuple[str, ...]]) -> tuple[PhaseSpec, ...]:
    data = read_yaml(file, ("phases",))
    raw_phases = mapping(file, "phases", data.get("phases"))
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
        raw = mapping(file, key, raw_phases[number])
        for k in raw:
            if k not in ("name", "gates"):
                raise ConfigError(file, f"{key}.{k}", raw[k], "unknown key; allowed: name, gates")
        if "name" not in raw:
            raise ConfigError(file, f"{key}.name", _MISSING, "required: a non-empty string")
        name = _coerce(file, f"{key}.name", str, raw["name"])
        if "gates" not in raw:
            raise ConfigError(file, f"{key}.gates", _MISSING, "required: a mapping gate name -> params ({} for none)")
        gates = []
        for gate_name, params in mapping(file, f"{key}.gates", raw["gates"]).items():
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
