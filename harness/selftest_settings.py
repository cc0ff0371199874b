"""gates/selftest.yaml: how `make selftest` runs its cases (parallelism, trims, the watchdog's limit, serial gates)
and the cases declared there rather than on a gate class. Names are checked against the configuration and the
declared cases by harness/selftest.py (`check_settings`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.gates.base import SelfTest
from harness.schema import ConfigError, read_yaml

SELFTEST_FILE = "selftest.yaml"
_KEYS = ("parallel", "limit_s", "serial", "trim", "cases")
_CASE_KEYS = ("name", "gate", "plant", "arg", "why", "must_fail")


@dataclass(frozen=True)
class SelftestSettings:
    parallel: int
    limit_s: float
    serial: tuple[str, ...]  # gates whose cases run alone, after the parallel ones
    trim: Mapping[str, tuple[str, ...]]  # case -> the workloads it runs its gate on
    cases: tuple[tuple[str, SelfTest], ...]  # (gate, case) declared in the file


def _names(file: Path, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(n, str) and n for n in value):
        raise ConfigError(file, key, value, "a list of names")
    return tuple(value)


def _case(file: Path, i: int, raw: Any) -> tuple[str, SelfTest]:
    if not isinstance(raw, dict) or set(raw) - set(_CASE_KEYS):
        raise ConfigError(file, f"cases[{i}]", raw, f"a mapping with keys among {', '.join(_CASE_KEYS)}")
    for key in ("name", "gate", "plant", "why"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise ConfigError(file, f"cases[{i}].{key}", raw.get(key), "a non-empty string")
    return raw["gate"], SelfTest(raw["name"], raw["plant"], str(raw.get("arg", "")), raw["why"],
                                 str(raw.get("must_fail", "")))


def load_selftest_settings(gates_dir: Path) -> SelftestSettings:
    file = gates_dir / SELFTEST_FILE
    data = read_yaml(file, _KEYS)
    parallel = data.get("parallel")
    if isinstance(parallel, bool) or not isinstance(parallel, int) or not 1 <= parallel <= 64:
        raise ConfigError(file, "parallel", parallel, "an integer in 1..64")
    limit = data.get("limit_s")
    if isinstance(limit, bool) or not isinstance(limit, int | float) or not limit > 0:
        raise ConfigError(file, "limit_s", limit, "a number > 0")
    trim = data.get("trim") or {}
    if not isinstance(trim, dict):
        raise ConfigError(file, "trim", trim, "a mapping of case name -> workload names")
    cases = data.get("cases") or []
    if not isinstance(cases, list):
        raise ConfigError(file, "cases", cases, "a list of cases")
    return SelftestSettings(parallel, float(limit), _names(file, "serial", data.get("serial", [])),
                            {str(k): _names(file, f"trim.{k}", v) for k, v in trim.items()},
                            tuple(_case(file, i, c) for i, c in enumerate(cases)))
