"""Summary statistics of per-repetition GPU times (pure; no numpy)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


@dataclass(frozen=True)
class Summary:
    """Median and spread of one measurement's repetitions (milliseconds)."""

    reps: int
    median_ms: float
    p20_ms: float
    p80_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    rel_std: float  # sample standard deviation / mean: the spread the gates judge

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(times_ms: Sequence[float]) -> Summary:
    """Median, p20/p80, mean, min/max and relative standard deviation; needs at least 2 repetitions."""
    if len(times_ms) < 2:
        raise ValueError(f"need at least 2 repetitions for a spread, got {len(times_ms)}")
    if any(not math.isfinite(t) or t <= 0 for t in times_ms):
        raise ValueError("repetition times must be finite and > 0")
    mean = statistics.fmean(times_ms)
    return Summary(
        reps=len(times_ms),
        median_ms=statistics.median(times_ms),
        p20_ms=percentile(times_ms, 20),
        p80_ms=percentile(times_ms, 80),
        mean_ms=mean,
        min_ms=min(times_ms),
        max_ms=max(times_ms),
        rel_std=statistics.stdev(times_ms) / mean,
    )
