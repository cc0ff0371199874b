"""Paired measurement: the schedule of interleaved rounds, and ratios rebuilt from them (pure; no torch).

Why: the lent H100 runs at its 700 W power cap and its SM clock wanders between ~1440 and 1980 MHz within a
second, in steps; every backend's times drift 3-15 % within one measurement, in step with the clock. Timed one
after another, two backends see different clocks and their ratio carries the drift. Timed in interleaved rounds
(round r: one call of each backend, back to back), both calls of a pair see the same clock, so a clock step
moves both and their per-round ratio stays put. Clocks are not locked (shared machine).

Schedule (`round_order`): the calls of a round are grouped by workload (the backends of one workload back to
back, so each pair is close in time); the starting workload and, within each workload, the starting backend
rotate from round to round, so no backend always runs first (after the flush, after the same neighbour, at
the same phase of a clock step). Mirrored (gates/bench.yaml `timing.mirrored`), a workload's block runs twice,
forward then backward (A B C C B A): whatever the calls' lengths, every call's two runs are centred on the
block's midpoint, so a clock that drifts linearly across the block moves every backend's round time alike.
Without it, a 50 ms call and a 115 ms call two neighbours apart (64K tokens, causal, under the power cap) see
clocks 5-7 % apart from round to round. `rounds_for`: as many rounds as fit the GPU time the calls would
have had one after another (TimingParams.reps_for each), so interleaving never adds repetitions or time.

A call's round time is the sum of its runs in that round (`round_times`), its clock the cycle-weighted mean.
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


def round_order(r: int, layout: Sequence[Sequence[K]], mirrored: bool = False) -> list[K]:
    """The calls of round `r`: `layout` is the calls per workload (each a list of backends' calls); the
    workloads start at r mod W and, within each, the backends at r mod B; `mirrored`: each workload's block
    then runs once more backwards."""
    order: list[K] = []
    for block in _rotate(layout, r):
        forward = _rotate(block, r)
        order += forward + forward[::-1] if mirrored else forward
    return order


# ---- pairs -----------------------------------------------------------------------------------------------


def paired(a: Measurement, b: Measurement) -> bool:
    """Timed in the same rounds: both paired, same pairing id."""
    return a.paired and b.paired and a.pairing == b.pairing


def round_times(rounds: Sequence[int], times_ms: Sequence[float],
                clock_mhz: Sequence[float] = ()) -> dict[int, tuple[float, float | None]]:
    """Per round, in round order: (the call's time, summed over its runs in that round; its SM clock, the
    time-weighted mean of those runs' clocks (Measurement.call_clock_mhz), or None when a reading is missing)."""
    acc: dict[int, list[float]] = {}
    clocked = len(clock_mhz) == len(times_ms)
    for i, r in enumerate(rounds):
        a = acc.setdefault(r, [0.0, 0.0, 1.0])
        a[0] += times_ms[i]
        f = clock_mhz[i] if clocked else 0.0
        a[1] += times_ms[i] * f
        a[2] = a[2] if f > 0 else 0.0
    return {r: (t, (c / t if ok and t > 0 else None)) for r, (t, c, ok) in acc.items()}


def pairs(a: Measurement, b: Measurement) -> list[tuple[tuple[float, float | None], tuple[float, float | None]]] | None:
    """Per round both ran in, in a's round order: (a's round time and clock, b's); None when not paired."""
    if not paired(a, b):
        return None
    ra = round_times(a.rounds, a.times_ms, a.call_clock_mhz())
    rb = round_times(b.rounds, b.times_ms, b.call_clock_mhz())
    return [(ra[r], rb[r]) for r in ra if r in rb]


def _throughput_work(m: Measurement) -> float:
    return float(fl.workload_kv_bytes(m.spec)) if m.unit == "TB/s" else fl.workload_flops(m.spec)


def per_round_ratios(num: Measurement, den: Measurement, per_clock: bool = False) -> list[float] | None:
    """Per round, num's throughput / den's (on one workload: den time / num time); None when not paired.
    `per_clock`: per SM clock cycle, each round time times its clock (None when a reading is missing)."""
    both = pairs(num, den)
    if both is None:
        return None
    scale = _throughput_work(num) / _throughput_work(den) if num.spec != den.spec else 1.0
    if not per_clock:
        return [scale * td / tn for (tn, _), (td, _) in both]
    if any(fn is None or fd is None for (_, fn), (_, fd) in both):
        return None
    return [scale * td * fd / (tn * fn) for (tn, fn), (td, fd) in both]  # type: ignore[operator]


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
    both = pairs(num, den)
    values = per_round_ratios(num, den, per_clock)
    groups = num.spread_groups
    if both is None or values is None or len(values) < 2 * groups:
        return None
    summary = summarize_ratios(values, groups)
    dependence: float | None = None
    clocks: tuple[float, float, float] | None = None
    fixed: float | None = None
    if all(fn is not None and fd is not None for (_, fn), (_, fd) in both):
        f = [math.sqrt(fn * fd) for (_, fn), (_, fd) in both]  # type: ignore[operator]
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
