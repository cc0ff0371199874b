"""FA3's per-sequence index arguments without a GPU: seqused_q on packed batches (its checks, its debug checks of
values, the CPU fallback against the float32 reference sequence by sequence, the rows it leaves unwritten), and the
one list of index-array fields that the C mirror, the launch parameters and the repeat-call path share."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

import flashcore
from flashcore import _lib, check_serving, fastpath, launch, reference, serving
from flashcore.errors import FlashCoreError


def rand(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


def ints(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def offsets(lengths: list[int]) -> torch.Tensor:
    return ints([0, *torch.tensor(lengths).cumsum(0).tolist()])


def used_rows(lengths: list[int], used: list[int]) -> list[slice]:
    starts = offsets(lengths).tolist()[:-1]
    return [slice(s, s + n) for s, n in zip(starts, used, strict=True)]


SEQUSED_Q = [
    # (q lengths, k lengths, seqused_q, seqused_k, heads q, heads kv, causal, window, softcap)
    ([5, 3, 1, 8], [6, 3, 9, 8], [2, 3, 0, 8], None, 4, 2, True, (-1, -1), 0.0),
    ([5, 3, 1, 8], [6, 3, 9, 8], [5, 0, 1, 1], [6, 1, 4, 0], 4, 4, False, (-1, -1), 0.0),
    ([7, 7], [7, 12], [4, 7], [7, 5], 2, 1, True, (2, 0), 0.0),
    ([9, 4], [9, 4], [3, 4], None, 4, 2, False, (1, 2), 7.0),
    ([1], [1], [1], None, 2, 2, True, (-1, -1), 0.0),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", SEQUSED_Q, ids=[f"seqused_q{i}" for i in range(len(SEQUSED_Q))])
def test_seqused_q_fallback_matches_the_reference_of_the_used_rows(case: tuple, dtype: torch.dtype) -> None:
    lq, lk, uq, uk, hq, hkv, causal, window, cap = case
    q, k, v = rand(sum(lq), hq, 64, dtype=dtype), rand(sum(lk), hkv, 64, dtype=dtype), rand(sum(lk), hkv, 64,
                                                                                             dtype=dtype)
    out, lse = flashcore.flash_attn_varlen_func(q, k, v, offsets(lq), offsets(lk), max(lq), max(lk),
                                                seqused_q=ints(uq), seqused_k=None if uk is None else ints(uk),
                                                causal=causal, window_size=window, softcap=cap,
                                                return_attn_probs=True, fallback="sdpa", debug_checks=True)
    keys = used_rows(lk, uk if uk is not None else lk)
    for rows, ks in zip(used_rows(lq, uq), keys, strict=True):
        # The sequence is its used rows: the diagonal is bottom-right aligned to them (FA3's seqlen_q = seqused_q).
        ref, ref_lse = reference.sequence(q[rows], k[ks], v[ks], causal=causal, scale=1 / 8, window=window,
                                          softcap=cap)
        torch.testing.assert_close(out[rows].float(), ref, atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(lse[:, rows], ref_lse)


def test_seqused_q_rows_past_the_used_count_are_left_as_they_were() -> None:
    lq, uq = [4, 5], [1, 0]
    q, k = rand(sum(lq), 2, 64), rand(sum(lq), 2, 64)
    out = torch.full((sum(lq), 2, 64), math.nan, dtype=torch.bfloat16)
    lse = torch.full((2, sum(lq)), math.nan)
    serving.varlen(q, k, k, offsets(lq), offsets(lq), 5, 5, seqused_q=ints(uq), causal=True, fallback="sdpa",
                   out=out, lse=lse)
    assert torch.isfinite(out[0]).all() and torch.isfinite(lse[:, 0]).all()
    assert out[1:].isnan().all() and lse[:, 1:].isnan().all()


def test_seqused_q_equal_to_the_lengths_is_the_call_without_it() -> None:
    lq, lk = [3, 6], [5, 6]
    q, k, v = rand(9, 4, 64), rand(11, 2, 64), rand(11, 2, 64)
    args = (q, k, v, offsets(lq), offsets(lk), 6, 6)
    want = serving.varlen(*args, causal=True, fallback="sdpa")
    got = serving.varlen(*args, seqused_q=ints(lq), causal=True, fallback="sdpa")
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("bad,match", [
    (ints([1, 2]).long(), "seqused_q has dtype"),
    (ints([1]), "seqused_q has dtype .* shape"),
    ([1, 2], "seqused_q must be a torch.Tensor"),
])
def test_seqused_q_tensor_is_checked(bad: object, match: str) -> None:
    q = rand(7, 2, 64)
    with pytest.raises(FlashCoreError, match=match):
        serving.varlen(q, q, q, offsets([3, 4]), offsets([3, 4]), 4, 4, seqused_q=bad, fallback="sdpa")


@pytest.mark.parametrize("used,match", [([4, 0], r"seqused_q\[0\] is 4: expected 0 \.\. 3"),
                                        ([1, -1], r"seqused_q\[1\] is -1")])
def test_seqused_q_values_are_checked_with_debug_checks(used: list[int], match: str) -> None:
    q = rand(7, 2, 64)
    with pytest.raises(FlashCoreError, match=match):
        serving.varlen(q, q, q, offsets([3, 4]), offsets([3, 4]), 4, 4, seqused_q=ints(used), fallback="sdpa",
                       debug_checks=True)


def test_index_arrays_are_one_list_shared_by_the_mirror_the_call_and_the_launch() -> None:
    c_fields = dict(_lib.FcParams._fields_)
    assert all(c_fields[name] is _lib.ctypes.c_void_p for name in _lib.INDEX_ARRAYS)
    header = (Path(__file__).resolve().parent.parent / "kernel" / "flashcore.h").read_text()
    assert all(re.search(rf"^\s+const int32_t\* {name};", header, re.M) for name in _lib.INDEX_ARRAYS)
    assert set(_lib.INDEX_ARRAYS) <= _lib.ARRAY_FIELDS
    q = rand(7, 2, 64)
    call = check_serving.varlen(q, q, q, offsets([3, 4]), offsets([3, 4]), 4, 4, seqused_q=ints([2, 4]),
                                seqused_k=ints([3, 1]), causal=True, softmax_scale=None, window_size=(-1, -1),
                                softcap=0.0, deterministic=False, fallback="sdpa", out=None, lse=None)
    arrays = call.index_arrays()
    assert set(arrays) <= set(_lib.INDEX_ARRAYS)
    p = launch.params(call, torch.empty_like(q), None)
    for name in _lib.INDEX_ARRAYS:
        t = arrays.get(name)
        assert getattr(p, name) == (None if t is None else t.data_ptr()), name
    # fc_plan's key knows that seqused_q is set, not where it lives
    other = launch.params(call, torch.empty_like(q), None)
    other.seqused_q = p.seqused_q + 64
    assert launch.plan_key(p, 0) == launch.plan_key(other, 0)
    other.seqused_q = None
    assert launch.plan_key(p, 0) != launch.plan_key(other, 0)


def test_repeat_call_key_tells_seqused_q_given_from_absent() -> None:
    q, cu = rand(7, 2, 64), offsets([3, 4])
    args = (4, 4, True, None, (-1, -1), 0.0, False, "error")
    with_used = fastpath.serving_signature("varlen", (q, q, q, cu, cu, ints([1, 2]), None), args)
    without = fastpath.serving_signature("varlen", (q, q, q, cu, cu, None, None), args)
    assert with_used is not None and with_used != without


def test_the_serving_argument_recipe_names_files_that_exist() -> None:
    design = (Path(__file__).resolve().parent.parent / "docs" / "design.md").read_text()
    start = design.index("- **A serving argument**")
    recipe = design[start:design.index("\n- **", start + 1)]
    paths = re.findall(r"`((?:kernel|flashcore|harness|gates|tests)/[\w./-]+)`", recipe)
    assert len(paths) >= 15
    root = Path(__file__).resolve().parent.parent
    assert [p for p in paths if not (root / p).exists()] == []


def paged(caches: torch.Tensor, page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """caches [B_cache, S, H, D] in shuffled pages of `page_size` rows (S a multiple of it, one spare page):
    (pages [n, page_size, H, D], page_table int32 [B_cache, S // page_size])."""
    slots, s = caches.shape[:2]
    per = s // page_size
    order = torch.randperm(slots * per + 1)[:slots * per]
    pages = rand(slots * per + 1, page_size, *caches.shape[2:])
    pages[order] = caches.reshape(slots * per, page_size, *caches.shape[2:])
    return pages, order.reshape(slots, per).to(torch.int32)


@pytest.mark.parametrize("causal,window,cap", [(True, (-1, -1), 0.0), (False, (3, 1), 0.0), (True, (-1, -1), 6.0)])
def test_page_table_with_cache_batch_idx_reads_the_slots_row(causal: bool, window: tuple[int, int],
                                                              cap: float) -> None:
    k_slots, v_slots = rand(5, 48, 2, 64), rand(5, 48, 2, 64)
    k_pages, table = paged(k_slots, 16)
    v_pages = torch.empty_like(k_pages)
    v_pages[table.flatten().long()] = v_slots.reshape(15, 16, 2, 64)
    q, lengths, slots = rand(3, 2, 4, 64), ints([17, 48, 1]), ints([4, 0, 2])
    out, lse = flashcore.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=lengths, cache_batch_idx=slots,
                                                 page_table=table, causal=causal, window_size=window, softcap=cap,
                                                 return_softmax_lse=True, fallback="sdpa", debug_checks=True)
    for b, (n, s) in enumerate(zip(lengths.tolist(), slots.tolist(), strict=True)):
        ref, ref_lse = reference.sequence(q[b], k_slots[s, :n], v_slots[s, :n], causal=causal, scale=1 / 8,
                                          window=window, softcap=cap)
        torch.testing.assert_close(out[b].float(), ref, atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(lse[b], ref_lse)


def test_append_through_cache_batch_idx_writes_the_slots_pages() -> None:
    k_pages, table = paged(rand(4, 32, 2, 64), 16)
    v_pages = rand(*k_pages.shape)
    before_k = k_pages.clone()
    q, new_k, new_v = rand(2, 3, 4, 64), rand(2, 3, 2, 64), rand(2, 3, 2, 64)
    lengths, slots = ints([14, 0]), ints([3, 1])
    flashcore.flash_attn_with_kvcache(q, k_pages, v_pages, new_k, new_v, cache_seqlens=lengths, cache_batch_idx=slots,
                                      page_table=table, causal=True, fallback="sdpa", debug_checks=True)
    written = set()
    for b, (n, s) in enumerate(zip(lengths.tolist(), slots.tolist(), strict=True)):
        for i in range(3):
            page, row = int(table[s, (n + i) // 16]), (n + i) % 16
            assert torch.equal(k_pages[page, row], new_k[b, i]) and torch.equal(v_pages[page, row], new_v[b, i])
            written.add((page, row))
    untouched = [(p, r) for p in range(k_pages.shape[0]) for r in range(16) if (p, r) not in written]
    assert all(torch.equal(k_pages[p, r], before_k[p, r]) for p, r in untouched)


def test_cache_batch_idx_with_a_page_table_is_checked_against_its_rows() -> None:
    k_pages, table = paged(rand(3, 32, 2, 64), 16)
    q = rand(2, 1, 4, 64)
    with pytest.raises(FlashCoreError, match=r"cache_batch_idx has values outside \[0, 3\) \(page_table.shape\[0\]\)"):
        serving.kvcache(q, k_pages, k_pages, ints([3, 4]), cache_batch_idx=ints([0, 3]), page_table=table,
                        fallback="sdpa", debug_checks=True)
    bad = table.clone()
    bad[2, 1] = 99
    with pytest.raises(FlashCoreError, match=r"page_table\[2\] names page 99 \(the row cache_batch_idx\[1\]"):
        serving.kvcache(q, k_pages, k_pages, ints([3, 20]), cache_batch_idx=ints([0, 2]), page_table=bad,
                        fallback="sdpa", debug_checks=True)
    with pytest.raises(FlashCoreError, match=r"page_table has dtype torch.int32 and shape \(3, 2\): expected "
                                             r"torch.int32 \[2, max_pages"):  # without slots: one row per sequence
        serving.kvcache(q, k_pages, k_pages, ints([3, 4]), page_table=table, fallback="sdpa")


LEFTPAD = [
    # (cache_seqlens, cache_leftpad, cache_batch_idx or None, new tokens, heads q, heads kv, sq, causal, window, cap)
    ([9, 20, 4], [3, 0, 4], None, 0, 4, 2, 1, True, (-1, -1), 0.0),
    ([9, 20, 4], [8, 19, 2], [2, 0, 4], 0, 4, 4, 3, True, (-1, -1), 0.0),
    ([5, 12, 0], [5, 2, 0], [1, 3, 0], 2, 4, 2, 2, True, (2, 0), 0.0),  # appended tokens behind the padding
    ([16, 7, 3], [1, 6, 3], None, 0, 2, 1, 4, False, (1, 2), 5.0),
]


@pytest.mark.parametrize("case", LEFTPAD, ids=[f"leftpad{i}" for i in range(len(LEFTPAD))])
def test_cache_leftpad_fallback_attends_to_the_rows_after_the_padding(case: tuple) -> None:
    lengths, pads, slots, new, hq, hkv, sq, causal, window, cap = case
    batch = len(lengths)
    entries = batch if slots is None else 5
    k_cache, v_cache = rand(entries, 24, hkv, 64), rand(entries, 24, hkv, 64)
    q = rand(batch, sq, hq, 64)
    kv = {"k": rand(batch, new, hkv, 64), "v": rand(batch, new, hkv, 64)} if new else {}
    out, lse = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, **kv, cache_seqlens=ints(lengths),
                                                 cache_leftpad=ints(pads), cache_batch_idx=None if slots is None
                                                 else ints(slots), causal=causal, window_size=window, softcap=cap,
                                                 return_softmax_lse=True, fallback="sdpa", debug_checks=True)
    for b in range(batch):
        s = b if slots is None else slots[b]
        if new:  # written at cache_seqlens, after the sequence's tokens (FA3's append)
            assert torch.equal(k_cache[s, lengths[b]:lengths[b] + new], kv["k"][b])
        keys = slice(pads[b], lengths[b] + new)  # causal and window masks align to these keys (FA3)
        ref, ref_lse = reference.sequence(q[b], k_cache[s, keys], v_cache[s, keys], causal=causal, scale=1 / 8,
                                          window=window, softcap=cap)
        torch.testing.assert_close(out[b].float(), ref, atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(lse[b], ref_lse)


def test_cache_leftpad_with_one_length_for_all() -> None:
    k_cache, q = rand(2, 10, 2, 64), rand(2, 1, 2, 64)
    out = flashcore.flash_attn_with_kvcache(q, k_cache, k_cache, cache_seqlens=7, cache_leftpad=ints([2, 7]),
                                            fallback="sdpa")
    ref, _ = reference.sequence(q[0], k_cache[0, 2:7], k_cache[0, 2:7], causal=False, scale=1 / 8)
    torch.testing.assert_close(out[0].float(), ref, atol=2e-2, rtol=2e-2)
    assert (out[1] == 0).all()  # no key left: out 0


@pytest.mark.parametrize("pads,match", [
    (ints([1, 2]).long(), "cache_leftpad has dtype torch.int64"),
    (ints([1]), r"cache_leftpad has dtype torch.int32 and shape \(1,\)"),
    (ints([6, 0]), r"cache_leftpad\[0\] is 6: expected 0 \.\. 5"),
    (ints([0, -1]), r"cache_leftpad\[1\] is -1"),
])
def test_cache_leftpad_is_checked(pads: torch.Tensor, match: str) -> None:
    k_cache, q = rand(2, 10, 2, 64), rand(2, 1, 2, 64)
    with pytest.raises(FlashCoreError, match=match):
        serving.kvcache(q, k_cache, k_cache, ints([5, 3]), cache_leftpad=pads, fallback="sdpa", debug_checks=True)


@pytest.mark.parametrize("page_size", [1, 4, 8])
def test_cache_leftpad_on_pages_reads_the_same_keys_as_the_contiguous_cache(page_size: int) -> None:
    """A left-padded paged cache (FA3 runs it): sequence b's tokens are positions [pad, cache_seqlens) of its
    pages; the result is the contiguous cache's, with the appended tokens written at cache_seqlens."""
    lengths, pads = [9, 20, 5], [3, 17, 5]
    contiguous = rand(3, 24, 2, 64), rand(3, 24, 2, 64)
    q, k_new, v_new = rand(3, 2, 4, 64), rand(3, 2, 2, 64), rand(3, 2, 2, 64)
    k_pages, table = paged(contiguous[0].clone(), page_size)
    v_pages = torch.empty_like(k_pages)
    v_pages[table.flatten().long()] = contiguous[1].clone().reshape(-1, page_size, 2, 64)
    args = {"cache_seqlens": ints(lengths), "cache_leftpad": ints(pads), "causal": True, "window_size": (6, 0),
            "return_softmax_lse": True, "fallback": "sdpa", "debug_checks": True}
    want, want_lse = flashcore.flash_attn_with_kvcache(q, *contiguous, k=k_new, v=v_new, **args)
    out, lse = flashcore.flash_attn_with_kvcache(q, k_pages, v_pages, k=k_new, v=v_new, page_table=table, **args)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(lse, want_lse)
    flat = k_pages[table.long()].flatten(1, 2)  # [B, S, H, D] through the table
    assert torch.equal(flat[:, :24], contiguous[0])  # the same appends landed at the same positions


PACKED_Q = [
    # (q lengths, cache_seqlens, new tokens, page size or 0, slots or None, leftpad or None, causal, window, cap)
    ([1, 4, 0, 3], [5, 30, 2, 16], 0, 16, None, None, True, (-1, -1), 0.0),
    ([2, 2, 2], [7, 0, 20], 2, 0, [3, 0, 1], None, True, (3, 0), 0.0),  # speculative decoding: 2 drafts appended
    ([6, 1], [10, 40], 0, 0, None, [4, 0], False, (2, 3), 4.0),
    ([9, 3], [16, 3], 3, 16, [1, 0], None, True, (-1, -1), 0.0),  # chunked prefill into pages, appended
]


@pytest.mark.parametrize("case", PACKED_Q, ids=[f"packed_q{i}" for i in range(len(PACKED_Q))])
def test_packed_queries_into_a_cache_fallback_matches_the_reference(case: tuple) -> None:
    lq, lengths, new, page_size, slots, pads, causal, window, cap = case
    batch, capacity = len(lq), 48
    entries = batch if slots is None else 4
    k_slots, v_slots = rand(entries, capacity, 2, 64), rand(entries, capacity, 2, 64)
    k_new, v_new = rand(batch, new, 2, 64), rand(batch, new, 2, 64)
    k_cache, v_cache, table = k_slots.clone(), v_slots.clone(), None
    if page_size:
        k_cache, table = paged(k_slots, page_size)
        v_cache = torch.empty_like(k_cache)
        v_cache[table.flatten().long()] = v_slots.reshape(-1, page_size, 2, 64)
    q = rand(sum(lq) + 2, 4, 64)  # 2 rows in no sequence
    out, lse = flashcore.flash_attn_with_kvcache(
        q, k_cache, v_cache, k_new if new else None, v_new if new else None, cache_seqlens=ints(lengths),
        cache_batch_idx=None if slots is None else ints(slots), cache_leftpad=None if pads is None else ints(pads),
        page_table=table, cu_seqlens_q=offsets(lq), max_seqlen_q=max(lq), causal=causal, window_size=window,
        softcap=cap, return_softmax_lse=True, fallback="sdpa", debug_checks=True)
    assert out.shape == q.shape and lse.shape == (4, q.shape[0])
    assert (lse[:, sum(lq):] == -math.inf).all()
    for b, rows in enumerate(used_rows(lq, lq)):
        s = b if slots is None else slots[b]
        k_slots[s, lengths[b]:lengths[b] + new], v_slots[s, lengths[b]:lengths[b] + new] = k_new[b], v_new[b]
        keys = slice(0 if pads is None else pads[b], lengths[b] + new)
        ref, ref_lse = reference.sequence(q[rows], k_slots[s, keys], v_slots[s, keys], causal=causal, scale=1 / 8,
                                          window=window, softcap=cap)
        torch.testing.assert_close(out[rows].float(), ref, atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(lse[:, rows], ref_lse)


def test_packed_queries_into_a_cache_are_checked() -> None:
    k_cache, q, cu = rand(2, 16, 2, 64), rand(5, 4, 64), offsets([2, 3])
    lens = ints([4, 5])
    with pytest.raises(FlashCoreError, match="max_seqlen_q is None"):
        flashcore.flash_attn_with_kvcache(q, k_cache, k_cache, cache_seqlens=lens, cu_seqlens_q=cu, fallback="sdpa")
    with pytest.raises(FlashCoreError, match=r"q has shape \(1, 5, 4, 64\) \(rank 4\): expected rank 3"):
        flashcore.flash_attn_with_kvcache(q[None], k_cache, k_cache, cache_seqlens=lens, cu_seqlens_q=cu,
                                          max_seqlen_q=3, fallback="sdpa")
    with pytest.raises(FlashCoreError, match="k_cache has 2 entries for 3 sequences"):
        flashcore.flash_attn_with_kvcache(q, k_cache, k_cache, cache_seqlens=ints([1, 2, 3]),
                                          cu_seqlens_q=offsets([1, 2, 2]), max_seqlen_q=2, fallback="sdpa")
    with pytest.raises(FlashCoreError, match="max_seqlen is 2"):
        flashcore.flash_attn_with_kvcache(q, k_cache, k_cache, cache_seqlens=lens, cu_seqlens_q=cu, max_seqlen_q=2,
                                          fallback="sdpa", debug_checks=True)


def test_max_seqlen_q_without_cu_seqlens_q_is_ignored_as_fa3_does() -> None:
    k_cache, q = rand(2, 16, 2, 64), rand(2, 3, 4, 64)
    want = flashcore.flash_attn_with_kvcache(q, k_cache, k_cache, cache_seqlens=5, fallback="sdpa")
    got = flashcore.flash_attn_with_kvcache(q, k_cache, k_cache, cache_seqlens=5, max_seqlen_q=3, fallback="sdpa")
    assert torch.equal(got, want)


DRIVER_BASE = ["--batch", "3", "--heads-q", "2", "--heads-kv", "2", "--seqlen-q", "4", "--seqlen-k", "64",
               "--head-dim", "64", "--dtype", "bf16"]
VARLEN_FLAGS = ["--layout", "varlen", "--seqlens-q", "4,1,2", "--seqlens-k", "64,3,9"]


@pytest.mark.parametrize("extra", [
    [*VARLEN_FLAGS, "--seqused-q", "4,1"],  # 2 counts for 3 sequences
    [*VARLEN_FLAGS, "--seqused-q", "4,2,2"],  # more than sequence 1's queries
    ["--layout", "kvcache", "--seqlens-k", "1,2,3", "--seqused-q", "1,1,1"],  # not packed
    ["--layout", "kvcache", "--seqlens-k", "1,2,3", "--leftpad-k", "1,3,0"],  # past sequence 1's keys
    ["--layout", "paged", "--seqlens-k", "1,2,3", "--page-size", "16", "--leftpad-k", "0,1,0"],  # paged
    [*VARLEN_FLAGS, "--leftpad-k", "0,0,0"],  # packed keys
])
def test_driver_refuses_inconsistent_used_counts_and_padding(extra: list[str]) -> None:
    from tests.conftest import run_driver

    proc = run_driver(DRIVER_BASE + extra)
    assert proc.returncode == 2 and "RESULT status=error reason=usage" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("extra", [[*VARLEN_FLAGS, "--seqused-q", "0,1,2"],
                                   ["--layout", "kvcache", "--seqlens-k", "1,64,3", "--leftpad-k", "1,13,0"]])
def test_driver_takes_used_counts_and_padding(extra: list[str]) -> None:
    """Parsed and consistent: the driver gets past its usage check (then runs on an H100, or reports the device)."""
    from tests.conftest import run_driver

    proc = run_driver(DRIVER_BASE + extra)
    assert "reason=usage" not in proc.stdout and proc.returncode in (0, 3), proc.stdout + proc.stderr
