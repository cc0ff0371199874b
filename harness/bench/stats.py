"""Summary statistics of per-repetition GPU times and of per-round ratios (pure; no numpy)."""

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


def group_medians(values: Sequence[float], groups: int) -> list[float]:
    """Medians of `groups` consecutive, near-equal slices of the values (in timing order)."""
    n = len(values)
    bounds = [round(i * n / groups) for i in range(groups + 1)]
    return [statistics.median(values[bounds[i]:bounds[i + 1]]) for i in range(groups)]


def run_to_run_spread(values: Sequence[float], groups: int) -> float:
    """The judged spread: relative std of the medians of `groups` consecutive slices (groups >= 2), so a drift
    or a burst of interference shows while single-launch jitter (which each median absorbs) does not; with
    groups = 1, the relative std of the values themselves."""
    if groups >= 2:
        medians = group_medians(values, groups)
        return statistics.stdev(medians) / statistics.fmean(medians)
    return statistics.stdev(values) / statistics.fmean(values)


def _check(values: Sequence[float], groups: int, what: str) -> None:
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    if len(values) < 2 * groups:
        raise ValueError(f"need at least {2 * groups} {what} for a spread over {groups} groups, got {len(values)}")
    if any(not math.isfinite(t) or t <= 0 for t in values):
        raise ValueError(f"{what} must be finite and > 0")


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
    rel_std: float  # run-to-run (see summarize's `groups`); of absolute times: drift-sensitive, shown, not judged
    rep_rel_std: float  # per-repetition sample std / mean (launch-to-launch jitter)
    groups: int  # consecutive groups whose medians gave rel_std (1: rel_std is the per-repetition spread)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(times_ms: Sequence[float], groups: int = 1) -> Summary:
    """Median, p20/p80, mean, min/max and the spread (`run_to_run_spread`); needs 2 repetitions per group."""
    _check(times_ms, groups, "repetitions")
    mean = statistics.fmean(times_ms)
    return Summary(
        reps=len(times_ms),
        median_ms=statistics.median(times_ms),
        p20_ms=percentile(times_ms, 20),
        p80_ms=percentile(times_ms, 80),
        mean_ms=mean,
        min_ms=min(times_ms),
        max_ms=max(times_ms),
        rel_std=run_to_run_spread(times_ms, groups),
        rep_rel_std=statistics.stdev(times_ms) / mean,
        groups=groups,
    )


@dataclass(frozen=True)
class RatioSummary:
    """A ratio measured once per round (e.g. FA2 time / FlashCore time in the same round)."""

    rounds: int
    median: float  # the reported ratio: median of the per-round ratios
    p20: float
    p80: float
    rel_std: float  # the judged spread: run-to-run (relative std of the medians of `groups` consecutive groups)
    round_rel_std: float  # per-round relative std (jitter of single pairs), shown, not judged
    groups: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize_ratios(ratios: Sequence[float], groups: int = 1) -> RatioSummary:
    """Median and spread of per-round ratios, in round order; needs 2 rounds per group."""
    _check(ratios, groups, "paired rounds")
    return RatioSummary(
        rounds=len(ratios),
        median=statistics.median(ratios),
        p20=percentile(ratios, 20),
        p80=percentile(ratios, 80),
        rel_std=run_to_run_spread(ratios, groups),
        round_rel_std=statistics.stdev(ratios) / statistics.fmean(ratios),
        groups=groups,
    )


def theil_sen_slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Median of the pairwise slopes (robust to a minority of outliers); None when x hardly varies."""
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs))
              if abs(xs[j] - xs[i]) > 1e-9]
    if len(slopes) < max(1, len(xs) // 2):
        return None
    return statistics.median(slopes)
