"""Attention sinks (s_aux) on the Hopper kernel against the float32 reference (flashcore/reference.py, whose sink rule
tests/test_sinks_cpu.py checks against GPT-OSS's eager sink column): dense (causal or not, windows, softcap, rows
that see no key), split-KV forced (the combine adds the sink), packed queries, paged KV-cache decode with packed GQA
rows (a tile's rows belong to several query heads), head dims 64/128/256, bf16 and fp16, LSE returned. Fresh random
inputs per case; outputs poisoned with NaN before the call."""

from __future__ import annotations

import math

import pytest
import torch

import flashcore
from flashcore import reference, serving
from tests.test_serving_gpu import close
from tests.test_serving_index_gpu import ints, paged, poisoned, rand, starts

pytestmark = pytest.mark.gpu


def sinks_for(hq: int) -> torch.Tensor:
    """Random logits of a trained model's range, one head dominant (its rows mostly sink) and one -inf (no sink)."""
    s = torch.randn(hq, device="cuda") * 3
    s[0] = 20.0
    if hq > 2:
        s[-1] = -math.inf
    return s


DENSE = [
    # (batch, sq, sk, hq, hkv, causal, window, softcap, num_splits)
    (2, 300, 300, 4, 2, False, (-1, -1), 0.0, 1),
    (2, 1000, 1000, 8, 1, True, (-1, -1), 0.0, 1),
    (1, 500, 200, 4, 2, True, (-1, -1), 0.0, 1),      # more queries than keys: early rows see only the sink
    (1, 129, 700, 8, 2, True, (90, -1), 0.0, 1),      # a window
    (3, 65, 650, 4, 4, True, (-1, -1), 30.0, 1),      # softcap: the sink is not capped
    (2, 1, 4000, 8, 1, True, (-1, -1), 0.0, 4),       # decode, split-KV forced: packed GQA partials, combined
    (1, 200, 3000, 4, 2, False, (-1, -1), 0.0, 3),    # prefill split-KV
    (2, 1, 3000, 8, 2, True, (-1, -1), 20.0, 2),      # split-KV with softcap
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("case", DENSE, ids=[f"dense{i}" for i in range(len(DENSE))])
def test_dense_sinks_match_the_reference(case: tuple, d: int, dtype: torch.dtype) -> None:
    batch, sq, sk, hq, hkv, causal, window, cap, splits = case
    q, k, v = rand(batch, sq, hq, d, dtype=dtype), rand(batch, sk, hkv, d, dtype=dtype), rand(batch, sk, hkv, d,
                                                                                             dtype=dtype)
    sinks = sinks_for(hq)
    out, lse = poisoned(batch, sq, hq, d, dtype=dtype), poisoned(batch, hq, sq, dtype=torch.float32)
    serving.dense(q, k, v, causal=causal, window_size=window, softcap=cap, num_splits=splits, out=out, lse=lse,
                  s_aux=sinks)
    want = reference.dense(q, k, v, causal=causal, scale=1 / math.sqrt(d), window=window, softcap=cap, sinks=sinks)
    close(out, want[0], lse, want[1])  # every batch entry at once


def test_flash_attn_func_takes_a_bf16_parameter_as_s_aux() -> None:
    q, k, v = (rand(2, 600, 8, 128, dtype=torch.bfloat16) for _ in range(3))
    sinks = torch.randn(8, device="cuda").to(torch.bfloat16)  # GPT-OSS's nn.Parameter dtype
    out, lse = flashcore.flash_attn_func(q, k, v, causal=True, s_aux=sinks, return_attn_probs=True)
    ref, ref_lse = reference.dense(q, k, v, causal=True, scale=128 ** -0.5, sinks=sinks.float())
    for b in range(2):
        close(out[b], ref[b], lse[b], ref_lse[b])


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_varlen_sinks_match_the_reference(d: int, splits: int) -> None:
    lens_q, lens_k = [5, 0, 1, 300, 129], [5, 7, 900, 300, 500]
    hq, hkv = 8, 2
    cq, ck = starts(lens_q), starts(lens_k)
    q, k, v = rand(cq[-1], hq, d, dtype=torch.bfloat16), rand(ck[-1], hkv, d, dtype=torch.bfloat16), \
        rand(ck[-1], hkv, d, dtype=torch.bfloat16)
    sinks = sinks_for(hq)
    out, lse = flashcore.flash_attn_varlen_func(q, k, v, ints(cq), ints(ck), max(lens_q), max(lens_k), causal=True,
                                                num_splits=splits, s_aux=sinks, return_attn_probs=True)
    ref, ref_lse = reference.varlen(q, k, v, cq, ck, None, causal=True, scale=d ** -0.5, sinks=sinks)
    close(out, ref, lse, ref_lse)


@pytest.mark.parametrize("splits", [0, 1, 4])
@pytest.mark.parametrize("page_size", [16, 64])
@pytest.mark.parametrize("d", [64, 128])
def test_paged_gqa_decode_sinks_match_the_reference(d: int, page_size: int, splits: int) -> None:
    lengths, hq, hkv, capacity = [300, 1, 1000, 77], 8, 1, 1024  # one K/V head: decode packs 8 query heads a tile
    batch = len(lengths)
    k_slots = rand(batch, capacity, hkv, d, dtype=torch.bfloat16)
    v_slots = rand(batch, capacity, hkv, d, dtype=torch.bfloat16)
    k_cache, table = paged(k_slots, page_size)
    v_cache = torch.empty_like(k_cache)
    v_cache[table.flatten().long()] = v_slots.reshape(-1, page_size, hkv, d)
    q = rand(batch, 1, hq, d, dtype=torch.bfloat16)
    sinks = sinks_for(hq)
    out, lse = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=ints(lengths), page_table=table,
                                                 causal=True, num_splits=splits, s_aux=sinks,
                                                 return_softmax_lse=True)
    for b, n in enumerate(lengths):
        ref, ref_lse = reference.sequence(q[b], k_slots[b, :n], v_slots[b, :n], causal=True, scale=d ** -0.5,
                                          sinks=sinks)
        close(out[b], ref, lse[b], ref_lse)


def test_sinks_leave_the_call_without_them_unchanged() -> None:
    """A call without s_aux after calls with it: the kernel's pointer is NULL again (no stale sink)."""
    q, k, v = (rand(1, 257, 4, 128, dtype=torch.bfloat16) for _ in range(3))
    serving.dense(q, k, v, causal=True, s_aux=sinks_for(4))
    out, lse = flashcore.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    ref, ref_lse = reference.dense(q, k, v, causal=True, scale=128 ** -0.5)
    close(out[0], ref[0], lse[0], ref_lse[0])
