"""Paged KV caches, head dims 96 and 192 (and 192 with a v of 128), and caches whose rows past a sequence's length
hold NaN, on the H100 against the float32 reference (flashcore/reference.py). Fresh random inputs per case; unused
pages and cache rows are NaN, so a kernel that reads them into a result fails the finiteness check. Page sizes run
from 1 to 256 keys, 16 or not: pages smaller than the 128-key block (odd sizes take 1-row TMA boxes), lengths ending
mid-page and mid-block, pages in shuffled order."""

from __future__ import annotations

import math

import pytest
import torch

import flashcore
from flashcore import reference, serving

pytestmark = pytest.mark.gpu
ATOL, RTOL = 2e-2, 2e-2


def rand(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(dtype)


def close(out: torch.Tensor, ref: torch.Tensor, lse: torch.Tensor, ref_lse: torch.Tensor) -> None:
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, atol=ATOL, rtol=RTOL)
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), seen)
    torch.testing.assert_close(lse[seen], ref_lse[seen], atol=1e-3, rtol=1e-3)


def paged(lengths: list[int], page_size: int, heads: int, d: int, dv: int, spare: int = 5,
          dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """k and v pages [pages, page_size, heads, d|dv] (NaN everywhere no sequence uses, the used pages' tails
    included) and page_table [B, max pages] (entries past a sequence's pages -1, then garbage ids)."""
    per = [max(1, -(-n // page_size)) for n in lengths]
    width = max(per) + 1
    pages = sum(per) + spare
    order = torch.randperm(pages, device="cuda")
    k = torch.full((pages, page_size, heads, d), math.nan, device="cuda", dtype=dtype)
    v = torch.full((pages, page_size, heads, dv), math.nan, device="cuda", dtype=dtype)
    table = torch.full((len(lengths), width), -1, dtype=torch.int32, device="cuda")
    table[:, -1] = 1 << 30  # never read: past every sequence's pages
    used = 0
    for b, n in enumerate(lengths):
        ids = order[used:used + per[b]]
        used += per[b]
        table[b, :per[b]] = ids.to(torch.int32)
        flat_k = rand(per[b] * page_size, heads, d, dtype=dtype)
        flat_v = rand(per[b] * page_size, heads, dv, dtype=dtype)
        flat_k[n:], flat_v[n:] = math.nan, math.nan  # a page's tail past the sequence: stale
        k[ids.long()] = flat_k.view(per[b], page_size, heads, d)
        v[ids.long()] = flat_v.view(per[b], page_size, heads, dv)
    return k, v, table


BF16, FP16 = torch.bfloat16, torch.float16
PAGED = [
    # (lengths, page size, heads q, heads kv, head dim, v head dim, query rows, causal, dtype)
    ([1, 700, 4097, 33, 0, 256], 16, 8, 2, 128, 128, 1, False, BF16),
    ([1, 700, 4097, 33, 0, 256], 256, 8, 2, 128, 128, 1, True, BF16),
    ([130, 8191, 1000], 48, 32, 8, 128, 128, 1, False, BF16),      # a page size that does not divide the tile
    # gathered pages (kernel/paged_gather.cuh) under long caches: split decode, several tiles per CTA (the gather
    # once held an arrival the next tile's loads waited for, and hung there)
    ([130, 8191, 1000], 8, 32, 8, 128, 128, 1, False, BF16),
    ([8191, 4000, 6000, 77], 3, 16, 4, 64, 64, 4, True, FP16),
    ([300, 129, 2000], 64, 4, 4, 128, 128, 5, True, BF16),
    ([5000, 77], 128, 8, 1, 64, 64, 1, False, BF16),                # hdim 64: runs on the 128 kernel
    ([1500, 300], 32, 4, 2, 256, 256, 2, True, BF16),
    ([900, 17], 16, 4, 2, 96, 96, 1, False, BF16),
    ([900, 400], 64, 4, 2, 192, 128, 3, True, BF16),
]
# Every page size a serving stack may take, 16 or not (SGLang runs 1), on each head-dim kernel: lengths of one key,
# ending mid-page and mid-block (BLOCK_N 128 or 80), GQA, decode and a few causal query rows, both 16-bit types.
SMALL_PAGES = [1, 2, 3, 8, 16, 24, 48, 256]
SMALL_PAGE_SHAPES = [
    ([1, 131, 517, 0, 1000], 8, 2, 64, 64, 1, False, BF16),
    ([1, 131, 517, 0, 1000], 8, 2, 128, 128, 1, True, FP16),
    ([259, 1, 77], 16, 4, 128, 128, 4, True, BF16),
    ([1, 300, 161], 4, 2, 256, 256, 3, False, FP16),
    ([255, 2], 8, 1, 256, 256, 1, True, BF16),
]
PAGED += [(lengths, page, *rest) for page in SMALL_PAGES for lengths, *rest in SMALL_PAGE_SHAPES]


@pytest.mark.parametrize("case", PAGED, ids=[f"paged{i}-page{c[1]}" for i, c in enumerate(PAGED)])
def test_paged_cache_matches_reference(case: tuple) -> None:
    lengths, page_size, hq, hkv, d, dv, sq, causal, dtype = case
    k, v, table = paged(lengths, page_size, hkv, d, dv, dtype=dtype)
    q = rand(len(lengths), sq, hq, d, dtype=dtype)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out = torch.full((len(lengths), sq, hq, dv), math.nan, device="cuda", dtype=dtype)
    lse = torch.full((len(lengths), hq, sq), math.nan, device="cuda")
    serving.kvcache(q, k, v, seqlens, page_table=table, causal=causal, debug_checks=False, out=out, lse=lse)
    for b, n in enumerate(lengths):
        kb, vb = reference.cached_keys(k, v, b, n, None, table)
        ref, ref_lse = reference.sequence(q[b], kb, vb, causal=causal, scale=1 / math.sqrt(d))
        close(out[b], ref, lse[b], ref_lse)


# Decode of many sequences, so each CTA runs several tiles: the producer pulls page-table lines into L1 blocks ahead
# of its walk, and the gather warps hold up to two requests' arrivals back (kernel/paged_gather.cuh). Odd lengths end
# mid-page and mid-block; lengths 0 and 1 make tiles of no block and of one (O staged over V then waits for a
# warpgroup whose arrival needs a held one); table rows of no multiple of 32 ids start off a 128-byte line; GQA packed
# (32 query heads on 8), and the split counts a caller may force beside the planner's.
MANY_LENGTHS = [1, 0, 129, 4097, 255, 31, 1023, 2049, 7, 513, 3001, 17] * 4


@pytest.mark.parametrize("splits", [None, 1, 3, 7])
@pytest.mark.parametrize("page_size", [1, 2, 8, 16, 32, 48])
def test_paged_decode_of_many_tiles_matches_reference(page_size: int, splits: int | None) -> None:
    k, v, table = paged(MANY_LENGTHS, page_size, 8, 128, 128)
    q = rand(len(MANY_LENGTHS), 1, 32, 128)
    seqlens = torch.tensor(MANY_LENGTHS, dtype=torch.int32, device="cuda")
    out = torch.full((len(MANY_LENGTHS), 1, 32, 128), math.nan, device="cuda", dtype=torch.bfloat16)
    lse = torch.full((len(MANY_LENGTHS), 32, 1), math.nan, device="cuda")
    serving.kvcache(q, k, v, seqlens, page_table=table, num_splits=splits, debug_checks=False, out=out, lse=lse)
    for b, n in enumerate(MANY_LENGTHS):
        kb, vb = reference.cached_keys(k, v, b, n, None, table)
        ref, ref_lse = reference.sequence(q[b], kb, vb, causal=False, scale=1 / math.sqrt(128))
        close(out[b], ref, lse[b], ref_lse)


def test_paged_append_then_attend_equals_contiguous() -> None:
    lengths = [15, 16, 300]
    k, v, table = paged(lengths, 16, 2, 128, 128)
    q, new_k, new_v = rand(3, 2, 8, 128), rand(3, 2, 2, 128), rand(3, 2, 2, 128)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    # room for the appended tokens: one more page per sequence, in the table's -1 column
    spare = torch.arange(k.shape[0], k.shape[0] + 3, dtype=torch.int32, device="cuda")
    k, v = torch.cat([k, rand(3, 16, 2, 128)]), torch.cat([v, rand(3, 16, 2, 128)])
    for b, n in enumerate(lengths):
        table[b, -(-n // 16)] = spare[b]
    out = flashcore.flash_attn_with_kvcache(q, k, v, new_k, new_v, cache_seqlens=seqlens, page_table=table,
                                            causal=True, debug_checks=True)
    for b, n in enumerate(lengths):
        kb, vb = reference.cached_keys(k, v, b, n + 2, None, table)
        assert torch.equal(kb[n:], new_k[b]) and torch.equal(vb[n:], new_v[b])
        ref, _ = reference.sequence(q[b], kb, vb, causal=True, scale=1 / math.sqrt(128))
        torch.testing.assert_close(out[b].float(), ref, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("splits", [None, 1, 4])
def test_cache_rows_past_the_lengths_may_hold_nan(splits: int | None) -> None:
    """FA3 returns NaN here (its issues 1745, 2374): the masked keys' P is 0, but 0 * NaN in P V is NaN."""
    lengths = [1, 100, 129, 1000, 0]
    k_cache, v_cache = rand(5, 1100, 2, 128), rand(5, 1100, 2, 128)
    for b, n in enumerate(lengths):
        k_cache[b, n:], v_cache[b, n:] = math.nan, math.inf
    q = rand(5, 1, 8, 128)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out, lse = serving.kvcache(q, k_cache, v_cache, seqlens, num_splits=splits)
    for b, n in enumerate(lengths):
        ref, ref_lse = reference.sequence(q[b], k_cache[b, :n], v_cache[b, :n], causal=False,
                                          scale=1 / math.sqrt(128))
        close(out[b], ref, lse[b], ref_lse)


HEAD_DIMS = [(96, 96), (192, 192), (192, 128)]


@pytest.mark.parametrize("dims", HEAD_DIMS, ids=[f"d{d}-v{dv}" for d, dv in HEAD_DIMS])
@pytest.mark.parametrize("shape", [(2, 1000, 1000, 8, 2, True, None), (2, 1, 3000, 8, 2, False, None),
                                   (3, 77, 300, 4, 4, False, 3)], ids=["prefill", "decode", "split"])
def test_head_dims_96_192_match_reference(dims: tuple[int, int], shape: tuple) -> None:
    d, dv = dims
    b, sq, sk, hq, hkv, causal, splits = shape
    q, k, v = rand(b, sq, hq, d), rand(b, sk, hkv, d), rand(b, sk, hkv, dv)
    out = torch.full((b, sq, hq, dv), math.nan, device="cuda", dtype=torch.bfloat16)
    lse = torch.full((b, hq, sq), math.nan, device="cuda")
    flashcore.attention(q, k, v, causal=causal, out=out, lse=lse, num_splits=splits)
    ref, ref_lse = reference.dense(q, k, v, causal=causal, scale=1 / math.sqrt(d))
    close(out, ref, lse, ref_lse)


@pytest.mark.parametrize("dims", HEAD_DIMS, ids=[f"d{d}-v{dv}" for d, dv in HEAD_DIMS])
def test_head_dims_96_192_varlen_and_cache(dims: tuple[int, int]) -> None:
    d, dv = dims
    lq, lk = [300, 1, 0, 64], [300, 700, 5, 64]
    q, k, v = rand(sum(lq), 4, d), rand(sum(lk), 2, d), rand(sum(lk), 2, dv)
    cu_q = torch.tensor([0, 300, 301, 301, 365], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 300, 1000, 1005, 1069], dtype=torch.int32, device="cuda")
    out, lse = serving.varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True)
    ref, ref_lse = reference.varlen(q, k, v, cu_q.tolist(), cu_k.tolist(), None, causal=True, scale=1 / math.sqrt(d))
    close(out, ref, lse, ref_lse)
    caches_k, caches_v = rand(3, 500, 2, d), rand(3, 500, 2, dv)
    qc, lengths = rand(3, 1, 8, d), torch.tensor([499, 1, 250], dtype=torch.int32, device="cuda")
    out, lse = serving.kvcache(qc, caches_k, caches_v, lengths)
    for b, n in enumerate(lengths.tolist()):
        ref, ref_lse = reference.sequence(qc[b], caches_k[b, :n], caches_v[b, :n], causal=False,
                                          scale=1 / math.sqrt(d))
        close(out[b], ref, lse[b], ref_lse)
