"""Sequential rounds: which workloads of a paired measurement get more rounds after the base ones (pure; no torch).

Why: the judged spread of a paired ratio (the relative std of the medians of `spread_groups` consecutive groups of
rounds) is mostly per-round jitter averaged by each median, so it falls with more rounds; most pairs are far below
their limit after half of today's rounds and a few are not. So every workload first gets the base rounds
(gates/bench.yaml timing: target_ms, min_reps, max_reps), then each judged ratio (a `Watch`) is read: a workload
in a ratio spreading more than `extend_above` x that ratio's limit gets extension rounds (its calls alone, numbered
on from the base rounds, the same rotation: harness/bench/timing.py) up to the cap (extend_target_ms,
extend_min_reps, extend_max_reps); its ratios are then judged over all its rounds. A ratio still above its limit
after the cap fails its gate as before. A ratio below the threshold is judged on the base rounds: its spread
there is already within its limit. docs/perf-notes.md ("Sequential rounds") has the replay of the stored runs
that chose the values: with the cap at today's rounds, a spread failure needs the base to be noisy AND the cap's
rounds to be, so no pair fails that the old fixed budget would have passed.

Watches come from the gates' params (harness/bench/selection.py `watches`): per perf gate, FlashCore against each
baseline a check reads on each judged workload (its spread limit, the strictest over the gates); per scaling check,
FlashCore at the judged length against each peak length of the same sweep (per clock cycle when the gate says so).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from harness.bench import paired
from harness.bench.record import Measurement

Key = tuple[str, str]  # (workload, backend)


@dataclass(frozen=True, order=True)
class Watch:
    """A judged paired ratio num / den and the spread its gate allows."""

    num: Key
    den: Key
    limit: float  # the gate's max relative std for this ratio
    per_clock: bool = False  # per SM clock cycle (the scaling gate: FlashCore against itself at two lengths)

    @property
    def workloads(self) -> frozenset[str]:
        return frozenset((self.num[0], self.den[0]))


def strictest(watches: Iterable[Watch]) -> tuple[Watch, ...]:
    """One watch per ratio, the lowest limit where several gates judge it; sorted (a stable, hashable set)."""
    best: dict[tuple[Key, Key, bool], Watch] = {}
    for w in watches:
        k = (w.num, w.den, w.per_clock)
        if k not in best or w.limit < best[k].limit:
            best[k] = w
    return tuple(sorted(best.values()))


def spread(w: Watch, measurements: Mapping[Key, Measurement]) -> float | None:
    """The ratio's judged spread over the rounds so far; None when either side is missing or too thin to say."""
    num, den = measurements.get(w.num), measurements.get(w.den)
    if num is None or den is None or not num.available or not den.available:
        return None
    try:
        r = paired.ratio(num, den, w.per_clock)
    except ValueError:  # a time that is not > 0: the gate's own reading says why; extending cannot help
        return None
    return r.rel_std if r is not None else None


def noisy(measurements: Mapping[Key, Measurement], watches: Iterable[Watch], above: float) -> set[str]:
    """The workloads in a watched ratio whose spread is above `above` x its limit (they get extension rounds).
    A ratio that cannot be read yet (a call crashed, too few common rounds) extends nothing: its gate says why."""
    out: set[str] = set()
    for w in watches:
        s = spread(w, measurements)
        if s is not None and s > above * w.limit:
            out |= w.workloads
    return out


def relevant(watches: Iterable[Watch], keys: Collection[Key]) -> tuple[Watch, ...]:
    """The watches whose two sides are both among `keys` (the calls of one paired measurement)."""
    return tuple(w for w in watches if w.num in keys and w.den in keys)

