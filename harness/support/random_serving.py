"""Random serving calls (harness/support/random_calls.py says what is drawn): flash_attn_varlen_func and
flash_attn_with_kvcache, FA3's names, each judged against the float32 reference per sequence.

plant (tests only): the call is made wrong around the kernel, to prove the judge fails it: varlen drops each sequence's
last key (an off-by-one in seqused_k), the KV cache returns its query heads in reverse order (a head-mapping bug).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from harness.support.random_calls import SERVING_EDGES, Failure, describe, length, packed_refs, randn, serving_features
from harness.support.random_judge import Judge, judge, lse_rows, out_rows

if TYPE_CHECKING:
    import torch


def check_varlen(fc: ModuleType, rng: random.Random, gen: torch.Generator, j: Judge, device: str,
                 plant: bool = False) -> tuple[str, str | None]:
    import torch

    f = serving_features(rng)
    n = rng.randint(1, 5)
    lq = [length(rng, SERVING_EDGES, 2500.0) for _ in range(n)]
    lk = [length(rng, SERVING_EDGES, 2500.0) for _ in range(n)]
    used = [rng.randint(0, x) for x in lk] if rng.random() < 0.3 else None
    used_q = [rng.randint(0, x) for x in lq] if rng.random() < 0.3 else None
    what = (f"varlen {describe(f)} q{lq} k{lk}" + (f" used{used}" if used else "")
            + (f" used_q{used_q}" if used_q else ""))
    h, hkv, d = f["heads_q"], f["heads_kv"], f["head_dim"]
    rand = functools.partial(randn, gen, device, f["dtype"])
    q, k, v = rand(sum(lq), h, d), rand(sum(lk), hkv, d), rand(sum(lk), hkv, d)
    cu_q = [sum(lq[:i]) for i in range(n + 1)]
    cu_k = [sum(lk[:i]) for i in range(n + 1)]

    def index(xs: list[int]) -> torch.Tensor:
        return torch.tensor(xs, dtype=torch.int32, device=device)

    given = [max(0, x - 1) for x in (lk if used is None else used)] if plant else used
    out, lse = fc.flash_attn_varlen_func(
        q, k, v, index(cu_q), index(cu_k), max(lq), max(lk), seqused_q=None if used_q is None else index(used_q),
        seqused_k=None if given is None else index(given), causal=f["causal"], window_size=f["window"],
        softcap=f["softcap"], attention_chunk=f["chunk"], return_attn_probs=True, debug_checks=True,
        **({} if device == "cuda" else {"fallback": "sdpa"}))
    # rows past seqused_q are not written (FA3's contract): only the used rows are judged, packed together
    nq = lq if used_q is None else used_q
    rows = torch.cat([torch.arange(cu_q[b], cu_q[b] + nq[b], device=device) for b in range(n)])
    at = [sum(nq[:b]) for b in range(n + 1)]
    seqs = ((slice(at[b], at[b + 1]), slice(cu_q[b], cu_q[b] + nq[b]),
             slice(cu_k[b], cu_k[b + 1] if used is None else cu_k[b] + used[b])) for b in range(n))
    ref, ref_lse, pt = packed_refs(((rs, q[qs], k[ks], v[ks]) for rs, qs, ks in seqs), f, at[-1], device)
    return what, judge(j, out[rows], lse[:, rows], ref, ref_lse, pt)


def check_kvcache(fc: ModuleType, rng: random.Random, gen: torch.Generator, j: Judge, device: str,
                  plant: bool = False) -> tuple[str, str | None]:
    import torch

    f = serving_features(rng)
    h, hkv, d = f["heads_q"], f["heads_kv"], f["head_dim"]
    batch = rng.randint(1, 4)
    new = rng.choice((0, 0, 1, rng.randint(2, 64)))
    rows = rng.choice((1, 1, rng.randint(2, 300))) if new == 0 else rng.choice((1, new))
    capacity = max(16, new + length(rng, SERVING_EDGES, 4000.0))
    way = rng.choice(("int", "lengths", "slots", "paged", "paged"))
    page = rng.choice((1, 3, 8, 16, 24, 64, 256))
    # cache slots with pages (the table has a row per slot); a left-padded cache (contiguous or paged); packed queries
    slotted = way == "slots" or (way == "paged" and rng.random() < 0.3)
    padded = rng.random() < 0.3
    packed = rng.random() < 0.3
    entries = batch + (rng.randint(1, 2) if slotted else 0)
    table = slots = None
    if way == "paged":
        pages = -(-capacity // page)
        capacity = pages * page
        order = torch.randperm(entries * pages + 3, generator=torch.Generator().manual_seed(rng.randrange(1 << 30)))
        table = order[: entries * pages].reshape(entries, pages).to(device=device, dtype=torch.int32)
        shape = (entries * pages + 3, page, hkv, d)
    else:
        shape = (entries, capacity, hkv, d)
    if slotted:
        slots = torch.tensor(rng.sample(range(entries), batch), dtype=torch.int32, device=device)
    lengths = [rng.randint(0, capacity - new)] * batch if way == "int" else [
        rng.randint(0, capacity - new) for _ in range(batch)]
    left = [rng.randint(0, n) for n in lengths] if padded else [0] * batch
    nq = [rows] * batch if not packed else [max(int(b == 0), rng.randint(0, rows)) for b in range(batch)]
    cu = [sum(nq[:b]) for b in range(batch + 1)]
    rand = functools.partial(randn, gen, device, f["dtype"])
    k_cache, v_cache = rand(*shape), rand(*shape)
    q = rand(cu[-1], h, d) if packed else rand(batch, rows, h, d)
    kn = rand(batch, new, hkv, d) if new else None
    vn = rand(batch, new, hkv, d) if new else None
    what = (f"kvcache {describe(f)} B{batch} Sq{nq if packed else rows} new{new} {way}"
            + (" slots" if slotted and way == "paged" else "") + (f" page{page}" if table is not None else "")
            + f" capacity{capacity} lengths{lengths}" + (f" leftpad{left}" if padded else ""))

    def place(b: int, j0: int, j1: int) -> tuple[Any, Any]:
        """The cache index of sequence b's tokens [j0, j1)."""
        t = torch.arange(j0, j1, device=device)
        entry = b if slots is None else int(slots[b])
        if table is not None:
            return table[entry].long()[t // page], t % page
        return entry, t

    expect_k, expect_v = k_cache.clone(), v_cache.clone()
    for b in range(batch):
        if kn is not None and vn is not None:
            expect_k[place(b, lengths[b], lengths[b] + new)] = kn[b]
            expect_v[place(b, lengths[b], lengths[b] + new)] = vn[b]
    index = functools.partial(torch.tensor, dtype=torch.int32, device=device)
    seqlens: int | torch.Tensor = lengths[0] if way == "int" else index(lengths)
    out, lse = fc.flash_attn_with_kvcache(
        q, k_cache, v_cache, k=kn, v=vn, cache_seqlens=seqlens, cache_batch_idx=slots, page_table=table,
        cache_leftpad=index(left) if padded else None, cu_seqlens_q=index(cu) if packed else None,
        max_seqlen_q=max(nq) if packed else None, causal=f["causal"], window_size=f["window"], softcap=f["softcap"],
        attention_chunk=f["chunk"], return_softmax_lse=True, debug_checks=True,
        **({} if device == "cuda" else {"fallback": "sdpa"}))
    if plant:
        out, lse = out.flip(-2), lse.flip(-2 if packed else 1)
    if not (torch.equal(k_cache, expect_k) and torch.equal(v_cache, expect_v)):
        return what, "the cache after the call is not the cache with the new tokens appended"
    ats = (place(b, left[b], lengths[b] + new) for b in range(batch))
    qs = (q[cu[b]:cu[b + 1]] if packed else q[b] for b in range(batch))
    starts = cu if packed else [b * rows for b in range(batch + 1)]
    parts = ((slice(starts[b], starts[b + 1]), qb, expect_k[at], expect_v[at])
             for b, (qb, at) in enumerate(zip(qs, ats, strict=True)))
    ref, ref_lse, pt = packed_refs(parts, f, starts[-1], device)
    if packed:  # already the judge's layout: out [total_q, H, D], lse [H, total_q]
        return what, judge(j, out, lse, ref, ref_lse, pt)
    return what, judge(j, out_rows(out), lse_rows(lse), ref, ref_lse, pt)


def run_serving(fc: ModuleType, seed: int, draws: int, j: Judge, device: str = "cuda",
                progress: Callable[[int, str, str | None], None] | None = None,
                plant: bool = False) -> list[Failure]:
    """`draws` serving calls from `seed`, varlen and KV cache in turn; the failing ones."""
    import torch

    rng = random.Random(seed)
    gen = torch.Generator(device=device).manual_seed(seed)
    failures = []
    for i in range(draws):
        check = check_varlen if i % 2 == 0 else check_kvcache
        what = f"{check.__name__.removeprefix('check_')} (drawn before the error)"
        try:
            what, problem = check(fc, rng, gen, j, device, plant)
        except Exception as e:  # noqa: BLE001 - the draw's verdict
            problem = f"raised {type(e).__name__}: {e}"
        if progress is not None:
            progress(i, what, problem)
        if problem:
            failures.append(Failure("serving", i, what, problem))
    return failures
