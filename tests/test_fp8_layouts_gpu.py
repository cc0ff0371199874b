"""FP8 (E4M3) on the serving layouts, on the H100/H200, against FA3's FP8 accuracy rule as tests/test_fp8_gpu.py
applies it: packed variable-length batches (ragged lengths with 1- and 0-length sequences, seqused_k, causal, GQA,
split-KV), contiguous KV caches (per-sequence lengths, slots, a left pad, FP8 appends) and hdim-128 paged caches.
Each sequence is checked against a float32 reference on its dequantized inputs (its own [B, Hkv] descale row); key
rows the call must not read hold E4M3 NaN (0x7f), so a stray 0 * NaN shows; out and lse are poisoned (NaN) first
where the test passes them (flashcore.serving); fresh random inputs per case."""

from __future__ import annotations

import pytest
import torch

import flashcore
from flashcore import reference, serving
from tests.test_fp8_gpu import assert_within_fa3_bound

pytestmark = pytest.mark.gpu
E4M3 = torch.float8_e4m3fn
NAN_BYTE = 0x7F  # E4M3's NaN


def fp8(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(E4M3)


def descales(batch: int, heads_kv: int) -> list[torch.Tensor]:
    return [torch.rand(batch, heads_kv, device="cuda") * 1.5 + 0.25 for _ in range(3)]


def poison(t: torch.Tensor) -> None:
    """E4M3 NaN in every byte of t (a view into the tensor the call reads)."""
    t.view(torch.uint8).fill_(NAN_BYTE)


def check_sequence(out: torch.Tensor, lse: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   ds: list[torch.Tensor], causal: bool) -> None:
    """One sequence: out [Sq, Hq, D] bf16, lse [Hq, Sq]; q [Sq, Hq, D], k, v [Sk, Hkv, D] FP8; ds its [1, Hkv]
    descales. FA3's rule: the error against the exact float32 result is at most twice that of a torch
    implementation rounding P to E4M3 as FA3 does, plus the output's bf16 rounding."""
    hkv, d = k.shape[1], q.shape[2]
    if q.shape[0] == 0:
        return
    assert torch.isfinite(out).all()
    if k.shape[0] == 0:  # no key: out 0, lse -inf
        assert (out == 0).all() and (lse == -torch.inf).all()
        return
    q32, k32, v32 = (reference.dequantize(x.unsqueeze(0), s, hkv) for x, s in zip((q, k, v), ds, strict=True))
    ref, ref_lse = reference.dense(q32, k32, v32, causal=causal, scale=d ** -0.5)
    pt, _ = reference.dense(q32, k32, v32, causal=causal, scale=d ** -0.5, p_dtype=E4M3)
    ref, ref_lse = ref[0], ref_lse[0]
    assert_within_fa3_bound(out, ref, pt[0])
    seen = torch.isfinite(ref_lse)
    torch.testing.assert_close(lse[seen], ref_lse[seen], atol=2e-3, rtol=2e-3)
    assert (lse[~seen] == -torch.inf).all()


VARLEN = [
    # (query lengths, key lengths, heads q, heads kv, head dim, causal, num_splits)
    ((1, 37, 0, 300, 129), (5, 1, 0, 700, 129), 8, 2, 128, True, 1),
    ((1, 37, 0, 300, 129), (5, 1, 0, 700, 129), 8, 2, 128, False, 3),
    ((64, 1, 200), (300, 0, 450), 4, 4, 64, True, 1),
    ((1, 1, 1, 1), (1000, 1, 2500, 333), 16, 2, 256, False, 0),
    ((130, 7), (90, 1500), 4, 1, 256, True, 2),
    ((2, 513), (513, 2000), 6, 3, 64, False, 0),
]


@pytest.mark.parametrize("used", [False, True])
@pytest.mark.parametrize(("lq", "lk", "hq", "hkv", "d", "causal", "splits"), VARLEN)
def test_fp8_varlen_matches_each_sequences_reference(lq: tuple[int, ...], lk: tuple[int, ...], hq: int, hkv: int,
                                                     d: int, causal: bool, splits: int, used: bool) -> None:
    torch.manual_seed(sum(lq) * 7 + sum(lk) + d + hq + splits + used)
    # With seqused_k each sequence's packed rows have 9 more, NaN, rows past its used keys.
    extra = 9 if used else 0
    rows_k = [n + extra for n in lk]
    cu_q = torch.tensor([0, *torch.tensor(lq).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, *torch.tensor(rows_k).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q, k, v = fp8(sum(lq), hq, d), fp8(sum(rows_k), hkv, d), fp8(sum(rows_k), hkv, d)
    seqused_k = None
    if used:
        seqused_k = torch.tensor(lk, dtype=torch.int32, device="cuda")
        for b in range(len(lk)):
            end = int(cu_k[b + 1])
            poison(k[end - extra:end])
            poison(v[end - extra:end])
    ds = descales(len(lq), hkv)
    out = torch.full((sum(lq), hq, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse = torch.full((hq, sum(lq)), float("nan"), device="cuda")
    serving.varlen(q, k, v, cu_q, cu_k, max(lq), max(rows_k), seqused_k=seqused_k, causal=causal, out=out, lse=lse,
                   num_splits=splits or None, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2])
    for b, n in enumerate(lk):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b]) + n)
        check_sequence(out[qs], lse[:, qs], q[qs], k[ks], v[ks], [s[b:b + 1] for s in ds], causal)


CACHES = [
    # (cache lengths, query rows, heads q, heads kv, head dim, causal)
    ((1, 700, 0, 4096, 129), 1, 32, 8, 128, False),
    ((1, 700, 0, 4096, 129), 4, 32, 8, 128, True),
    ((3000, 17, 1), 1, 16, 2, 256, False),
    ((64, 1, 999), 2, 8, 8, 64, True),
]


@pytest.mark.parametrize("slots", [False, True])
@pytest.mark.parametrize(("lengths", "sq", "hq", "hkv", "d", "causal"), CACHES)
def test_fp8_kvcache_decode_matches_each_sequences_reference(lengths: tuple[int, ...], sq: int, hq: int, hkv: int,
                                                             d: int, causal: bool, slots: bool) -> None:
    torch.manual_seed(sum(lengths) + sq * 13 + d + hq + slots)
    batch, capacity = len(lengths), max(lengths) + 64
    entries = batch + 2 if slots else batch
    k_cache, v_cache = fp8(entries, capacity, hkv, d), fp8(entries, capacity, hkv, d)
    idx = torch.randperm(entries, device="cuda")[:batch].to(torch.int32) if slots else None
    rows = idx.tolist() if idx is not None else list(range(batch))
    for b, n in enumerate(lengths):  # the rows past each length: never read into the result
        poison(k_cache[rows[b], n:])
        poison(v_cache[rows[b], n:])
    q = fp8(batch, sq, hq, d)
    ds = descales(batch, hkv)
    cache_seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out = torch.full((batch, sq, hq, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse = torch.full((batch, hq, sq), float("nan"), device="cuda")
    serving.kvcache(q, k_cache, v_cache, cache_seqlens, cache_batch_idx=idx, causal=causal, out=out, lse=lse,
                    q_descale=ds[0], k_descale=ds[1], v_descale=ds[2])
    for b, n in enumerate(lengths):
        check_sequence(out[b], lse[b], q[b], k_cache[rows[b], :n], v_cache[rows[b], :n],
                       [s[b:b + 1] for s in ds], causal)


def test_fp8_kvcache_appends_fp8_keys_byte_for_byte_then_attends_to_them() -> None:
    torch.manual_seed(5)
    batch, capacity, hq, hkv, d, new = 3, 512, 8, 2, 128, 3
    lengths = torch.tensor([0, 100, 300], dtype=torch.int32, device="cuda")
    k_cache, v_cache = fp8(batch, capacity, hkv, d), fp8(batch, capacity, hkv, d)
    for b, n in enumerate(lengths.tolist()):
        poison(k_cache[b, n:])
        poison(v_cache[b, n:])
    k, v, q = fp8(batch, new, hkv, d), fp8(batch, new, hkv, d), fp8(batch, 1, hq, d)
    ds = descales(batch, hkv)
    out, lse = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lengths, q_descale=ds[0],
                                                 k_descale=ds[1], v_descale=ds[2], return_softmax_lse=True)
    for b, n in enumerate(lengths.tolist()):
        assert torch.equal(k_cache[b, n:n + new].view(torch.uint8), k[b].view(torch.uint8))
        assert torch.equal(v_cache[b, n:n + new].view(torch.uint8), v[b].view(torch.uint8))
        assert (k_cache[b, n + new:].view(torch.uint8) == NAN_BYTE).all()  # nothing written past the new keys
        check_sequence(out[b], lse[b], q[b], k_cache[b, :n + new], v_cache[b, :n + new], [s[b:b + 1] for s in ds],
                       False)


def test_fp8_kvcache_left_padded_reads_only_its_keys() -> None:
    torch.manual_seed(7)
    batch, capacity, hq, hkv, d = 3, 700, 16, 4, 128
    lengths, pads = (5, 600, 257), (0, 130, 256)
    k_cache, v_cache, q = fp8(batch, capacity, hkv, d), fp8(batch, capacity, hkv, d), fp8(batch, 2, hq, d)
    for b, (n, pad) in enumerate(zip(lengths, pads, strict=True)):
        for cache in (k_cache, v_cache):
            poison(cache[b, :pad])
            poison(cache[b, n:])
    ds = descales(batch, hkv)
    out, lse = flashcore.flash_attn_with_kvcache(
        q, k_cache, v_cache, cache_seqlens=torch.tensor(lengths, dtype=torch.int32, device="cuda"),
        cache_leftpad=torch.tensor(pads, dtype=torch.int32, device="cuda"), causal=True, q_descale=ds[0],
        k_descale=ds[1], v_descale=ds[2], return_softmax_lse=True)
    for b, (n, pad) in enumerate(zip(lengths, pads, strict=True)):
        check_sequence(out[b], lse[b], q[b], k_cache[b, pad:n], v_cache[b, pad:n], [s[b:b + 1] for s in ds], True)


@pytest.mark.parametrize("append", [False, True])
@pytest.mark.parametrize("page_size", [16, 64, 256])
def test_fp8_paged_decode_matches_each_sequences_reference(page_size: int, append: bool) -> None:
    """Head dim 128 from shuffled pages; rows past each length, and the pages no sequence holds, are NaN."""
    torch.manual_seed(page_size * 3 + append)
    batch, hq, hkv, d, new = 4, 16, 4, 128, 3 if append else 0
    lengths = (1, 300, 0, 1000)
    per = -(-(max(lengths) + new) // page_size)
    contiguous_k, contiguous_v = fp8(batch, per * page_size, hkv, d), fp8(batch, per * page_size, hkv, d)
    for b, n in enumerate(lengths):
        poison(contiguous_k[b, n:])
        poison(contiguous_v[b, n:])
    k_pages, v_pages = fp8(batch * per + 5, page_size, hkv, d), fp8(batch * per + 5, page_size, hkv, d)
    poison(k_pages)
    poison(v_pages)
    table = torch.randperm(batch * per + 5, device="cuda")[:batch * per].to(torch.int32).view(batch, per)
    for pages, rows in ((k_pages, contiguous_k), (v_pages, contiguous_v)):  # bytes: no FP8 index_put needed
        pages.view(torch.uint8)[table.flatten().long()] = rows.view(torch.uint8).view(batch * per, page_size, hkv, d)
    q, ds = fp8(batch, 1, hq, d), descales(batch, hkv)
    k_new, v_new = (fp8(batch, new, hkv, d), fp8(batch, new, hkv, d)) if append else (None, None)
    out, lse = flashcore.flash_attn_with_kvcache(
        q, k_pages, v_pages, k_new, v_new, cache_seqlens=torch.tensor(lengths, dtype=torch.int32, device="cuda"),
        page_table=table, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], return_softmax_lse=True)
    for b, n in enumerate(lengths):
        kb, vb = (t.view(E4M3) for t in reference.cached_keys(k_pages.view(torch.uint8), v_pages.view(torch.uint8), b,
                                                               n + new, None, table))
        if append:
            assert torch.equal(kb[n:].view(torch.uint8), k_new[b].view(torch.uint8))
            assert torch.equal(vb[n:].view(torch.uint8), v_new[b].view(torch.uint8))
        check_sequence(out[b], lse[b], q[b], kb, vb, [s[b:b + 1] for s in ds], False)


def test_fp8_kvcache_with_one_int_length_is_the_per_sequence_call() -> None:
    torch.manual_seed(6)
    q, k_cache, v_cache = fp8(2, 1, 8, 128), fp8(2, 256, 2, 128), fp8(2, 256, 2, 128)
    ds = descales(2, 2)
    one = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=200, q_descale=ds[0],
                                            k_descale=ds[1], v_descale=ds[2])
    per = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.full(
        (2,), 200, dtype=torch.int32, device="cuda"), q_descale=ds[0], k_descale=ds[1], v_descale=ds[2])
    assert torch.equal(one, per)


def test_fp8_varlen_plan_transposes_v_in_shared_memory_and_the_copy_is_refused() -> None:
    """The workspace copy of V^T is laid out per dense batch entry: packed rows take the shared-memory transpose,
    even at a shape whose dense call would take the copy, and asking for the copy raises naming it."""
    from dataclasses import replace

    from flashcore import check, check_serving, forward

    q, k, v = fp8(8192, 4, 128), fp8(8192, 4, 128), fp8(8192, 4, 128)
    cu = torch.tensor([0, 4096, 8192], dtype=torch.int32, device="cuda")
    call = check_serving.varlen(q, k, v, cu, cu, 4096, 4096, seqused_q=None, seqused_k=None, causal=False,
                                softmax_scale=None, window_size=(-1, -1), softcap=0.0, deterministic=False,
                                fallback="error", out=None, lse=None)
    info, _ = forward.plan(call)
    assert info.fp8_v_transpose == check.V_TRANSPOSE["smem"]
    with pytest.raises(flashcore.FlashCoreError, match="transposes V in shared memory only"):
        forward.plan(replace(call, v_transpose=check.V_TRANSPOSE["pass"]))


def test_fp8_paged_bad_page_id_makes_its_sequence_nan_and_is_named() -> None:
    """As for 16-bit inputs (tests/test_index_errors_gpu.py): the paged FP8 producer checks page ids."""
    from flashcore import device_errors

    torch.manual_seed(9)
    device_errors.words("cuda").zero_()
    batch, page_size, per, hq, hkv, d = 3, 16, 16, 8, 2, 128
    k_pages, v_pages = fp8(batch * per + 2, page_size, hkv, d), fp8(batch * per + 2, page_size, hkv, d)
    table = torch.randperm(batch * per + 2, device="cuda")[:batch * per].to(torch.int32).view(batch, per)
    bad = table.clone()
    bad[1, 3] = batch * per + 9  # a page id past the cache's pages, within sequence 1's 200 keys
    q, ds = fp8(batch, 1, hq, d), descales(batch, hkv)
    lengths = torch.tensor([100, 200, 50], dtype=torch.int32, device="cuda")
    out, lse = flashcore.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=lengths, page_table=bad,
                                                 q_descale=ds[0], k_descale=ds[1], v_descale=ds[2],
                                                 return_softmax_lse=True)
    torch.cuda.synchronize()  # the context is alive: no illegal address
    assert torch.isnan(out[1].float()).all() and torch.isnan(lse[1]).all()
    with pytest.raises(flashcore.FlashCoreError, match="page_table"):
        flashcore.check_errors()
    for b in (0, 2):
        kb, vb = (t.view(E4M3) for t in reference.cached_keys(k_pages.view(torch.uint8), v_pages.view(torch.uint8), b,
                                                               int(lengths[b]), None, table))
        check_sequence(out[b], lse[b], q[b], kb, vb, [s[b:b + 1] for s in ds], False)


def test_fp8_paged_repeats_take_the_fast_path_with_new_values_descales_and_appends() -> None:
    """A paged FP8 call's repeats (same layouts; new q, lengths, descales and appended keys) reuse one remembered
    launch and stay right; its page ids stay checked on the device (a bad one in a repeat: NaN, named); a contiguous
    FP8 cache's repeats keep the host checks (no remembered launch)."""
    from flashcore import device_errors

    torch.manual_seed(17)
    batch, page_size, per, hq, hkv, d, new = 3, 64, 8, 16, 4, 128, 2
    k_pages, v_pages = fp8(batch * per, page_size, hkv, d), fp8(batch * per, page_size, hkv, d)
    table = torch.randperm(batch * per, device="cuda").to(torch.int32).view(batch, per)
    entries, counts = serving.fast_entries(), []
    for _ in range(3):
        q, ds = fp8(batch, 1, hq, d), descales(batch, hkv)
        k_new, v_new = fp8(batch, new, hkv, d), fp8(batch, new, hkv, d)
        lengths = torch.randint(0, per * page_size - new + 1, (batch,), dtype=torch.int32, device="cuda")
        before = lengths.tolist()
        out, lse = flashcore.flash_attn_with_kvcache(q, k_pages, v_pages, k_new, v_new, cache_seqlens=lengths,
                                                     page_table=table, q_descale=ds[0], k_descale=ds[1],
                                                     v_descale=ds[2], return_softmax_lse=True)
        counts.append(serving.fast_entries())
        for b, n in enumerate(before):
            kb, vb = (t.view(E4M3) for t in reference.cached_keys(k_pages.view(torch.uint8),
                                                                   v_pages.view(torch.uint8), b, n + new, None, table))
            assert torch.equal(kb[n:].view(torch.uint8), k_new[b].view(torch.uint8))
            check_sequence(out[b], lse[b], q[b], kb, vb, [s[b:b + 1] for s in ds], False)
    assert counts[0] == counts[1] == counts[2] == entries + 1  # remembered once, then reused
    device_errors.words("cuda").zero_()
    bad = table.clone()
    bad[1, 0] = batch * per + 5  # past the cache's pages: sequence 1's first page
    q, ds = fp8(batch, 1, hq, d), descales(batch, hkv)
    lengths = torch.tensor([10, 100, 5], dtype=torch.int32, device="cuda")
    out, lse = flashcore.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=lengths, page_table=bad,
                                                 q_descale=ds[0], k_descale=ds[1], v_descale=ds[2],
                                                 return_softmax_lse=True)
    out, lse = flashcore.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=lengths, page_table=bad,
                                                 q_descale=ds[0], k_descale=ds[1], v_descale=ds[2],
                                                 return_softmax_lse=True)  # the repeat, on the fast path
    torch.cuda.synchronize()
    assert torch.isnan(out[1].float()).all()
    with pytest.raises(flashcore.FlashCoreError, match="page_table"):
        flashcore.check_errors()
    cache_k, cache_v = fp8(batch, 512, hkv, d), fp8(batch, 512, hkv, d)
    held = serving.fast_entries()
    for _ in range(2):
        q = fp8(batch, 1, hq, d)
        lengths = torch.tensor([1, 512, 0], dtype=torch.int32, device="cuda")
        flashcore.flash_attn_with_kvcache(q, cache_k, cache_v, cache_seqlens=lengths)
    assert serving.fast_entries() == held
