"""The candidates of one bucket: every point of the search space that the library can run, each checked first."""

from __future__ import annotations

from flashcore.tuning import DEFAULT, ShapeKey, TileConfig, shape_key
from harness.schema import Workload
from harness.tune.settings import Space


def bucket(wl: Workload) -> ShapeKey:
    """The table bucket a workload falls in (flashcore/tuning.py), as flashcore.attention looks it up."""
    return shape_key(wl.head_dim, wl.dtype, wl.causal, wl.heads_q, wl.heads_kv, wl.seqlen_q, wl.seqlen_k)


def candidates(space: Space, compiled: tuple[int, ...], decode: bool = False) -> tuple[list[TileConfig],
                                                                                     list[tuple[TileConfig, str]]]:
    """(valid points, [(rejected point, the rules it breaks)]). DEFAULT is not among them: it is the reference.
    `compiled`: fc_block_n_options for the bucket's head dim; `decode`: a decode bucket, where each split-KV target
    of `space.decode_split_ctas_per_sm` is tried too (at the default tile)."""
    widths: tuple[int, ...] = compiled if isinstance(space.block_n, str) else space.block_n
    points = []
    for bn in widths:
        for schedule in space.schedule:
            for pct in (space.l2_section_pct if schedule == "dynamic" else (0,)):
                points.append(TileConfig(bn, schedule, pct))
    if decode:
        points += [TileConfig(split_ctas_per_sm=t) for t in space.decode_split_ctas_per_sm]
    valid, rejected = [], []
    for p in points:
        bad = p.problems(compiled)
        if bad:
            rejected.append((p, "; ".join(bad)))
        elif p != DEFAULT:
            valid.append(p)
    return valid, rejected
