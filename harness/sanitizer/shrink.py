"""The racecheck run's shape: a workload with fewer batch entries and heads, where that cannot hide a race.

Why it is sound for racecheck only: racecheck reports shared-memory hazards between the threads of one CTA (a write
and a read or write of the same bytes without a barrier between them, tracked through the barriers); it needs the
accesses, not their overlap in time, and the kernel's shared-memory addresses do not depend on which batch entry or
head a tile belongs to. What a CTA does depends on the kernel point (head dim, dtype, tile), the features (causal,
window, softcap, varlen lengths, split-KV, packed GQA), each tile's K/V block count (the sequence lengths) and how
many tiles the persistent CTA runs in turn (the shared-memory ring's reuse from one tile to the next). So the
reduced shape keeps every sequence length (varlen: the whole list; only heads shrink), the GQA ratio and every other
field, and keeps at least `min_tiles_per_sm` query tiles per SM, counted at the tallest tile (the fewest tiles), so
every CTA of the persistent grid still runs several tiles and the split-KV rule, which splits only grids short of
the SMs, still does not split. For equal tiles (dense, no mask) it also keeps whether the kernel cuts a stream-K tail
(kernel/stream_tail.h plan_tail), another kernel instantiation, at every tile height. Workloads whose plan follows
their tile count otherwise run whole: caches (kvcache, paged) and one query tile per head (decode, packed GQA, the
ragged splits). memcheck, synccheck and initcheck always run the whole shape: global-memory bounds depend on all of
it.
"""

from __future__ import annotations

import dataclasses
import functools

from harness.schema import Workload

# Query rows per tile: 64 per consumer warpgroup, 1 to 3 of them (kernel/hopper_config.h kBlockM, its static_assert).
BLOCK_M = (64, 128, 192)
# kernel/stream_tail.h plan_tail: the leftover tiles of the last wave are cut into a tail when they fill at most this
# share of it (kTailMaxFill). tests/test_racecheck_shrink.py checks both against the headers.
TAIL_MAX_FILL = 0.25
LAYOUTS = ("dense", "varlen")  # caches plan by their lengths and one tile per head: never reduced
WHY = "racecheck's shared-memory hazards do not depend on batch or heads"


def fewest_tiles(wl: Workload, block_m: int = BLOCK_M[-1]) -> int:
    """Query tiles of `wl` at `block_m` rows, each sequence its own (varlen: a sequence's empty tiles not counted)."""
    return wl.heads_q * sum(-(-sq // block_m) for sq, _ in wl.sequences)


def tail_cut(tiles: int, ctas: int) -> bool:
    """Whether plan_tail cuts a stream-K tail from `tiles` equal tiles on `ctas` CTAs, given the K/V blocks it also
    asks for (the same in both shapes: the lengths are kept)."""
    rest = tiles % ctas
    return ctas >= 2 and tiles > ctas and 0 < rest <= TAIL_MAX_FILL * ctas


def equal_tiles(wl: Workload) -> bool:
    """Every tile sees every key: the only calls plan_tail plans for (make_plan's `equal`)."""
    return wl.dense and not wl.causal and wl.window == (-1, -1)


def racecheck_shape(wl: Workload, min_tiles_per_sm: int, sms: int) -> Workload:
    """The shape racecheck runs for `wl` on a GPU of `sms` SMs: the fewest batch entries x K/V heads (fewer batch
    entries first) that keep `min_tiles_per_sm` x `sms` tiles and the stream-K tail's presence; `wl` itself when
    nothing smaller qualifies, when `min_tiles_per_sm` is 0 or when its layout or query count is not reduced."""
    batch, heads_kv = _dims(wl, min_tiles_per_sm, sms)
    if (batch, heads_kv) == (wl.batch, wl.heads_kv):
        return wl
    return dataclasses.replace(wl, batch=batch, heads_q=heads_kv * (wl.heads_q // wl.heads_kv), heads_kv=heads_kv)


@functools.lru_cache(maxsize=4096)  # pure: the gate asks for a run's shape to deal, order and run it
def _dims(wl: Workload, min_tiles_per_sm: int, sms: int) -> tuple[int, int]:
    """(batch, K/V heads) of racecheck_shape."""
    floor = min_tiles_per_sm * sms
    if floor <= 0 or wl.layout not in LAYOUTS or wl.seqlen_q <= BLOCK_M[-1] or fewest_tiles(wl) < floor:
        return wl.batch, wl.heads_kv
    group = wl.heads_q // wl.heads_kv

    def keeps(r: Workload) -> bool:
        if fewest_tiles(r) < floor:
            return False
        return not equal_tiles(wl) or all(tail_cut(fewest_tiles(r, m), sms) == tail_cut(fewest_tiles(wl, m), sms)
                                          for m in BLOCK_M)

    batches = range(1, wl.batch + 1) if wl.dense else (wl.batch,)  # varlen: the list of lengths stays whole
    candidates = (dataclasses.replace(wl, batch=b, heads_q=h * group, heads_kv=h)
                  for b in batches for h in range(1, wl.heads_kv + 1))
    best = min((r for r in candidates if keeps(r)), key=lambda r: (r.batch * r.heads_kv, r.batch), default=wl)
    return best.batch, best.heads_kv


def reduced(ran: Workload, wl: Workload) -> bool:
    return (ran.batch, ran.heads_q, ran.heads_kv) != (wl.batch, wl.heads_q, wl.heads_kv)


def describe(ran: Workload, wl: Workload, min_tiles_per_sm: int) -> str:
    """The shape text of a run: `wl`'s label, or for a reduced one both shapes and why, e.g. `B1 H10/10 of B4 H16/16
    S8192x8192 D128 bf16 causal (racecheck's ...; >= 3 tiles per SM)`."""
    if not reduced(ran, wl):
        return wl.label
    return (f"B{ran.batch} H{ran.heads_q}/{ran.heads_kv} of {wl.label} ({WHY}; >= {min_tiles_per_sm} query tiles "
            "per SM kept)")
