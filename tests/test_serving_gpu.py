"""The serving features on the H100 against the float32 reference (flashcore/reference.py): packed varlen batches
(zero-length and 1-token sequences), per-sequence KV-cache lengths and slots, append, sliding windows at their
edges, soft-capping with large scores. Fresh random inputs per case; outputs are poisoned (NaN) first where the
API lets a caller pass them, and every checked row must be finite."""

from __future__ import annotations

import math

import pytest
import torch

import flashcore
from flashcore import reference, serving

pytestmark = pytest.mark.gpu
ATOL, RTOL = 2e-2, 2e-2  # bf16 output (8 mantissa bits) of softmax-weighted sums of N(0, 1) values


def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device="cuda") * scale).to(torch.bfloat16)


def close(out: torch.Tensor, ref: torch.Tensor, lse: torch.Tensor, ref_lse: torch.Tensor) -> None:
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, atol=ATOL, rtol=RTOL)
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), seen)  # rows without a key: lse -inf exactly there
    torch.testing.assert_close(lse[seen], ref_lse[seen], atol=1e-3, rtol=1e-3)


def offsets(lengths: list[int]) -> torch.Tensor:
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32, device="cuda")


VARLEN = [
    # (q lengths, k lengths, heads q, heads kv, head dim, causal, window, softcap)
    ([5, 0, 1, 300, 129, 64], [5, 7, 1, 300, 500, 64], 4, 2, 128, True, (-1, -1), 0.0),
    ([5, 0, 1, 300, 129, 64], [9, 0, 3, 260, 129, 700], 4, 4, 128, False, (-1, -1), 0.0),
    ([1, 1, 1, 1], [513, 1, 77, 1024], 8, 1, 128, True, (-1, -1), 0.0),   # decode-shaped varlen, packed GQA
    ([700, 3, 190], [700, 3, 190], 2, 2, 64, True, (-1, -1), 0.0),
    ([400, 257], [400, 300], 2, 1, 256, True, (-1, -1), 0.0),
    ([333, 129, 0], [333, 200, 5], 4, 2, 128, True, (100, 0), 0.0),
    ([333, 129], [333, 600], 4, 2, 128, False, (64, 17), 0.0),
    ([257, 64], [257, 64], 2, 2, 64, True, (0, 0), 0.0),
    ([300, 45], [512, 45], 4, 4, 128, True, (-1, -1), 30.0),
]


@pytest.mark.parametrize("case", VARLEN, ids=[f"varlen{i}" for i in range(len(VARLEN))])
def test_varlen_matches_reference(case: tuple) -> None:
    lq, lk, hq, hkv, d, causal, window, cap = case
    q, k, v = rand(sum(lq) + 3, hq, d), rand(sum(lk), hkv, d), rand(sum(lk), hkv, d)  # 3 rows in no sequence
    cu_q, cu_k = offsets(lq), offsets(lk)
    out, lse = flashcore.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=causal,
                                                window_size=window, softcap=cap, return_attn_probs=True,
                                                debug_checks=True)
    ref, ref_lse = reference.varlen(q, k, v, cu_q.tolist(), cu_k.tolist(), None, causal=causal,
                                    scale=1 / math.sqrt(d), window=window, softcap=cap)
    rows = sum(lq)
    close(out[:rows], ref[:rows], lse[:, :rows], ref_lse[:, :rows])


def test_varlen_seqused_k_limits_keys() -> None:
    lq, lk, used = [3, 200, 1], [300, 250, 40], [0, 100, 40]
    q, k, v = rand(sum(lq), 4, 128), rand(sum(lk), 2, 128), rand(sum(lk), 2, 128)
    cu_q, cu_k = offsets(lq), offsets(lk)
    seqused = torch.tensor(used, dtype=torch.int32, device="cuda")
    out, lse = serving.varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), seqused_k=seqused, causal=True)
    ref, ref_lse = reference.varlen(q, k, v, cu_q.tolist(), cu_k.tolist(), used, causal=True,
                                    scale=1 / math.sqrt(128))
    close(out, ref, lse, ref_lse)
    assert (out[:3] == 0).all()  # no key: out 0, lse -inf


def test_varlen_is_deterministic() -> None:
    lq = [1000, 17, 0, 513]
    q, k, v = rand(sum(lq), 8, 128), rand(sum(lq), 2, 128), rand(sum(lq), 2, 128)
    cu = offsets(lq)
    first = serving.varlen(q, k, v, cu, cu, max(lq), max(lq), causal=True)
    for _ in range(3):
        again = serving.varlen(q, k, v, cu, cu, max(lq), max(lq), causal=True)
        assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


@pytest.mark.parametrize("hq,hkv,sq,causal,splits", [(32, 8, 1, False, None), (16, 16, 1, False, 4),
                                                     (8, 2, 4, True, None), (4, 4, 130, True, 1)])
def test_kvcache_per_sequence_lengths_and_slots(hq: int, hkv: int, sq: int, causal: bool, splits: int | None) -> None:
    batch, slots_n, capacity, d = 5, 7, 1100, 128
    k_cache, v_cache = rand(slots_n, capacity, hkv, d), rand(slots_n, capacity, hkv, d)
    q = rand(batch, sq, hq, d)
    lengths = torch.tensor([1, 1100, 0, 513, 177], dtype=torch.int32, device="cuda")
    slots = torch.tensor([6, 0, 3, 2, 5], dtype=torch.int32, device="cuda")
    out, lse = serving.kvcache(q, k_cache, v_cache, lengths, cache_batch_idx=slots, causal=causal,
                               num_splits=splits, debug_checks=True)
    for b, (n, s) in enumerate(zip(lengths.tolist(), slots.tolist(), strict=True)):
        ref, ref_lse = reference.sequence(q[b], k_cache[s, :n], v_cache[s, :n], causal=causal,
                                          scale=1 / math.sqrt(d))
        close(out[b], ref, lse[b], ref_lse)


def test_kvcache_append_then_attend_matches_reference() -> None:
    batch, capacity, hq, hkv, d, new = 3, 600, 8, 2, 128, 2
    k_cache, v_cache = rand(batch, capacity, hkv, d), rand(batch, capacity, hkv, d)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    lengths = torch.tensor([10, 0, 598], dtype=torch.int32, device="cuda")
    q, k, v = rand(batch, new, hq, d), rand(batch, new, hkv, d), rand(batch, new, hkv, d)
    out = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lengths, causal=True,
                                            debug_checks=True)
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(k_cache[b, n:n + new], k[b], atol=0, rtol=0)
        assert torch.equal(k_cache[b, :n], before_k[b, :n]) and torch.equal(v_cache[b, :n], before_v[b, :n])
        ref, _ = reference.sequence(q[b], k_cache[b, :n + new], v_cache[b, :n + new], causal=True,
                                    scale=1 / math.sqrt(d))
        torch.testing.assert_close(out[b].float(), ref, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("window,causal", [((0, 0), False), ((1, 1), False), ((127, 0), True), ((128, -1), False),
                                           ((-1, 64), False), ((300, 5), False)])
def test_dense_window_edges(d: int, window: tuple[int, int], causal: bool) -> None:
    q, k, v = rand(2, 333, 4, d), rand(2, 400, 2, d), rand(2, 400, 2, d)
    out, lse = flashcore.flash_attn_func(q, k, v, causal=causal, window_size=window, return_attn_probs=True)
    ref, ref_lse = reference.dense(q, k, v, causal=causal, scale=1 / math.sqrt(d), window=window)
    close(out, ref, lse, ref_lse)


@pytest.mark.parametrize("d,causal,sq", [(64, True, 512), (128, False, 1), (128, True, 700), (256, False, 300)])
def test_softcap_with_large_scores(d: int, causal: bool, sq: int) -> None:
    q, k, v = rand(2, sq, 8, d, scale=8.0), rand(2, 700, 8, d, scale=8.0), rand(2, 700, 8, d)  # |scores| ~ 64 sqrt(d)
    out, lse = flashcore.flash_attn_func(q, k, v, causal=causal, softcap=50.0, return_attn_probs=True)
    ref, ref_lse = reference.dense(q, k, v, causal=causal, scale=1 / math.sqrt(d), softcap=50.0)
    close(out, ref, lse, ref_lse)


def test_dense_paths_unchanged_by_serving_fields() -> None:
    """The plain call and the serving entry with nothing set give the same bits (one kernel, fields off)."""
    q, k, v = rand(2, 777, 8, 128), rand(2, 900, 4, 128), rand(2, 900, 4, 128)
    a = flashcore.attention(q, k, v, causal=True)
    b = serving.dense(q, k, v, causal=True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_repeat_calls_take_the_fast_path_with_new_values_and_pointers() -> None:
    """Repeats with new tensors and new lengths (same layouts) reuse one remembered launch and stay correct."""
    k_cache, v_cache = rand(4, 600, 2, 128), rand(4, 600, 2, 128)
    counts = []
    for _ in range(3):
        q = rand(4, 1, 8, 128)
        lengths = torch.randint(0, 601, (4,), dtype=torch.int32, device="cuda")
        out, lse = serving.kvcache(q, k_cache, v_cache, lengths, causal=True)
        counts.append(serving.fast_entries())
        for b, n in enumerate(lengths.tolist()):
            ref, ref_lse = reference.sequence(q[b], k_cache[b, :n], v_cache[b, :n], causal=True,
                                              scale=1 / math.sqrt(128))
            close(out[b], ref, lse[b], ref_lse)
    for _ in range(3):
        first = int(torch.randint(0, 300, (1,)))
        lq = [first, 300 - first, 200]  # new lengths, same packed shapes
        qv, kv = rand(500, 8, 128), rand(500, 2, 128)
        cu = offsets(lq)
        out, lse = serving.varlen(qv, kv, kv, cu, cu, 300, 300, causal=True, softcap=20.0)
        counts.append(serving.fast_entries())
        ref, ref_lse = reference.varlen(qv, kv, kv, cu.tolist(), cu.tolist(), None, causal=True,
                                        scale=1 / math.sqrt(128), softcap=20.0)
        close(out, ref, lse, ref_lse)
    assert counts[0] == counts[1] == counts[2] and counts[3] == counts[4] == counts[5] == counts[0] + 1
