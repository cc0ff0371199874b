"""Random serving calls on the GPU: flash_attn_varlen_func and flash_attn_with_kvcache (FA3's names) against the
float32 reference, drawn fresh for every run, beside the fixed cases of tests/test_serving_gpu.py.

- varlen: 1-5 packed sequences whose query and key lengths are drawn apart (0 included, tile edges often), seqused_k
  sometimes, causal or not, a sliding window and soft-capping sometimes, GQA, head dims 64-256;
- KV cache: per-sequence lengths (an int tensor, or one int for all), cache slots (cache_batch_idx) or a paged cache
  (page_table, pages of 16/64/256 tokens in a random order), an append of 0-64 new tokens, decode or a few query rows,
  causal or not, windows, soft-capping. The cache must hold the appended tokens where they belong and nothing else
  may change.
tests/random_judge.py judges each call (the same rule as tests/test_random_shapes_gpu.py). FLASHCORE_FUZZ_SEED=N
repeats a run, FLASHCORE_FUZZ_DRAWS sets the count; every failure names the seed and the draw.
"""

from __future__ import annotations

import math
import os
import random
import secrets
from typing import Any

import pytest
import torch

import flashcore
from flashcore import reference
from tests.random_judge import judge

SEED = int(os.environ.get("FLASHCORE_FUZZ_SEED") or secrets.randbits(31))
DRAWS = int(os.environ.get("FLASHCORE_FUZZ_DRAWS") or 100)
EDGES = (0, 1, 2, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 1000)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def length(rng: random.Random, top: int = 2500) -> int:
    if rng.random() < 0.4:
        return rng.choice(EDGES)
    return int(math.exp(rng.uniform(0.0, math.log(top))))


def features(rng: random.Random) -> dict[str, Any]:
    """What every serving draw shares: input type, heads, head dim, causal, window, softcap."""
    heads_kv = rng.choice((1, 2, 4))
    window = (-1, -1)
    if rng.random() < 0.3:
        window = (rng.choice((-1, 0, 1, 63, 200)), rng.choice((-1, 0, 1, 17, 128)))
    return {"dtype": rng.choice(tuple(DTYPES)), "heads_kv": heads_kv, "heads_q": heads_kv * rng.choice((1, 2, 4)),
            "head_dim": rng.choice((64, 96, 128, 192, 256)), "causal": rng.random() < 0.5, "window": window,
            "softcap": rng.choice((5.0, 30.0)) if rng.random() < 0.3 else 0.0}


def rand(f: dict[str, Any], gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, device="cuda").to(DTYPES[f["dtype"]])


def sequence_refs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  f: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One sequence's reference out [Sq, H, D] and lse [H, Sq], and out when P is rounded as the kernel rounds it."""
    kw = {"causal": f["causal"], "scale": f["head_dim"] ** -0.5, "window": f["window"], "softcap": f["softcap"]}
    ref, ref_lse = reference.sequence(q.float(), k.float(), v.float(), **kw)
    pt, _ = reference.sequence(q.float(), k.float(), v.float(), p_dtype=DTYPES[f["dtype"]], **kw)
    return ref, ref_lse, pt


def describe(f: dict[str, Any]) -> str:
    extra = (" causal" if f["causal"] else "") + (f" window{f['window']}" if f["window"] != (-1, -1) else "")
    extra += f" softcap{f['softcap']:g}" if f["softcap"] else ""
    return f"{f['dtype']} Hq{f['heads_q']} Hkv{f['heads_kv']} D{f['head_dim']}{extra}"


def check_varlen(rng: random.Random, gen: torch.Generator, plant: bool) -> tuple[str, str | None]:
    """One varlen call; plant: the call is made with each sequence's last key dropped (an off-by-one in seqused_k),
    the reference sees them all."""
    f = features(rng)
    n = rng.randint(1, 5)
    lq = [length(rng) for _ in range(n)]
    lk = [length(rng) for _ in range(n)]
    used = [rng.randint(0, x) for x in lk] if rng.random() < 0.3 else None
    what = f"varlen {describe(f)} q{lq} k{lk}" + (f" used{used}" if used else "")
    h, hkv, d = f["heads_q"], f["heads_kv"], f["head_dim"]
    q, k, v = rand(f, gen, sum(lq), h, d), rand(f, gen, sum(lk), hkv, d), rand(f, gen, sum(lk), hkv, d)
    cu_q = [sum(lq[:i]) for i in range(n + 1)]
    cu_k = [sum(lk[:i]) for i in range(n + 1)]

    def index(xs: list[int]) -> torch.Tensor:
        return torch.tensor(xs, dtype=torch.int32, device="cuda")

    given = used
    if plant:
        given = [max(0, x - 1) for x in (lk if used is None else used)]
    out, lse = flashcore.flash_attn_varlen_func(
        q, k, v, index(cu_q), index(cu_k), max(lq), max(lk), seqused_k=None if given is None else index(given),
        causal=f["causal"], window_size=f["window"], softcap=f["softcap"], return_attn_probs=True, debug_checks=True)
    ref = torch.zeros(sum(lq), h, d, device="cuda")
    pt = torch.zeros_like(ref)
    ref_lse = torch.full((h, sum(lq)), -math.inf, device="cuda")
    for b in range(n):
        qs = slice(cu_q[b], cu_q[b + 1])
        ks = slice(cu_k[b], cu_k[b + 1] if used is None else cu_k[b] + used[b])
        ref[qs], ref_lse[:, qs], pt[qs] = sequence_refs(q[qs], k[ks], v[ks], f)
    return what, judge(out, lse, ref, ref_lse, pt, 1e-3)


def check_kvcache(rng: random.Random, gen: torch.Generator, plant: bool) -> tuple[str, str | None]:
    """One KV-cache call; plant: its output's query heads come back in reverse order (a head-mapping bug)."""
    f = features(rng)
    h, hkv, d = f["heads_q"], f["heads_kv"], f["head_dim"]
    batch = rng.randint(1, 4)
    new = rng.choice((0, 0, 1, rng.randint(2, 64)))
    rows = rng.choice((1, 1, rng.randint(2, 300))) if new == 0 else rng.choice((1, new))
    capacity = max(16, new + length(rng, 4000))
    way = rng.choice(("int", "lengths", "slots", "paged", "paged"))
    page = rng.choice((16, 64, 256))
    pages = -(-capacity // page)
    table = slots = None
    if way == "paged":
        capacity = pages * page
        order = torch.randperm(batch * pages + 3, generator=torch.Generator().manual_seed(rng.randrange(1 << 30)))
        table = order[: batch * pages].reshape(batch, pages).to(torch.int32).cuda()
        shape = (batch * pages + 3, page, hkv, d)
    else:
        entries = batch + (rng.randint(1, 2) if way == "slots" else 0)
        shape = (entries, capacity, hkv, d)
        if way == "slots":
            slots = torch.tensor(rng.sample(range(entries), batch), dtype=torch.int32, device="cuda")
    if way == "int":
        lengths = [rng.randint(0, capacity - new)] * batch
    else:
        lengths = [rng.randint(0, capacity - new) for _ in range(batch)]
    k_cache, v_cache = rand(f, gen, *shape), rand(f, gen, *shape)
    q = rand(f, gen, batch, rows, h, d)
    kn = rand(f, gen, batch, new, hkv, d) if new else None
    vn = rand(f, gen, batch, new, hkv, d) if new else None
    what = (f"kvcache {describe(f)} B{batch} Sq{rows} new{new} {way}" + (f" page{page}" if table is not None else "")
            + f" capacity{capacity} lengths{lengths}")

    def logical(cache: torch.Tensor, b: int, end: int) -> torch.Tensor:
        """Sequence b's tokens [0, end) of `cache` (slot, page or entry b)."""
        j = torch.arange(end, device="cuda")
        if table is not None:
            return cache[table[b].long()[j // page], j % page]
        return cache[b if slots is None else int(slots[b]), :end]

    expect_k, expect_v = k_cache.clone(), v_cache.clone()
    if kn is not None and vn is not None:
        for b in range(batch):
            j = torch.arange(lengths[b], lengths[b] + new, device="cuda")
            for cache, x in ((expect_k, kn), (expect_v, vn)):
                if table is not None:
                    cache[table[b].long()[j // page], j % page] = x[b]
                else:
                    cache[b if slots is None else int(slots[b]), j] = x[b]
    seqlens: int | torch.Tensor = lengths[0] if way == "int" else torch.tensor(lengths, dtype=torch.int32,
                                                                              device="cuda")
    out, lse = flashcore.flash_attn_with_kvcache(
        q, k_cache, v_cache, k=kn, v=vn, cache_seqlens=seqlens, cache_batch_idx=slots, page_table=table,
        causal=f["causal"], window_size=f["window"], softcap=f["softcap"], return_softmax_lse=True, debug_checks=True)
    if plant:
        out, lse = out.flip(2), lse.flip(1)
    if not (torch.equal(k_cache, expect_k) and torch.equal(v_cache, expect_v)):
        return what, "the cache after the call is not the cache with the new tokens appended"
    ref = torch.zeros(batch * rows, h, d, device="cuda")
    pt = torch.zeros_like(ref)
    ref_lse = torch.full((h, batch * rows), -math.inf, device="cuda")
    for b in range(batch):
        end = lengths[b] + new
        rs = slice(b * rows, (b + 1) * rows)
        ref[rs], ref_lse[:, rs], pt[rs] = sequence_refs(q[b], logical(expect_k, b, end), logical(expect_v, b, end), f)
    return what, judge(out.reshape(batch * rows, h, d), lse.permute(1, 0, 2).reshape(h, batch * rows), ref, ref_lse,
                       pt, 1e-3)


def run_draws(seed: int, draws: int, plant: bool = False) -> list[str]:
    rng = random.Random(seed)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    failures = []
    for i in range(draws):
        check = check_varlen if i % 2 == 0 else check_kvcache
        what = f"{check.__name__} draw"
        try:
            what, problem = check(rng, gen, plant)
        except Exception as e:  # every drawn call is within the documented limits: a refusal is a finding
            problem = f"raised {type(e).__name__}: {e}"
        print(f"[random-serving] {i + 1}/{draws} {what}: {problem or 'ok'}", flush=True)
        if problem:
            failures.append(f"draw {i}: {what}: {problem}")
    return failures


@pytest.mark.gpu
def test_random_serving_calls_match_the_reference() -> None:
    failures = run_draws(SEED, DRAWS)
    head = f"FLASHCORE_FUZZ_SEED={SEED} ({len(failures)} of {DRAWS} draws failed):\n"
    assert not failures, head + "\n".join(failures)


@pytest.mark.gpu
def test_the_serving_judge_flags_planted_wrong_results() -> None:
    # A fixed seed. The serving entries take no debug_fault, so the test plants the bugs around the call: varlen
    # drops each sequence's last key, the KV cache returns its query heads reversed. A dropped key moves a long
    # sequence's rows less than the bound and one query head has nothing to reverse, so not every draw can tell.
    failures = run_draws(1, 12, plant=True)
    assert len(failures) >= 4, failures
