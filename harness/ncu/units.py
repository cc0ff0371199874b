"""The unit each ncu metric the gates read must carry, and the range its value can physically take. Pure.

A number without its unit proves nothing: the same column in `Kbyte/second` instead of `%` reads as a DRAM
throughput of 91 "percent" and passes an 85 % floor. With `--print-units base` ncu prints every metric in its
base unit, fixed by the metric's name (ncu's naming: `<unit>__<counter>.<rollup>.<submetric>`), so the table
below is a property of ncu's metrics, not a setting: a `pct_of_peak_*` submetric is a percentage of a peak, a
warp-state `.ratio` counts issued instructions, `gpu__time_duration` is nanoseconds. A metric the table does
not know cannot be checked, so the gate files may only name metrics it knows (harness/schema.py `check`).
"""

from __future__ import annotations

import re

PERCENT = "%"

# (metric name pattern, base unit): first match wins.
UNITS = (
    (re.compile(r".+\.pct_of_peak_sustained_(elapsed|active|region|frame)$"), PERCENT),
    (re.compile(r"^gpu__time_duration\.(sum|avg|min|max)$"), "ns"),
    (re.compile(r"^smsp__average_warps_issue_stalled_\w+_per_issue_active\.ratio$"), "inst"),
    (re.compile(r"^smsp__average_warp_latency_per_inst_issued\.ratio$"), "cycle"),
    (re.compile(r"^dram__bytes(_read|_write)?\.(sum|avg|min|max)$"), "byte"),
    (re.compile(r"^dram__bytes(_read|_write)?\.(sum|avg|min|max)\.per_second$"), "byte/second"),
    (re.compile(r"^launch__registers_per_thread$"), "register/thread"),
    (re.compile(r"^launch__shared_mem_per_block(_static|_dynamic|_driver|_allocated)?$"), "byte/block"),
)


def expected_unit(metric: str) -> str | None:
    """The base unit `metric` is printed in; None for a metric this table does not know."""
    return next((unit for rx, unit in UNITS if rx.match(metric)), None)


def unknown_metric(metric: str) -> str | None:
    """Why `metric` may not be named in a gate file (no known unit), or None: the schema's `check` for metric keys."""
    if expected_unit(metric) is None:
        return ("no known unit for this metric: add its base unit to harness/ncu/units.py UNITS "
                "(`ncu --query-metrics` and one `--print-units base` capture show it)")
    return None


def not_percent(metric: str) -> str | None:
    """Why `metric` cannot hold a threshold in percent, or None: the schema's `check` for a gated `pct` metric."""
    if expected_unit(metric) != PERCENT:
        return ("not a percentage-of-peak metric (a `.pct_of_peak_sustained_*` submetric): a threshold in % "
                "would be compared with a number in another unit")
    return None


def unit_problem(metric: str, unit: str) -> str | None:
    """Why `unit` (the CSV's units row) is not the unit `metric` needs, or None."""
    want = expected_unit(metric)
    if want is None:
        return f"{metric}: no known unit to check {unit!r} against (harness/ncu/units.py)"
    if unit != want:
        return f"{metric} is in {unit or '(no unit)'!r}, not {want!r}: not the metric the threshold is for"
    return None


def value_problem(metric: str, unit: str, value: float) -> str | None:
    """Why `value` cannot be a reading of `metric`, or None: a percentage lies in 0..100, a count or time is >= 0."""
    if unit == PERCENT and not 0.0 <= value <= 100.0:
        return f"{metric} = {value:g} {unit}: a percentage of peak lies in 0..100"
    if value < 0.0:
        return f"{metric} = {value:g} {unit}: a count or a time is never negative"
    return None
