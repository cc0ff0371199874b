"""Every threshold in the gate files is bounded to the physical range of its metric: a percentage of 0 or 1e9, a
spread limit of 100 %, a regression margin of 1, a count of 0 or an infinite limit would each judge nothing. Each
out-of-range value is fed through the real loader and refused with the file, the key and the value; and every
numeric key of every registered gate declares a bound, so a new key cannot arrive unbounded."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_config import _edit

from harness.config import load_config
from harness.gates import registry
from harness.ranges import range_of
from harness.schema import ConfigError

BOUND_KEYS = ("gt", "ge", "lt", "le", "choices")
# Numeric keys with no physical range, each with the reason.
UNBOUNDED = {
    "fp8_score_bits": "a log2 exponent: any finite value (the loader refuses inf and NaN)",
}


def _gate(name: str, **changes: Any) -> Callable[[dict[str, Any]], Any]:
    def change(d: dict[str, Any]) -> None:
        (gate,) = [p["gates"][name] for p in d["phases"].values() if name in (p["gates"] or {})]
        gate.update(changes)

    return change


CASES = [
    # (gate, key, value, words of the rule)
    ("ncu-dram", "min_pct", 0.0, "(0, 100]"),
    ("ncu-dram", "min_pct", 100.5, "(0, 100]"),
    ("ncu-sm", "min_pct", 1.0e9, "(0, 100]"),
    ("ncu-sm-pipeline", "min_pct", -1.0, "(0, 100]"),
    ("ncu-dram", "metric", "gpu__time_duration.sum", "not a percentage-of-peak metric"),
    ("ncu-dram", "metric", "dram__bytes_read.sum.per_second", "not a percentage-of-peak metric"),
    ("ncu-stalls", "tensor_metric", "smsp__inst_executed.sum", "not a percentage-of-peak metric"),
    ("ncu-dram", "metrics", ["dram__throughput.avg.pct_of_peak_sustained_elapsed", "made__up.metric"],
     "no known unit for this metric"),
    ("ncu-dram", "launch_count", 0, ">= 1"),
    ("ncu-stalls", "timeout_s", 0, "> 0"),
    ("perf-fa2", "max_rel_std", 0.0, "(0, 1)"),
    ("perf-fa2", "max_rel_std", 1.0, "(0, 1)"),
    ("perf-cudnn", "max_rel_std", 5.0, "(0, 1)"),
    ("perf-fa2", "long_context_max_rel_std", 1.5, "(0, 1)"),
    ("scaling", "max_rel_std", 2.0, "(0, 1)"),
    ("perf-fa2", "regression_margin", 1.0, "[0, 1)"),
    ("perf-fp8", "regression_margin", -0.1, "[0, 1)"),
    ("perf-fa3", "min_ratio", 0.0, "> 0"),
    ("perf-fa3", "min_geomean", 0.0, "> 0"),
    ("scaling", "min_ratio", -1.0, "> 0: a speed ratio"),
    ("correctness", "seeds", 0, ">= 1"),
    ("determinism", "repeats", 0, ">= 1: a count"),
    ("determinism", "repeats", 1, ">= 2"),  # the gate's own bound: one call has nothing to compare with
    ("random-shapes", "serving_draws", 0, ">= 1"),
    ("random-shapes", "dense_draws", 0, ">= 1"),
    ("sanitizer", "racecheck_timeout_s", 0, "> 0"),
    ("sanitizer-all", "budget_s", -5, "> 0"),
    ("correctness", "fp16_max_abs", float("inf"), "finite"),
    ("correctness", "bf16_error_slack", float("nan"), "finite"),
    ("random-shapes", "fp8_score_bits", float("-inf"), "finite"),
    ("scaling", "judged_seqlens", [32768, 0], "> 0"),
    ("determinism-strict", "sm_margins", [0, -1], ">= 0"),
]


@pytest.mark.parametrize(("gate", "key", "value", "why"), CASES,
                         ids=[f"{g}.{k}={v}" for g, k, v, _ in CASES])
def test_out_of_range_threshold_is_refused_with_file_key_and_value(gates_dir: Path, gate: str, key: str, value: Any,
                                                                   why: str) -> None:
    _edit(gates_dir, "phases.yaml", _gate(gate, **{key: value}))
    with pytest.raises(ConfigError) as err:
        load_config(gates_dir)
    e = err.value
    assert e.file == str(gates_dir / "phases.yaml")
    assert e.key.startswith("phases.") and f".gates.{gate}.{key}" in e.key, e.key
    assert why in e.why, str(e)
    assert repr(value if not isinstance(value, list) else value[-1])[:20] in str(e) or "nan" in str(e), str(e)


def test_in_range_edges_load(gates_dir: Path) -> None:
    _edit(gates_dir, "phases.yaml", lambda d: (_gate("ncu-dram", min_pct=100.0)(d),
                                               _gate("perf-fa2", regression_margin=0.0, max_rel_std=0.5)(d)))
    gates = {g.name: g.params for g in load_config(gates_dir).gates_through(7)}
    assert gates["ncu-dram"].min_pct == 100.0 and gates["perf-fa2"].regression_margin == 0.0


def test_every_numeric_gate_key_has_a_bound() -> None:
    unbounded = []
    for name in registry.names():
        params = registry.get(name).Params  # type: ignore[union-attr]
        hints = typing.get_type_hints(params)
        for f in dataclasses.fields(params):
            tp = hints[f.name]
            item = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else tp
            if item not in (int, float) or f.name in UNBOUNDED:
                continue
            if not any(f.metadata.get(k) is not None for k in BOUND_KEYS) and range_of(f.name) is None:
                unbounded.append(f"{name}.{f.name}")
    assert not unbounded, f"numeric gate keys without a bound (param(gt=...) or schema.RANGES): {unbounded}"


def test_every_percentage_key_is_capped_at_100() -> None:
    for name in registry.names():
        for f in dataclasses.fields(registry.get(name).Params):  # type: ignore[union-attr]
            if f.name.endswith("pct"):
                r = range_of(f.name)
                assert r is not None and (r.gt, r.le) == (0, 100), f"{name}.{f.name}"


def test_every_key_in_phases_yaml_is_within_its_physical_range() -> None:
    config = load_config(Path(__file__).resolve().parent.parent / "gates")
    for spec in config.gates_through(7):
        for f in dataclasses.fields(spec.params):
            r = range_of(f.name)
            value = getattr(spec.params, f.name)
            if r is None or not isinstance(value, int | float) or isinstance(value, bool):
                continue
            if f.default is not dataclasses.MISSING and value == f.default:
                continue  # an omitted key keeps its default ("off"), which is not a threshold
            for limit, ok in ((r.gt, value > (r.gt or 0)), (r.ge, value >= (r.ge or 0)),
                              (r.lt, value < (r.lt or 0)), (r.le, value <= (r.le or 0))):
                assert limit is None or ok, f"{spec.name}.{f.name} = {value}: {r.why}"
