"""The serving features without a GPU: the reference's masks and soft-capping, host checks of every new argument
(clear errors, nothing computed), the CPU fallback of varlen and per-sequence KV caches, and the ctypes mirror of
fc_params' new fields."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

import flashcore
from flashcore import _lib, check, check_serving, fastpath, launch, reference, serving
from flashcore.errors import FlashCoreError

ROOT = Path(__file__).resolve().parent.parent


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.bfloat16)


@pytest.mark.parametrize("sq,sk,causal,window", [(5, 9, True, (-1, -1)), (9, 5, True, (-1, -1)),
                                                 (6, 6, False, (1, 2)), (4, 10, True, (3, 7)),
                                                 (7, 7, False, (-1, 0)), (7, 3, False, (0, -1))])
def test_visible_is_the_documented_rule(sq: int, sk: int, causal: bool, window: tuple[int, int]) -> None:
    got = reference.visible(sq, sk, slice(None), causal, window, torch.device("cpu"))
    left, right = window[0], 0 if causal else window[1]
    for i in range(sq):
        for j in range(sk):
            d = i + sk - sq
            want = (right < 0 or j <= d + right) and (left < 0 or j >= d - left)
            assert bool(got[i, j]) == want, (i, j)


def test_reference_matches_sdpa_without_window_or_softcap() -> None:
    q, k, v = rand(7, 4, 64), rand(11, 2, 64), rand(11, 2, 64)
    out, lse = reference.sequence(q, k, v, causal=True, scale=0.125)
    kk, vv = k.float().repeat_interleave(2, 1), v.float().repeat_interleave(2, 1)
    mask = reference.visible(7, 11, slice(None), True, (-1, -1), torch.device("cpu"))
    want = torch.nn.functional.scaled_dot_product_attention(
        q.float().transpose(0, 1), kk.transpose(0, 1), vv.transpose(0, 1), attn_mask=mask, scale=0.125)
    torch.testing.assert_close(out, want.transpose(0, 1), atol=1e-5, rtol=1e-5)
    scores = torch.einsum("qhd,khd->hqk", q.float(), kk) * 0.125
    torch.testing.assert_close(lse, torch.logsumexp(scores.masked_fill(~mask, -math.inf), -1), atol=1e-5, rtol=1e-5)


def test_softcap_bounds_the_scores() -> None:
    q, k, v = rand(3, 1, 64) * 50, rand(5, 1, 64) * 50, rand(5, 1, 64)
    _, lse = reference.sequence(q, k, v, causal=False, scale=1.0, softcap=2.0)
    # every capped score is in (-2, 2): lse <= 2 + ln(5)
    assert (lse <= 2 + math.log(5) + 1e-5).all()


def test_rows_without_keys_get_zero_and_minus_inf() -> None:
    q, k, v = rand(4, 2, 64), rand(4, 2, 64), rand(4, 2, 64)
    out, lse = reference.sequence(q, k, v, causal=False, scale=0.1, window=(0, -1))  # row i sees keys >= i... all
    assert torch.isfinite(lse).all()
    out, lse = reference.sequence(q, k[:0], v[:0], causal=True, scale=0.1)
    assert (out == 0).all() and (lse == -math.inf).all()


@pytest.mark.parametrize("bad", [(1,), (-2, 0), (0, "1"), (True, 0), (0, 1 << 31), None, 3])
def test_window_values_are_checked(bad: object) -> None:
    with pytest.raises(FlashCoreError, match="window_size"):
        check.window(bad)


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan, "1", True])
def test_softcap_values_are_checked(bad: object) -> None:
    with pytest.raises(FlashCoreError, match="softcap"):
        check.softcap(bad)


def offsets(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def test_varlen_fallback_matches_reference_per_sequence() -> None:
    lq, lk = [3, 0, 1, 6], [4, 2, 0, 9]
    q, k, v = rand(sum(lq), 4, 64), rand(sum(lk), 2, 64), rand(sum(lk), 2, 64)
    out, lse = flashcore.flash_attn_varlen_func(q, k, v, offsets(lq), offsets(lk), 6, 9, causal=True,
                                                window_size=(2, 0), softcap=5.0, return_attn_probs=True,
                                                fallback="sdpa", debug_checks=True)
    assert out.shape == q.shape and lse.shape == (4, sum(lq))
    start_q = start_k = 0
    for nq, nk in zip(lq, lk, strict=True):
        ref, ref_lse = reference.sequence(q[start_q:start_q + nq], k[start_k:start_k + nk], v[start_k:start_k + nk],
                                          causal=True, scale=1 / 8, window=(2, 0), softcap=5.0)
        torch.testing.assert_close(out[start_q:start_q + nq].float(), ref, atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(lse[:, start_q:start_q + nq], ref_lse)
        start_q, start_k = start_q + nq, start_k + nk


@pytest.mark.parametrize("change,match", [
    (lambda a: a.update(cu_seqlens_q=a["cu_seqlens_q"].long()), "cu_seqlens_q has dtype"),
    (lambda a: a.update(cu_seqlens_k=a["cu_seqlens_k"][:-1]), "cu_seqlens_k has dtype .* shape"),
    (lambda a: a.update(max_seqlen_q=-1), "max_seqlen_q"),
    (lambda a: a.update(max_seqlen_q=2), "max_seqlen is 2"),
    (lambda a: a.update(cu_seqlens_q=torch.tensor([0, 3, 2, 9], dtype=torch.int32)), "decreases"),
    (lambda a: a.update(cu_seqlens_q=torch.tensor([1, 3, 4, 9], dtype=torch.int32)), "start at 0"),
    (lambda a: a.update(cu_seqlens_k=torch.tensor([0, 3, 4, 99], dtype=torch.int32)), "rows"),
    (lambda a: a.update(seqused_k=torch.tensor([0, 5, 1], dtype=torch.int32)), "seqused_k\\[1\\] is 5"),
    (lambda a: a.update(q=a["q"][..., :48]), "head dim"),
    (lambda a: a.update(q=a["q"][None]), "rank 3"),
])
def test_varlen_rejects_bad_arguments(change, match: str) -> None:  # type: ignore[no-untyped-def]
    args = {"q": rand(9, 4, 64), "k": rand(9, 2, 64), "v": rand(9, 2, 64),
            "cu_seqlens_q": offsets([3, 1, 5]), "cu_seqlens_k": offsets([3, 1, 5]), "max_seqlen_q": 5,
            "max_seqlen_k": 5}
    change(args)
    with pytest.raises(FlashCoreError, match=match):
        serving.varlen(**args, fallback="sdpa", debug_checks=True)


def test_kvcache_fallback_with_slots_lengths_and_append() -> None:
    k_cache, v_cache = rand(4, 12, 2, 64), rand(4, 12, 2, 64)
    before = k_cache.clone()
    q, k, v = rand(2, 2, 4, 64), rand(2, 2, 2, 64), rand(2, 2, 2, 64)
    lengths = torch.tensor([5, 0], dtype=torch.int32)
    slots = torch.tensor([3, 1], dtype=torch.int32)
    out, lse = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lengths,
                                                 cache_batch_idx=slots, causal=True, return_softmax_lse=True,
                                                 fallback="sdpa", debug_checks=True)
    assert torch.equal(k_cache[3, 5:7], k[0]) and torch.equal(k_cache[1, 0:2], k[1])
    assert torch.equal(k_cache[0], before[0]) and torch.equal(k_cache[2], before[2])
    for b, (n, s) in enumerate(((7, 3), (2, 1))):
        ref, ref_lse = reference.sequence(q[b], k_cache[s, :n], v_cache[s, :n], causal=True, scale=1 / 8)
        torch.testing.assert_close(out[b].float(), ref, atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(lse[b], ref_lse)


def test_kvcache_rejects_bad_lengths_slots_and_overflow() -> None:
    k_cache, v_cache, q = rand(2, 8, 2, 64), rand(2, 8, 2, 64), rand(2, 1, 4, 64)
    with pytest.raises(FlashCoreError, match="cache_seqlens has dtype"):
        serving.kvcache(q, k_cache, v_cache, torch.tensor([1, 2]), fallback="sdpa")
    with pytest.raises(FlashCoreError, match=r"cache_seqlens\[1\] is 9"):
        serving.kvcache(q, k_cache, v_cache, torch.tensor([1, 9], dtype=torch.int32), fallback="sdpa",
                        debug_checks=True)
    with pytest.raises(FlashCoreError, match="cache_batch_idx has values outside"):
        serving.kvcache(q, k_cache, v_cache, torch.tensor([1, 2], dtype=torch.int32),
                        cache_batch_idx=torch.tensor([0, 2], dtype=torch.int32), fallback="sdpa", debug_checks=True)
    new = rand(2, 2, 2, 64)
    with pytest.raises(FlashCoreError, match=r"cache_seqlens\[1\] = 7"):
        flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, new, new, cache_seqlens=torch.tensor(
            [1, 7], dtype=torch.int32), fallback="sdpa", debug_checks=True)


def paged_copy(k_cache: torch.Tensor, v_cache: torch.Tensor, page_size: int,
               pages: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """caches [B, S, H, D] scattered into `pages` shuffled pages of `page_size` rows each (unused pages and rows
    random): (paged k, paged v, page_table [B, ceil(S / page_size)])."""
    b, s = k_cache.shape[:2]
    per = -(-s // page_size)
    order = torch.randperm(pages)[:b * per].reshape(b, per)
    out = []
    for cache in (k_cache, v_cache):
        paged = rand(pages, page_size, *cache.shape[2:])
        padded = torch.cat([cache, rand(b, per * page_size - s, *cache.shape[2:])], dim=1)
        paged[order.flatten()] = padded.reshape(b * per, page_size, *cache.shape[2:])
        out.append(paged)
    return out[0], out[1], order.to(torch.int32)


def test_paged_cache_fallback_matches_the_contiguous_cache_and_appends_into_pages() -> None:
    q, k_cache, v_cache = rand(3, 2, 4, 64), rand(3, 40, 2, 64), rand(3, 40, 2, 64)
    lengths = torch.tensor([5, 40, 17], dtype=torch.int32)
    k_pages, v_pages, table = paged_copy(k_cache, v_cache, 16, 12)
    want = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, causal=True,
                                             fallback="sdpa")
    got = flashcore.flash_attn_with_kvcache(q, k_pages, v_pages, cache_seqlens=lengths, page_table=table,
                                            causal=True, fallback="sdpa", debug_checks=True)
    assert torch.equal(got, want)
    new_k, new_v = rand(3, 3, 2, 64), rand(3, 3, 2, 64)
    short = torch.tensor([5, 30, 17], dtype=torch.int32)
    flashcore.flash_attn_with_kvcache(q, k_pages, v_pages, new_k, new_v, cache_seqlens=short, page_table=table,
                                      fallback="sdpa", debug_checks=True)
    for b, n in enumerate(short.tolist()):
        for i in range(3):
            page, row = int(table[b, (n + i) // 16]), (n + i) % 16
            assert torch.equal(k_pages[page, row], new_k[b, i]) and torch.equal(v_pages[page, row], new_v[b, i])


def test_paged_cache_arguments_are_checked() -> None:
    q, pages = rand(2, 1, 4, 64), rand(6, 16, 2, 64)
    lengths = torch.tensor([3, 20], dtype=torch.int32)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    with pytest.raises(FlashCoreError, match="torch.int32"):
        serving.kvcache(q, pages, pages, lengths, page_table=table.long(), fallback="sdpa")
    with pytest.raises(FlashCoreError, match=r"\[2, max_pages"):
        serving.kvcache(q, pages, pages, lengths, page_table=table[:1], fallback="sdpa")
    with pytest.raises(FlashCoreError, match=r"is 0: a paged cache needs 1 \.\. 65536 keys per page"):
        serving.kvcache(q, rand(6, 0, 2, 64), rand(6, 0, 2, 64), lengths, page_table=table, fallback="sdpa")
    with pytest.raises(FlashCoreError, match=r"expected torch.int32 \[B_cache >= 1"):
        serving.kvcache(q, pages, pages, lengths, page_table=table[0], cache_batch_idx=lengths, fallback="sdpa")
    with pytest.raises(FlashCoreError, match=r"page_table\[1\] names page 7"):
        serving.kvcache(q, pages, pages, lengths, page_table=torch.tensor([[0, 1], [2, 7]], dtype=torch.int32),
                        fallback="sdpa", debug_checks=True)
    with pytest.raises(FlashCoreError, match=r"cache_seqlens\[1\] is 40"):
        serving.kvcache(q, pages, pages, torch.tensor([3, 40], dtype=torch.int32), page_table=table,
                        fallback="sdpa", debug_checks=True)


@pytest.mark.parametrize("page_size", [1, 3, 8, 24, 48, 65536])
def test_page_size_check_accepts_any_size_from_1_to_65536(page_size: int) -> None:
    check_serving.check_page_size(page_size)


@pytest.mark.parametrize("page_size", [0, -1, -16, 65537, 1 << 20])
def test_page_size_check_refuses_sizes_outside_1_to_65536(page_size: int) -> None:
    with pytest.raises(FlashCoreError, match=rf"is {page_size}: a paged cache needs 1 \.\. 65536 keys per page"):
        check_serving.check_page_size(page_size)


@pytest.mark.parametrize("page_size", [1, 3, 8, 24])
def test_paged_fallback_with_pages_of_any_size_matches_the_fp32_reference(page_size: int) -> None:
    """Shuffled pages, lengths of one key and ending mid-page, GQA, causal: each sequence against the float32
    reference over its contiguous keys."""
    lengths = [1, 17, 40, 0]
    q, k_cache, v_cache = rand(4, 3, 8, 64), rand(4, 40, 2, 64), rand(4, 40, 2, 64)
    k_pages, v_pages, table = paged_copy(k_cache, v_cache, page_size, 4 * -(-40 // page_size) + 3)
    out, lse = serving.kvcache(q, k_pages, v_pages, torch.tensor(lengths, dtype=torch.int32), page_table=table,
                               causal=True, fallback="sdpa", debug_checks=True)
    for b, n in enumerate(lengths):
        ref, ref_lse = reference.sequence(q[b], k_cache[b, :n], v_cache[b, :n], causal=True, scale=1 / 8)
        torch.testing.assert_close(out[b].float(), ref, atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(lse[b], ref_lse, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("dims", [(96, 96), (192, 192), (192, 128)])
def test_head_dims_96_and_192_and_a_v_of_its_own(dims: tuple[int, int]) -> None:
    d, dv = dims
    q, k, v = rand(2, 9, 4, d), rand(2, 9, 2, d), rand(2, 9, 2, dv)
    out, lse = flashcore.attention(q, k, v, causal=True, fallback="sdpa")
    assert out.shape == (2, 9, 4, dv)
    want, want_lse = reference.dense(q, k, v, causal=True, scale=d ** -0.5)
    torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, want_lse, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("dims,match", [((192, 64), "expected 192 or 128"), ((128, 64), "expected 128"),
                                        ((36, 36), "multiples of 8 up to 256 \\(as FA3\\)"),
                                        ((160, 96), "expected 160 or 128 or 120 or 112 or 104")])
def test_head_dims_it_does_not_take_are_refused(dims: tuple[int, int], match: str) -> None:
    d, dv = dims
    with pytest.raises(FlashCoreError, match=match):
        flashcore.attention(rand(1, 4, 2, d), rand(1, 4, 2, d), rand(1, 4, 2, dv), fallback="sdpa")


def test_fc_params_mirror_lists_the_header_fields_in_order() -> None:
    header = (ROOT / "kernel" / "flashcore.h").read_text()
    body = header[header.index("typedef struct fc_params {"):header.index("} fc_params;")]
    names: list[str] = []
    for line in body.splitlines()[1:]:
        code = line.split("//")[0].strip()
        if not code:
            continue
        decl = re.sub(r"\[\d+\]", "", code.rstrip(";"))
        names += [n.strip().lstrip("*") for n in re.split(r",", decl.split(None, 1)[1] if " " in decl else decl)]
        names[-len(decl.split(",")):] = [n.split()[-1].lstrip("*") for n in decl.split(",")]
    assert [f[0] for f in _lib.FcParams._fields_] == names


def test_repeat_call_signature_ignores_pointers_but_not_layouts() -> None:
    q, kc, lens = rand(2, 1, 4, 64), rand(2, 8, 2, 64), torch.tensor([1, 2], dtype=torch.int32)
    args = (False, None, (-1, -1), 0.0, None, 0, "error")
    key = fastpath.serving_signature("kvcache", (q, kc, kc, lens, None), args)
    assert key == fastpath.serving_signature("kvcache", (rand(2, 1, 4, 64), kc.clone(), kc, lens + 1, None), args)
    # a list window is hashable as a tuple (its own entry: the type is part of the key, as in flashcore/fastpath.py)
    assert fastpath.serving_signature("kvcache", (q, kc, kc, lens, None), (False, None, [-1, -1], 0.0, None, 0,
                                                                   "error")) is not None
    q3 = rand(2, 3, 4, 64)
    assert fastpath.serving_signature("kvcache", (q3, kc, kc, lens, None), args) != fastpath.serving_signature(
        "kvcache", (q3.transpose(1, 2).contiguous().transpose(1, 2), kc, kc, lens, None), args)  # other strides
    assert key != fastpath.serving_signature("kvcache", (q.half(), kc, kc, lens, None), args)
    assert key != fastpath.serving_signature("varlen", (q, kc, kc, lens, None), args)
    assert key != fastpath.serving_signature("kvcache", (q, kc, kc, lens, None), (True, *args[1:]))
    with torch.no_grad():
        assert key != fastpath.serving_signature("kvcache", (q, kc, kc, lens, None), args)  # grad mode is part of it
    assert fastpath.serving_signature("kvcache", ([1], kc, kc, lens, None), args) is None  # not a tensor: checked path


def test_repeat_call_launches_the_remembered_params_with_new_pointers(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[_lib.FcParams, int]] = []
    monkeypatch.setattr(launch, "c_forward", lambda lib, params, need, device: seen.append((params, need)))
    monkeypatch.setattr(_lib, "load", lambda: None)
    q, kc, lens = rand(2, 1, 4, 64), rand(2, 8, 2, 64), torch.tensor([1, 2], dtype=torch.int32)
    key = fastpath.serving_signature("kvcache", (q, kc, kc, lens, None), ("x",))
    arrays = {"seqused_k": lens, "kv_batch_idx": None}
    assert fastpath.lookup(key) is None
    fastpath.remember(key, _lib.FcParams(batch=2, heads_q=4, seqlen_k=8, workspace=1234, workspace_bytes=64), 64)
    entry = fastpath.lookup(key)
    assert entry is not None
    out, lse = launch.again(entry, q, kc, kc, (2, 4, 1), arrays)
    params, need = seen[-1]
    assert need == 64 and params.batch == 2 and params.seqlen_k == 8
    assert params.q == q.data_ptr() and params.seqused_k == lens.data_ptr() and params.kv_batch_idx is None
    assert params.o == out.data_ptr() and params.lse == lse.data_ptr() and lse.shape == (2, 4, 1)
    assert params.workspace is None  # the remembered launch's workspace is never reused
    misaligned = rand(kc.numel() + 8)[4:4 + kc.numel()].view(kc.shape)  # kc's layout, base 8 bytes off
    assert not fastpath.aligned(q, misaligned, kc)  # the checked path then says why


def test_serving_calls_write_into_the_callers_buffers() -> None:
    """out= and lse= (what the gates pass, poisoned): filled in place and returned; wrong ones refused by name."""
    q, k, v = rand(9, 4, 64), rand(12, 2, 64), rand(12, 2, 64)
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    cu_k = torch.tensor([0, 5, 12], dtype=torch.int32)
    out, lse = torch.full((9, 4, 64), math.nan, dtype=torch.bfloat16), torch.full((4, 9), math.nan)
    got = serving.varlen(q, k, v, cu, cu_k, 5, 7, causal=True, fallback="sdpa", out=out, lse=lse)
    want = serving.varlen(q, k, v, cu, cu_k, 5, 7, causal=True, fallback="sdpa")
    assert got[0] is out and got[1] is lse and torch.equal(out, want[0]) and torch.equal(lse, want[1])
    with pytest.raises(FlashCoreError, match=re.escape("out has shape (9, 4, 32): expected (9, 4, 64)")):
        serving.varlen(q, k, v, cu, cu_k, 5, 7, fallback="sdpa", out=rand(9, 4, 32))
    with pytest.raises(FlashCoreError, match="expected a contiguous torch.float32 tensor of shape"):
        serving.varlen(q, k, v, cu, cu_k, 5, 7, fallback="sdpa", lse=torch.empty(4, 9, dtype=torch.float16))
    with pytest.raises(FlashCoreError, match="out overlaps q"):
        serving.varlen(q, k, v, cu, cu_k, 5, 7, fallback="sdpa", out=q)
    qc, kc, vc = rand(2, 1, 4, 64), rand(2, 16, 2, 64), rand(2, 16, 2, 64)
    lengths = torch.tensor([3, 16], dtype=torch.int32)
    out, lse = torch.empty(2, 1, 4, 64, dtype=torch.bfloat16), torch.empty(2, 4, 1)
    got = serving.kvcache(qc, kc, vc, lengths, fallback="sdpa", out=out, lse=lse)
    assert got[0] is out and torch.equal(out, serving.kvcache(qc, kc, vc, lengths, fallback="sdpa")[0])
    with pytest.raises(FlashCoreError, match="lse is torch.float32 \\(2, 1, 4\\)"):
        serving.kvcache(qc, kc, vc, lengths, fallback="sdpa", lse=torch.empty(2, 1, 4))
    qd = rand(1, 6, 4, 64)
    out = torch.empty(1, 6, 4, 64, dtype=torch.bfloat16)
    assert serving.dense(qd, qd[:, :, :2].clone(), qd[:, :, :2].clone(), window_size=(2, 0), fallback="sdpa",
                         out=out)[0] is out


def test_a_repeat_paged_append_call_skips_the_checks_and_still_appends(monkeypatch: pytest.MonkeyPatch) -> None:
    """flash_attn_with_kvcache with one int length, a page table and an append: the second call with the same
    layouts takes the repeat path (no checks, the remembered parameters) and still writes its new keys."""
    from flashcore import check_serving, forward

    checked, launched = [], []
    real_check = check_serving.kvcache
    monkeypatch.setattr(check_serving, "kvcache", lambda *a, **kw: checked.append(1) or real_check(*a, **kw))
    monkeypatch.setattr(forward, "_device", lambda call: (0, "pretend H100", False))  # the kernel path, on the CPU

    def pretend_launch(params: _lib.FcParams, device: torch.device, key: object = None) -> None:
        launched.append(params.seqlen_k)
        fastpath.remember(key, params, 0)  # type: ignore[arg-type]

    monkeypatch.setattr(launch, "launch", pretend_launch)
    monkeypatch.setattr(launch, "c_forward", lambda lib, params, need, device: launched.append(params.page_size))
    monkeypatch.setattr(_lib, "load", lambda: None)
    monkeypatch.setattr(fastpath, "_CACHE", {})
    q, k_cache, v_cache = rand(2, 1, 4, 64), rand(4, 16, 2, 64), rand(4, 16, 2, 64)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    for _ in range(2):  # FA3's int length: the same slot each time
        new = rand(2, 1, 2, 64)
        flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, new, new, cache_seqlens=5, page_table=table,
                                          fallback="sdpa")
        assert torch.equal(k_cache[0, 5], new[0, 0]) and torch.equal(k_cache[2, 5], new[1, 0])
    assert checked == [1] and launched == [32, 16]  # checked once; the repeat launched the remembered paged call
