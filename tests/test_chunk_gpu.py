"""FA3's attention_chunk and left-padded paged caches on the Hopper kernel, against the float32 reference
(flashcore/reference.py, whose chunk mask tests/test_attention_chunk.py checks against FA3's definition): dense,
packed and KV-cache layouts (contiguous and paged, page sizes 1 to 256), causal or not, windows, softcap, GQA,
split-KV, head dims 64/128/256. Fresh random inputs per case; outputs poisoned with NaN before the call."""

from __future__ import annotations

import math

import pytest
import torch

import flashcore
from flashcore import reference, serving
from tests.test_serving_gpu import close
from tests.test_serving_index_gpu import ints, paged, poisoned, rand, starts

pytestmark = pytest.mark.gpu

DENSE = [
    # (batch, sq, sk, hq, hkv, chunk, causal, window, softcap, num_splits)
    (2, 1000, 1000, 4, 2, 256, True, (-1, -1), 0.0, 1),   # Llama 4's shape of it, chunks of 2 K/V blocks
    (1, 777, 1500, 4, 4, 100, True, (-1, -1), 0.0, 1),    # chunks that divide neither a block nor a length
    (2, 300, 300, 2, 1, 48, False, (-1, -1), 0.0, 1),     # non-causal: the chunk bounds both sides
    (1, 129, 700, 8, 2, 64, True, (90, -1), 0.0, 1),      # a window inside the chunk
    (3, 65, 65, 2, 2, 7, True, (-1, -1), 20.0, 1),        # chunks far below a block, softcap
    (2, 1, 4000, 8, 1, 512, True, (-1, -1), 0.0, 4),      # decode, split-KV: the last chunk only
    (1, 500, 200, 4, 2, 64, True, (-1, -1), 0.0, 1),      # more queries than keys: early rows see nothing
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("case", DENSE, ids=[f"dense{i}" for i in range(len(DENSE))])
def test_dense_chunks_match_the_reference(case: tuple, d: int, dtype: torch.dtype) -> None:
    batch, sq, sk, hq, hkv, chunk, causal, window, cap, splits = case
    q, k, v = rand(batch, sq, hq, d, dtype=dtype), rand(batch, sk, hkv, d, dtype=dtype), rand(batch, sk, hkv, d,
                                                                                             dtype=dtype)
    out, lse = poisoned(batch, sq, hq, d, dtype=dtype), poisoned(batch, hq, sq, dtype=torch.float32)
    serving.dense(q, k, v, causal=causal, window_size=window, softcap=cap, attention_chunk=chunk,
                  num_splits=splits, out=out, lse=lse)
    ref, ref_lse = reference.dense(q, k, v, causal=causal, scale=1 / math.sqrt(d), window=window, softcap=cap,
                                   chunk=chunk)
    for b in range(batch):
        close(out[b], ref[b], lse[b], ref_lse[b])


def test_fa3_entry_points_pass_the_chunk() -> None:
    q, k, v = (rand(2, 600, 4, 128, dtype=torch.bfloat16) for _ in range(3))
    out, lse = flashcore.flash_attn_func(q, k, v, causal=True, attention_chunk=128, return_attn_probs=True)
    ref, ref_lse = reference.dense(q, k, v, causal=True, scale=128 ** -0.5, chunk=128)
    close(out[0], ref[0], lse[0], ref_lse[0])
    cu = ints([0, 600, 1200])
    out2, lse2 = flashcore.flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu, cu, 600, 600,
                                                  causal=True, attention_chunk=128, return_attn_probs=True)
    close(out2[600:], ref[1], lse2[:, 600:], ref_lse[1])


PAGED = [
    # (cache_seqlens, cache_leftpad or None, new, sq, hq, hkv, chunk, causal, window, softcap)
    ([300, 1, 700], [13, 0, 129], 0, 1, 8, 2, 0, True, (-1, -1), 0.0),       # decode behind left pads
    ([400, 129], [1, 128], 2, 3, 4, 4, 0, True, (50, 0), 0.0),              # appends behind the pads, a window
    ([333, 200], [33, 199], 0, 64, 2, 2, 0, False, (17, 9), 10.0),
    ([900, 64], None, 0, 1, 8, 1, 256, True, (-1, -1), 0.0),                 # chunked decode
    ([700, 500], [45, 300], 0, 130, 4, 2, 100, True, (-1, -1), 0.0),         # chunks counted from the pad
]


@pytest.mark.parametrize("page_size", [0, 1, 16, 64, 256])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("case", PAGED, ids=[f"paged{i}" for i in range(len(PAGED))])
def test_kvcache_left_pads_and_chunks_match_the_reference(case: tuple, d: int, page_size: int) -> None:
    lengths, pads, new, sq, hq, hkv, chunk, causal, window, cap = case
    dtype, batch, capacity = torch.bfloat16, len(lengths), 1024
    k_slots, v_slots = rand(batch, capacity, hkv, d, dtype=dtype), rand(batch, capacity, hkv, d, dtype=dtype)
    k_cache, v_cache, table = k_slots.clone(), v_slots.clone(), None
    if page_size:
        k_cache, table = paged(k_slots, page_size)
        v_cache = torch.empty_like(k_cache)
        v_cache[table.flatten().long()] = v_slots.reshape(-1, page_size, hkv, d)
    q = rand(batch, sq, hq, d, dtype=dtype)
    k_new, v_new = rand(batch, new, hkv, d, dtype=dtype), rand(batch, new, hkv, d, dtype=dtype)
    out, lse = poisoned(batch, sq, hq, d, dtype=dtype), poisoned(batch, hq, sq, dtype=torch.float32)
    serving.kvcache(q, k_cache, v_cache, ints(lengths), k=k_new if new else None, v=v_new if new else None,
                    page_table=table, cache_leftpad=None if pads is None else ints(pads), causal=causal,
                    window_size=window, softcap=cap, attention_chunk=chunk, out=out, lse=lse)
    for b in range(batch):
        k_slots[b, lengths[b]:lengths[b] + new], v_slots[b, lengths[b]:lengths[b] + new] = k_new[b], v_new[b]
        keys = slice(0 if pads is None else pads[b], lengths[b] + new)
        ref, ref_lse = reference.sequence(q[b], k_slots[b, keys], v_slots[b, keys], causal=causal,
                                          scale=1 / math.sqrt(d), window=window, softcap=cap, chunk=chunk)
        close(out[b], ref, lse[b], ref_lse)


def test_packed_varlen_chunks_with_used_counts() -> None:
    lq, lk, used_k = [300, 1, 129], [300, 500, 40], [290, 500, 40]
    d, dtype = 128, torch.bfloat16
    q, k, v = rand(sum(lq), 4, d, dtype=dtype), rand(sum(lk), 2, d, dtype=dtype), rand(sum(lk), 2, d, dtype=dtype)
    out, lse = poisoned(sum(lq), 4, d, dtype=dtype), poisoned(4, sum(lq), dtype=torch.float32)
    serving.varlen(q, k, v, ints(starts(lq)), ints(starts(lk)), max(lq), max(lk), seqused_k=ints(used_k),
                   causal=True, attention_chunk=64, out=out, lse=lse)
    cq, ck = starts(lq), starts(lk)
    for b in range(3):
        qs, ks = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b] + used_k[b])
        ref, ref_lse = reference.sequence(q[qs], k[ks], v[ks], causal=True, scale=1 / math.sqrt(d), chunk=64)
        close(out[qs], ref, lse[:, qs], ref_lse)
