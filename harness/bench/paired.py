"""Paired measurement: the schedule of interleaved rounds, and ratios rebuilt from them (pure; no torch).

Why: the lent H100 runs at its 700 W power cap and its SM clock wanders between ~1440 and 1980 MHz within a
second, in steps; every backend's times drift 3-15 % within one measurement, in step with the clock. Timed one
after another, two backends see different clocks and their ratio carries the drift. Timed in interleaved rounds
(round r: one call of each backend, back to back), both calls of a pair see the same clock, so a clock step
moves both and their per-round ratio stays put. Clocks are not locked (shared machine).

Schedule (`round_order`): the calls of a round are grouped by workload (the backends of one workload back to
back, so each pair is close in time); the starting workload and, within each workload, the starting backend
rotate from round to round, so no backend always runs first (after the flush, after the same neighbour, at
the same phase of a clock step). `rounds_for`: as many rounds as fit the GPU time the calls would have had
one after another (TimingParams.reps_for each), so interleaving never adds repetitions or time.

Ratios: `speed_ratio(ours, base)` = base time / ours per round (> 1: FlashCore faster); `ratio(a, b)` = a's
throughput / b's per round, also across workloads of the same rounds (the scaling sweep). The reported
value is the median of the per-round ratios; the judged spread is its run-to-run spread (relative std of the
medians of `spread_groups` consecutive groups of rounds). Interference that hits one backend and not the
other (a neighbour's burst during some of FlashCore's calls) moves the per-round ratio and shows in that
spread; a clock step shared by both does not.

Diagnostic, not judged (`clock_dependence`): the slope of ln(ratio) against ln(SM clock) over the rounds. A
pair whose kernels respond alike to the clock (both compute-bound) has ~0; a memory-bound kernel against a
clock-bound one (decode: FlashCore reads DRAM at its roofline, FA2's decode kernel scales with the clock) has
up to ±1, and pairing cannot cancel that part of the drift: the report shows it, with the spread the ratio
would have at a fixed clock.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from harness.bench import flops as fl
from harness.bench.record import Measurement
from harness.bench.stats import RatioSummary, run_to_run_spread, summarize_ratios, theil_sen_slope

K = TypeVar("K")

# ---- schedule ----------------------------------------------------------------------------------------------


def _rotate(items: Sequence[K], by: int) -> list[K]:
    k = by % len(items) if items else 0
    return [*items[k:], *items[:k]]


def round_order(r: int, layout: Sequence[Sequence[K]]) -> list[K]:
    """The calls of round `r`: `layout` is the calls per workload (each a list of backends' calls); the
    workloads start at r mod W and, within each, the backends at r mod B."""
    return [c for block in _rotate(layout, r) for c in _rotate(block, r)]


def warmup_calls(estimate_ms: float, warmup: int, warmup_ms: float) -> int:
    """Untimed calls after the `warmup` timed ones, so that one call's warm-up runs `warmup_ms` of GPU time."""
    return max(0, math.ceil(warmup_ms / max(estimate_ms, 1e-3)) - warmup)


# ---- pairs -----------------------------------------------------------------------------------------------


def paired(a: Measurement, b: Measurement) -> bool:
    """Timed in the same rounds: both paired, same pairing id."""
    return a.paired and b.paired and a.pairing == b.pairing


def _by_round(m: Measurement) -> dict[int, int]:
    return {r: i for i, r in enumerate(m.rounds)}


def pairs(a: Measurement, b: Measurement) -> list[tuple[int, int]] | None:
    """Index pairs (i in a, j in b) of the rounds both ran in, in round order; None when not paired."""
    if not paired(a, b):
        return None
    jb = _by_round(b)
    return [(i, jb[r]) for i, r in enumerate(a.rounds) if r in jb]


def _throughput_work(m: Measurement) -> float:
    return float(fl.workload_kv_bytes(m.spec)) if m.unit == "TB/s" else fl.workload_flops(m.spec)


def per_round_ratios(num: Measurement, den: Measurement, per_clock: bool = False) -> list[float] | None:
    """Per round, num's throughput / den's (on one workload: den time / num time); None when not paired.
    `per_clock`: per SM clock cycle, each call's time times the clock probed right before it (None when a reading
    is missing)."""
    idx = pairs(num, den)
    if idx is None:
        return None
    scale = _throughput_work(num) / _throughput_work(den) if num.spec != den.spec else 1.0
    if not per_clock:
        return [scale * den.times_ms[j] / num.times_ms[i] for i, j in idx]
    if not num.clock_mhz or not den.clock_mhz or any(num.clock_mhz[i] <= 0 or den.clock_mhz[j] <= 0 for i, j in idx):
        return None
    return [scale * den.times_ms[j] * den.clock_mhz[j] / (num.times_ms[i] * num.clock_mhz[i]) for i, j in idx]


@dataclass(frozen=True)
class PairedRatio:
    """num's speed / den's speed, per round, and what the report shows of it."""

    num: str  # "flashcore" or "flashcore@sweep-s32768"
    den: str
    summary: RatioSummary
    clock_dependence: float | None  # d ln(ratio) / d ln(SM clock) (Theil-Sen); None without clock readings
    clock_mhz: tuple[float, float, float] | None  # min, median, max of the pairs' SM clock
    fixed_clock_rel_std: float | None  # the spread once the clock-explained part is removed (diagnostic)

    @property
    def value(self) -> float:
        return self.summary.median

    @property
    def rel_std(self) -> float:
        return self.summary.rel_std


def ratio(num: Measurement, den: Measurement, per_clock: bool = False) -> PairedRatio | None:
    """The paired ratio num's speed / den's speed, or None when they were not timed in the same rounds (or
    have too few common rounds for num's spread groups). `per_clock`: per SM clock cycle (per_round_ratios), for
    one kernel against itself at two sizes (the scaling sweep), where a 0.2 s call at 128K tokens and a 3 ms call
    at 8K see different clocks in the same round under the power cap; None when a clock reading is missing."""
    idx = pairs(num, den)
    values = per_round_ratios(num, den, per_clock)
    groups = num.spread_groups
    if idx is None or values is None or len(values) < 2 * groups:
        return None
    summary = summarize_ratios(values, groups)
    dependence: float | None = None
    clocks: tuple[float, float, float] | None = None
    fixed: float | None = None
    if num.clock_mhz and den.clock_mhz:
        f = [math.sqrt(num.clock_mhz[i] * den.clock_mhz[j]) for i, j in idx]
        if all(c > 0 for c in f):
            clocks = (min(f), statistics.median(f), max(f))
            logs = [math.log(c) for c in f]
            # the clock-dependence diagnostic explains a per-second ratio; a per-cycle one has the clock taken out
            slope = None if per_clock else theil_sen_slope(logs, [math.log(v) for v in values])
            if slope is not None:
                dependence = slope
                e = max(-1.0, min(1.0, slope))  # a kernel's time scales at most like 1/clock
                ref = math.log(clocks[1])
                fixed = run_to_run_spread([v * math.exp(-e * (x - ref)) for v, x in zip(values, logs, strict=True)],
                                          groups)
    return PairedRatio(_label(num, den), _label(den, num), summary, dependence, clocks, fixed)


def _label(m: Measurement, other: Measurement) -> str:
    return m.backend if m.workload == other.workload else f"{m.backend}@{m.workload}"


def speed_ratio(ours: Measurement, base: Measurement) -> PairedRatio | None:
    """FlashCore's speed / the baseline's on one workload (base time / ours, per round)."""
    return ratio(ours, base)


def unpaired_speed_ratio(ours: Measurement, base: Measurement) -> float | None:
    """Base median / ours: what an older (unpaired) record can still show, never judged."""
    o, b = ours.median_ms, base.median_ms
    return b / o if o is not None and b is not None else None
