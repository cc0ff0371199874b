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
    rel_std: float  # the spread the gates judge: run-to-run (see summarize's `groups`)
    rep_rel_std: float  # per-repetition sample std / mean (launch-to-launch jitter), shown, not judged
    groups: int  # consecutive groups whose medians gave rel_std (1: rel_std is the per-repetition spread)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def group_medians(times_ms: Sequence[float], groups: int) -> list[float]:
    """Medians of `groups` consecutive, near-equal slices of the repetitions (in timing order)."""
    n = len(times_ms)
    bounds = [round(i * n / groups) for i in range(groups + 1)]
    return [statistics.median(times_ms[bounds[i]:bounds[i + 1]]) for i in range(groups)]


def summarize(times_ms: Sequence[float], groups: int = 1) -> Summary:
    """Median, p20/p80, mean, min/max and the spread; needs at least 2 repetitions (2 per group).

    With groups >= 2 the judged spread is run-to-run: the relative std of the medians of `groups` consecutive
    slices of the repetitions, so a slow drift or a burst of interference shows while single-launch clock
    jitter (which the median already absorbs) does not. groups = 1 judges the per-repetition spread."""
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    if len(times_ms) < 2 * groups:
        raise ValueError(f"need at least {2 * groups} repetitions for a spread over {groups} groups, "
                         f"got {len(times_ms)}")
    if any(not math.isfinite(t) or t <= 0 for t in times_ms):
        raise ValueError("repetition times must be finite and > 0")
    mean = statistics.fmean(times_ms)
    rep_rel_std = statistics.stdev(times_ms) / mean
    if groups >= 2:
        medians = group_medians(times_ms, groups)
        rel_std = statistics.stdev(medians) / statistics.fmean(medians)
    else:
        rel_std = rep_rel_std
    return Summary(
        reps=len(times_ms),
        median_ms=statistics.median(times_ms),
        p20_ms=percentile(times_ms, 20),
        p80_ms=percentile(times_ms, 80),
        mean_ms=mean,
        min_ms=min(times_ms),
        max_ms=max(times_ms),
        rel_std=rel_std,
        rep_rel_std=rep_rel_std,
        groups=groups,
    )
