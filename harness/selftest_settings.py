"""gates/selftest.yaml: how `make selftest` runs its cases (parallelism, trims, the watchdog's limit, serial gates,
the timing of the timed cases, the named shares and each case's expected seconds) and the cases declared there
rather than on a gate class. Names are checked against the configuration and the declared cases by
harness/selftest.py (`check_settings`); the timing against gates/bench.yaml's own rules (harness/selftest_perf.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.gates.base import SelfTest
from harness.schema import ConfigError, read_yaml

SELFTEST_FILE = "selftest.yaml"
_KEYS = ("parallel", "limit_s", "serial", "trim", "bench", "share_limit_s", "shares", "estimates_s", "spread_reruns",
         "cases")
_CASE_KEYS = ("name", "gate", "plant", "arg", "why", "must_fail")
BENCH_SECTIONS = ("timing", "sweep")  # the sections of gates/bench.yaml the timed cases may override


@dataclass(frozen=True)
class SelftestSettings:
    parallel: int
    limit_s: float
    serial: tuple[str, ...]  # gates whose cases run alone, after the parallel ones
    trim: Mapping[str, tuple[str, ...]]  # case -> the workloads it runs its gate on
    bench: Mapping[str, Mapping[str, Any]]  # section of gates/bench.yaml -> the keys the timed cases run with
    share_limit_s: float  # what one share may be expected to take (one device call, less the start)
    shares: tuple[tuple[str, ...], ...]  # `--share I/N`: N = len(shares); share I runs shares[I-1]
    estimates_s: Mapping[str, float]  # case -> its expected seconds, fault and control together
    spread_reruns: int  # times a clean run red by its spread check alone is measured again (harness/selftest.py)
    cases: tuple[tuple[str, SelfTest], ...]  # (gate, case) declared in the file


def _names(file: Path, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(n, str) and n for n in value):
        raise ConfigError(file, key, value, "a list of names")
    return tuple(value)


def _seconds(file: Path, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(file, key, value, "a number > 0")
    return float(value)


def _mapping(file: Path, key: str, value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(file, key, value, "a mapping")
    return {str(k): v for k, v in value.items()}


def _case(file: Path, i: int, raw: Any) -> tuple[str, SelfTest]:
    if not isinstance(raw, dict) or set(raw) - set(_CASE_KEYS):
        raise ConfigError(file, f"cases[{i}]", raw, f"a mapping with keys among {', '.join(_CASE_KEYS)}")
    for key in ("name", "gate", "plant", "why"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise ConfigError(file, f"cases[{i}].{key}", raw.get(key), "a non-empty string")
    return raw["gate"], SelfTest(raw["name"], raw["plant"], str(raw.get("arg", "")), raw["why"],
                                 str(raw.get("must_fail", "")))


def _bench(file: Path, raw: Any) -> Mapping[str, Mapping[str, Any]]:
    sections = _mapping(file, "bench", raw)
    for name, keys in sections.items():
        if name not in BENCH_SECTIONS:
            raise ConfigError(file, f"bench.{name}", keys, f"not a section the self-test overrides "
                                                           f"({', '.join(BENCH_SECTIONS)})")
        _mapping(file, f"bench.{name}", keys)
    return {name: dict(keys) for name, keys in sections.items()}


def load_selftest_settings(gates_dir: Path) -> SelftestSettings:
    file = gates_dir / SELFTEST_FILE
    data = read_yaml(file, _KEYS)
    parallel = data.get("parallel")
    if isinstance(parallel, bool) or not isinstance(parallel, int) or not 1 <= parallel <= 64:
        raise ConfigError(file, "parallel", parallel, "an integer in 1..64")
    trim = _mapping(file, "trim", data.get("trim"))
    cases = data.get("cases") or []
    if not isinstance(cases, list):
        raise ConfigError(file, "cases", cases, "a list of cases")
    shares = data.get("shares") or []
    if not isinstance(shares, list) or not shares:
        raise ConfigError(file, "shares", shares, "a non-empty list of shares, each a list of case names")
    estimates = _mapping(file, "estimates_s", data.get("estimates_s"))
    reruns = data.get("spread_reruns")
    if isinstance(reruns, bool) or not isinstance(reruns, int) or not 0 <= reruns <= 3:
        raise ConfigError(file, "spread_reruns", reruns, "an integer in 0..3")
    return SelftestSettings(
        parallel, _seconds(file, "limit_s", data.get("limit_s")), _names(file, "serial", data.get("serial", [])),
        {k: _names(file, f"trim.{k}", v) for k, v in trim.items()}, _bench(file, data.get("bench")),
        _seconds(file, "share_limit_s", data.get("share_limit_s")),
        tuple(_names(file, f"shares[{i}]", s) for i, s in enumerate(shares)),
        {k: _seconds(file, f"estimates_s.{k}", v) for k, v in estimates.items()}, reruns,
        tuple(_case(file, i, c) for i, c in enumerate(cases)))
