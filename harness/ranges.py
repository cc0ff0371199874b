"""The physical range of each kind of threshold in the gate files, by its key's name (pure; harness/schema.py applies
it to every dataclass the gate files are parsed into, on top of each field's own `param()` bounds)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Range:
    """The values a kind of threshold can physically take."""

    why: str
    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None


# The physical range of a threshold by its key's name, applied to every dataclass the gate files are parsed into,
# on top of the field's own `param()` bounds: a percentage of peak of 0 (or 1e9) would pass anything, a spread
# limit of 1 (100 %) judges nothing, a regression margin of 1 lets a run twice as slow pass. A numeric key whose
# name is not here declares its own bounds (tests/test_config_bounds.py checks that every gate key has one).
RANGES = (
    (re.compile(r"(^|_)pct$"), Range("in (0, 100]: a percentage of peak", gt=0, le=100)),
    (re.compile(r"(^|_)max_rel_std$"), Range("in (0, 1): a relative standard deviation (a long-context limit "
                                             "left out falls back to max_rel_std)", gt=0, lt=1)),
    (re.compile(r"(^|_)regression_margin$"), Range("in [0, 1): a relative slowdown", ge=0, lt=1)),
    (re.compile(r"^min_(ratio|geomean)$"), Range("> 0: a speed ratio (a 0 floor judges nothing; "
                                                "min_geomean left out is off)", gt=0)),
    (re.compile(r"(^|_)(seeds|repeats|draws|launch_count)$"), Range(">= 1: a count", ge=1)),
    (re.compile(r"(^|_)(timeout_s|budget_s)$"), Range("> 0: a time limit in seconds", gt=0)),
    (re.compile(r"(^|_)seqlens$"), Range("> 0: a sequence length", gt=0)),
    (re.compile(r"(^|_)sm_margins$"), Range(">= 0: a number of SMs left idle", ge=0)),
)


def range_of(key: str) -> Range | None:
    """The physical range of the threshold named `key` (its last part), or None when the name has none."""
    name = key.rsplit(".", 1)[-1].split("[", 1)[0]
    return next((r for rx, r in RANGES if rx.search(name)), None)


def bound_problem(value: Any, gt: Any, ge: Any, lt: Any, le: Any) -> str | None:
    for limit, ok, word in ((gt, lambda v, x: v > x, ">"), (ge, lambda v, x: v >= x, ">="),
                            (lt, lambda v, x: v < x, "<"), (le, lambda v, x: v <= x, "<=")):
        if limit is not None and not ok(value, limit):
            return f"must be {word} {limit}"
    return None
