"""The table entry of one bucket, from the progress records of every tuning shape that falls in it.

A configuration that wins on one shape of a bucket may lose on another (a split-KV choice tuned at batch 1 made
twice the CTAs at batch 2 and ran 0.85x the default there), and the table holds one entry per bucket. So each
candidate is judged on every shape of the bucket: its score is the geometric mean of its paired speedups, and it
replaces the default only when that mean reaches `adopt_min_speedup` and no shape runs it slower than the default by
more than the same margin (speedup >= 1 / adopt_min_speedup). With one shape per bucket this is the one shape's
rule: the best speedup, adopted at `adopt_min_speedup`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from flashcore.tuning import DEFAULT, TileConfig


def shape_speedups(rec: dict[str, Any]) -> dict[TileConfig, float]:
    """Every candidate's paired speedup on one shape: its own timing, else that of the candidate whose launch plan
    it shares (the default's: 1.0). Candidates with a wrong or not bit-identical output, or that failed to time,
    are absent."""
    got: dict[TileConfig, float] = {DEFAULT: 1.0}
    for r in rec["results"]:
        if r["speedup"] is not None:
            got[TileConfig(**r["config"])] = float(r["speedup"])
    for alias in rec.get("same_plan_as", []):
        rep = TileConfig(**alias["as"])
        if rep in got:
            got[TileConfig(**alias["config"])] = got[rep]
    return got


def choose(records: Iterable[dict[str, Any]], adopt_min_speedup: float) -> tuple[TileConfig, float]:
    """(configuration, geometric-mean speedup) for the bucket of `records`; (DEFAULT, 1.0) when no candidate
    qualifies."""
    per_shape = [shape_speedups(r) for r in records]
    if not per_shape:
        return DEFAULT, 1.0
    common = set.intersection(*(set(s) for s in per_shape)) - {DEFAULT}
    best, best_score = DEFAULT, 1.0
    # The first shape's order (the space's, timed candidates before those sharing a plan): a tie keeps the earlier.
    for cand in (c for c in per_shape[0] if c in common):
        speedups = [s[cand] for s in per_shape]
        score = math.exp(sum(math.log(x) for x in speedups) / len(speedups))
        if score >= adopt_min_speedup and min(speedups) >= 1 / adopt_min_speedup and score > best_score:
            best, best_score = cand, score
    return best, best_score
