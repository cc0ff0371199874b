"""How evenly a dynamic tile order ends on the SMs: a list-scheduling model of the persistent kernel's causal tile
order (kernel/tile_scheduler.h: (batch, head) pairs in sections that fit the L2 budget, query tiles longest first
inside each; an SM takes the next tile when it is free). A tile costs its K/V blocks plus a fixed overhead. Prints
the share of SM time that is busy (1.0: the launch ends with every SM busy), for today's order and for one whose
last `k` sections run as one longest-first run. A model for choosing what to measure (docs/perf-notes.md), not a
measurement:

    python3 bench/tile_order_sim.py
"""

from __future__ import annotations

import heapq

SMS = 132
# name: (pairs = batch x heads, query tiles of 128 rows, pairs per section) of the perf-fa3 causal workloads; the
# sections from kernel/heuristics.h plan_sections at a 50 MB L2 and the H200 table's l2_section_pct (S1K 20 %,
# GQA S4K 33 %, S8K 50 %; S2K the default third), K/V of 128 x 2 bytes a key
SHAPES = {"prefill-s1k-causal": (256, 8, 20), "prefill-s2k-causal": (256, 16, 16),
          "prefill-gqa-causal": (128, 32, 32), "prefill-d128-causal": (64, 64, 6)}


def busy_share(costs: list[float], sms: int = SMS) -> float:
    """Sum of tile costs over (SMs x the time the last SM ends), each tile to the SM free first."""
    ends = [0.0] * sms
    for c in costs:
        heapq.heapreplace(ends, ends[0] + c)
    return sum(costs) / sms / max(ends)


def order(pairs: int, m_tiles: int, section: int, overhead: float, merged_tail: int = 0) -> list[float]:
    """Tile costs in launch order: sections longest first; the last `merged_tail` sections as one section."""
    sections = [list(range(s, min(pairs, s + section))) for s in range(0, pairs, section)]
    if merged_tail > 1:
        sections = [*sections[:-merged_tail], [p for s in sections[-merged_tail:] for p in s]]
    return [m + 1 + overhead for s in sections for m in reversed(range(m_tiles)) for _ in s]


def main() -> None:
    for name, (pairs, m_tiles, section) in SHAPES.items():
        row = [f"k={k}: {busy_share(order(pairs, m_tiles, section, 0.5, k)):.3f}" for k in (1, 2, 3, 4)]
        print(f"{name:22s} sections of {section:3d} pairs  " + "  ".join(row))


if __name__ == "__main__":
    main()
