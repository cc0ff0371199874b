"""FA3's per-sequence index arguments on the H100 against the float32 reference (flashcore/reference.py): seqused_q
on packed batches (0, 1 and every row used, GQA, causal and not, windows, softcap, head dims 64/128/256, bf16 and
fp16). Fresh random inputs per case; out and lse are poisoned with NaN before the call; the used rows are compared
and the rows past seqused_q must still hold the poison (the kernel never writes them)."""

from __future__ import annotations

import math

import pytest
import torch

from flashcore import reference, serving
from tests.test_serving_gpu import close  # finite used rows, out and lse against the reference, -inf rows exact

pytestmark = pytest.mark.gpu


def rand(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(dtype)


def ints(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device="cuda")


def starts(lengths: list[int]) -> list[int]:
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


def poisoned(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, math.nan, dtype=dtype, device="cuda")


SEQUSED_Q = [
    # (q lengths, k lengths, seqused_q, seqused_k or None, heads q, heads kv, causal, window, softcap)
    ([5, 0, 1, 300, 129, 64], [5, 7, 1, 300, 500, 64], [3, 0, 1, 0, 129, 17], None, 4, 2, True, (-1, -1), 0.0),
    ([5, 0, 1, 300, 129, 64], [9, 0, 3, 260, 129, 700], [5, 0, 0, 299, 1, 64], None, 4, 4, False, (-1, -1), 0.0),
    ([1, 1, 1, 1], [513, 1, 77, 1024], [1, 0, 1, 0], None, 8, 1, True, (-1, -1), 0.0),  # decode-shaped, packed GQA
    ([700, 3, 190], [700, 3, 190], [450, 3, 65], [700, 1, 100], 2, 2, True, (-1, -1), 0.0),
    ([400, 257], [400, 300], [129, 256], [399, 300], 2, 1, True, (100, 0), 0.0),
    ([333, 129], [333, 600], [200, 64], None, 4, 2, False, (64, 17), 0.0),
    ([300, 45], [512, 45], [1, 45], [512, 20], 4, 4, True, (-1, -1), 30.0),
]


@pytest.mark.parametrize("splits", [None, 3], ids=["auto", "split3"])  # 3: the combine's packed, used rows
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("case", SEQUSED_Q, ids=[f"seqused_q{i}" for i in range(len(SEQUSED_Q))])
def test_seqused_q_matches_the_reference_of_the_used_rows(case: tuple, d: int, dtype: torch.dtype,
                                                          splits: int | None) -> None:
    lq, lk, uq, uk, hq, hkv, causal, window, cap = case
    total_q = sum(lq) + 3  # 3 rows in no sequence
    q = rand(total_q, hq, d, dtype=dtype)
    k, v = rand(sum(lk), hkv, d, dtype=dtype), rand(sum(lk), hkv, d, dtype=dtype)
    out, lse = poisoned(total_q, hq, d, dtype=dtype), poisoned(hq, total_q, dtype=torch.float32)
    serving.varlen(q, k, v, ints(starts(lq)), ints(starts(lk)), max(lq), max(lk), seqused_q=ints(uq),
                   seqused_k=None if uk is None else ints(uk), causal=causal, window_size=window, softcap=cap,
                   out=out, lse=lse, num_splits=splits)
    cq, ck = starts(lq), starts(lk)
    written = torch.zeros(total_q, dtype=torch.bool, device="cuda")
    for b in range(len(lq)):
        rows = slice(cq[b], cq[b] + uq[b])
        keys = slice(ck[b], ck[b] + (lk[b] if uk is None else uk[b]))
        ref, ref_lse = reference.sequence(q[rows], k[keys], v[keys], causal=causal, scale=1 / math.sqrt(d),
                                          window=window, softcap=cap)
        close(out[rows], ref, lse[:, rows], ref_lse)
        written[rows] = True
    assert out[~written].isnan().all() and lse[:, ~written].isnan().all()


def test_seqused_q_on_the_repeat_call_path_reads_the_new_counts() -> None:
    lq, dtype = [64, 200], torch.bfloat16
    q, k = rand(sum(lq), 4, 128, dtype=dtype), rand(sum(lq), 2, 128, dtype=dtype)
    cu = ints(starts(lq))
    for used in ([64, 200], [10, 3], [0, 199]):  # one signature: the second and third calls take the fast path
        out, lse = serving.varlen(q, k, k, cu, cu, max(lq), max(lq), seqused_q=ints(used), causal=True)
        for b, n in enumerate(used):
            rows = slice(starts(lq)[b], starts(lq)[b] + n)
            ref, ref_lse = reference.sequence(q[rows], k[starts(lq)[b]:starts(lq)[b + 1]],
                                              k[starts(lq)[b]:starts(lq)[b + 1]], causal=True, scale=128 ** -0.5)
            close(out[rows], ref, lse[:, rows], ref_lse)


def paged(caches: torch.Tensor, page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """caches [B_cache, S, H, D] in shuffled pages of `page_size` rows (S a multiple of it, spare pages of noise):
    (pages [n, page_size, H, D], page_table int32 [B_cache, S // page_size])."""
    slots, s = caches.shape[:2]
    per = s // page_size
    order = torch.randperm(slots * per + 3, device="cuda")[:slots * per]
    pages = torch.randn(slots * per + 3, page_size, *caches.shape[2:], device="cuda").to(caches.dtype)
    pages[order] = caches.reshape(slots * per, page_size, *caches.shape[2:])
    return pages, order.reshape(slots, per).to(torch.int32)


SLOTTED_PAGES = [
    # (cache_seqlens, cache_batch_idx, page size, new tokens, heads q, heads kv, sq, causal, window, softcap)
    ([1, 300, 0, 257, 64], [5, 0, 3, 2, 4], 16, 0, 8, 2, 1, True, (-1, -1), 0.0),  # ending mid-page, decode GQA
    ([17, 511, 100], [1, 4, 2], 64, 0, 4, 4, 7, True, (-1, -1), 0.0),
    ([33, 200, 7], [3, 3, 0], 16, 5, 4, 1, 5, True, (64, 0), 0.0),  # two sequences on one slot's row, an append
    ([129, 48], [2, 1], 32, 0, 2, 2, 129, False, (-1, -1), 20.0),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("case", SLOTTED_PAGES, ids=[f"slotted_pages{i}" for i in range(len(SLOTTED_PAGES))])
def test_page_table_with_cache_batch_idx_matches_the_reference(case: tuple, d: int, dtype: torch.dtype) -> None:
    lengths, slots, page_size, new, hq, hkv, sq, causal, window, cap = case
    if new and len(set(slots)) < len(slots):  # two appends into one slot's pages would race, as in FA3
        slots = list(range(len(slots)))
    batch, capacity = len(lengths), 512
    k_slots, v_slots = rand(6, capacity, hkv, d, dtype=dtype), rand(6, capacity, hkv, d, dtype=dtype)
    k_pages, table = paged(k_slots, page_size)
    v_pages = torch.empty_like(k_pages)
    v_pages[table.flatten().long()] = v_slots.reshape(-1, page_size, hkv, d)
    q = rand(batch, sq, hq, d, dtype=dtype)
    k_new, v_new = rand(batch, new, hkv, d, dtype=dtype), rand(batch, new, hkv, d, dtype=dtype)
    for b, s in enumerate(slots):  # the reference's copy of the cache after the append
        k_slots[s, lengths[b]:lengths[b] + new], v_slots[s, lengths[b]:lengths[b] + new] = k_new[b], v_new[b]
    out, lse = poisoned(batch, sq, hq, d, dtype=dtype), poisoned(batch, hq, sq, dtype=torch.float32)
    serving.kvcache(q, k_pages, v_pages, ints(lengths), k=k_new if new else None, v=v_new if new else None,
                    cache_batch_idx=ints(slots), page_table=table, causal=causal, window_size=window, softcap=cap,
                    out=out, lse=lse)
    for b, s in enumerate(slots):
        n = lengths[b] + new
        ref, ref_lse = reference.sequence(q[b], k_slots[s, :n], v_slots[s, :n], causal=causal,
                                          scale=1 / math.sqrt(d), window=window, softcap=cap)
        close(out[b], ref, lse[b], ref_lse)


LEFTPAD = [
    # (cache_seqlens, cache_leftpad, cache_batch_idx or None, new tokens, heads q, heads kv, sq, causal, window, cap)
    ([1, 700, 300, 257], [0, 13, 300, 129], None, 0, 8, 2, 1, True, (-1, -1), 0.0),  # a sequence with no key left
    ([400, 129, 64], [1, 128, 0], [3, 0, 1], 0, 4, 4, 130, True, (-1, -1), 0.0),
    ([90, 512], [45, 100], [1, 2], 3, 4, 1, 3, True, (100, 0), 0.0),  # the append lands after the padding
    ([333, 200], [33, 199], None, 0, 2, 2, 64, False, (17, 9), 0.0),
    ([600, 45], [5, 0], None, 0, 4, 2, 2, True, (-1, -1), 30.0),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("case", LEFTPAD, ids=[f"leftpad{i}" for i in range(len(LEFTPAD))])
def test_cache_leftpad_matches_the_reference_of_the_rows_after_the_padding(case: tuple, d: int,
                                                                           dtype: torch.dtype) -> None:
    lengths, pads, slots, new, hq, hkv, sq, causal, window, cap = case
    batch, capacity = len(lengths), 1024
    entries = batch if slots is None else 4
    k_cache, v_cache = rand(entries, capacity, hkv, d, dtype=dtype), rand(entries, capacity, hkv, d, dtype=dtype)
    q = rand(batch, sq, hq, d, dtype=dtype)
    k_new, v_new = rand(batch, new, hkv, d, dtype=dtype), rand(batch, new, hkv, d, dtype=dtype)
    out, lse = poisoned(batch, sq, hq, d, dtype=dtype), poisoned(batch, hq, sq, dtype=torch.float32)
    serving.kvcache(q, k_cache, v_cache, ints(lengths), k=k_new if new else None, v=v_new if new else None,
                    cache_batch_idx=None if slots is None else ints(slots), cache_leftpad=ints(pads), causal=causal,
                    window_size=window, softcap=cap, out=out, lse=lse)
    for b in range(batch):
        s = b if slots is None else slots[b]
        keys = slice(pads[b], lengths[b] + new)  # the masks align to these keys, as FA3's seqlen_k - leftpad_k
        ref, ref_lse = reference.sequence(q[b], k_cache[s, keys], v_cache[s, keys], causal=causal,
                                          scale=1 / math.sqrt(d), window=window, softcap=cap)
        close(out[b], ref, lse[b], ref_lse)


PACKED_Q = [
    # (q lengths, cache_seqlens, new, page size or 0, slots or None, leftpad or None, hq, hkv, causal, window, cap)
    ([1, 4, 0, 3, 1], [5, 300, 2, 16, 0], 0, 16, None, None, 8, 2, True, (-1, -1), 0.0),  # spec-decode shaped
    ([2, 2, 2], [7, 0, 200], 2, 0, [3, 0, 1], None, 4, 1, True, (-1, -1), 0.0),  # 2 drafts appended per sequence
    ([300, 1, 129], [100, 400, 0], 0, 0, None, [40, 0, 0], 4, 4, False, (64, 3), 0.0),
    ([257, 64], [256, 77], 0, 32, [1, 0], None, 4, 2, True, (-1, -1), 25.0),  # chunked prefill into pages
    ([200, 33], [48, 300], 33, 16, [0, 2], None, 2, 2, True, (100, 0), 0.0),  # a chunk appended into pages
]


@pytest.mark.parametrize("splits", [None, 3], ids=["auto", "split3"])  # 3: the combine's packed rows
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("case", PACKED_Q, ids=[f"packed_q{i}" for i in range(len(PACKED_Q))])
def test_packed_queries_into_a_cache_match_the_reference(case: tuple, d: int, dtype: torch.dtype,
                                                         splits: int | None) -> None:
    lq, lengths, new, page_size, slots, pads, hq, hkv, causal, window, cap = case
    batch, capacity = len(lq), 512
    entries = batch if slots is None else 4
    k_slots, v_slots = rand(entries, capacity, hkv, d, dtype=dtype), rand(entries, capacity, hkv, d, dtype=dtype)
    k_cache, v_cache, table = k_slots.clone(), v_slots.clone(), None
    if page_size:
        k_cache, table = paged(k_slots, page_size)
        v_cache = torch.empty_like(k_cache)
        v_cache[table.flatten().long()] = v_slots.reshape(-1, page_size, hkv, d)
    k_new, v_new = rand(batch, new, hkv, d, dtype=dtype), rand(batch, new, hkv, d, dtype=dtype)
    total_q = sum(lq) + 3  # 3 rows in no sequence
    q = rand(total_q, hq, d, dtype=dtype)
    out, lse = poisoned(total_q, hq, d, dtype=dtype), poisoned(hq, total_q, dtype=torch.float32)
    serving.kvcache(q, k_cache, v_cache, ints(lengths), k=k_new if new else None, v=v_new if new else None,
                    cache_batch_idx=None if slots is None else ints(slots), page_table=table,
                    cache_leftpad=None if pads is None else ints(pads), cu_seqlens_q=ints(starts(lq)),
                    max_seqlen_q=max(lq), causal=causal, window_size=window, softcap=cap, out=out, lse=lse,
                    num_splits=splits)
    cq = starts(lq)
    for b in range(batch):
        s = b if slots is None else slots[b]
        k_slots[s, lengths[b]:lengths[b] + new], v_slots[s, lengths[b]:lengths[b] + new] = k_new[b], v_new[b]
        keys = slice(0 if pads is None else pads[b], lengths[b] + new)
        rows = slice(cq[b], cq[b + 1])
        ref, ref_lse = reference.sequence(q[rows], k_slots[s, keys], v_slots[s, keys], causal=causal,
                                          scale=1 / math.sqrt(d), window=window, softcap=cap)
        close(out[rows], ref, lse[:, rows], ref_lse)
    assert out[sum(lq):].isnan().all() and lse[:, sum(lq):].isnan().all()  # rows in no sequence: not written


@pytest.mark.parametrize("extra", [
    ["--layout", "varlen", "--seqlens-q", "200,1,64", "--seqlens-k", "300,3,64", "--seqused-q", "0,1,63",
     "--causal"],
    ["--layout", "kvcache", "--seqlens-k", "1,300,77", "--leftpad-k", "1,13,0", "--causal"],
])
def test_driver_runs_used_counts_and_padding(extra: list[str]) -> None:
    """The sanitizer and ncu gates' way in: the driver's --seqused-q and --leftpad-k launch and finish."""
    from tests.conftest import run_driver

    proc = run_driver(["--batch", "3", "--heads-q", "4", "--heads-kv", "2", "--seqlen-q", "200", "--seqlen-k",
                       "300", "--head-dim", "128", "--dtype", "bf16", "--iters", "2", *extra])
    assert proc.returncode == 0 and "RESULT status=ok" in proc.stdout, proc.stdout + proc.stderr


def test_packed_queries_and_padding_on_the_repeat_call_path_read_the_new_arrays() -> None:
    """One signature three times (the second and third calls take the fast path): new offsets' values, lengths and
    padding are read from the device arrays of each call."""
    dtype, d = torch.bfloat16, 128
    k_cache, v_cache = rand(2, 256, 2, d, dtype=dtype), rand(2, 256, 2, d, dtype=dtype)
    q = rand(6, 4, d, dtype=dtype)
    for lq, lengths, pads in (([3, 3], [200, 50], [0, 10]), ([1, 5], [7, 256], [7, 100]), ([6, 0], [9, 1], [2, 0])):
        out, lse = serving.kvcache(q, k_cache, v_cache, ints(lengths), cache_leftpad=ints(pads),
                                   cu_seqlens_q=ints(starts(lq)), max_seqlen_q=6, causal=True)
        for b, rows in enumerate(slice(s, s + n) for s, n in zip(starts(lq), lq, strict=False)):
            keys = slice(pads[b], lengths[b])
            ref, ref_lse = reference.sequence(q[rows], k_cache[b, keys], v_cache[b, keys], causal=True,
                                              scale=d ** -0.5)
            close(out[rows], ref, lse[:, rows], ref_lse)
