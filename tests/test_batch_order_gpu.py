"""Ragged decode in the longest-first sequence order (kernel/zero_words.cuh writes it, kernel/tile_scheduler.h reads
it) on the H100 against the float32 reference (flashcore/reference.py): batches big enough for a dynamic order (48
sequences x 4 K/V heads x splits: several tiles per SM), lengths drawn fresh per case (0 and 1 included), contiguous
and paged caches (TMA boxes and the gathered small pages), packed keys, and bad lengths, which must not move any
other sequence. Outputs poisoned (NaN) first; every checked row must be finite."""

from __future__ import annotations

import math
import random

import pytest
import torch

import flashcore
from flashcore import reference, serving
from tests.test_one_wg_gpu import decode_outputs, paged_decode_matches
from tests.test_serving_gpu import close, rand

pytestmark = pytest.mark.gpu
HQ, HKV, D, CAPACITY = 16, 4, 128, 4096


def _lengths(batch: int) -> list[int]:
    rng = random.Random()
    return [0, 1, CAPACITY, *(rng.randint(1, CAPACITY) for _ in range(batch - 3))]


@pytest.mark.parametrize("splits", [None, 2])
def test_contiguous_cache(splits: int | None) -> None:
    lengths = _lengths(48)
    k_cache, v_cache = rand(len(lengths), CAPACITY, HKV, D), rand(len(lengths), CAPACITY, HKV, D)
    q = rand(len(lengths), 1, HQ, D)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out, lse = decode_outputs(len(lengths), HQ, D)
    serving.kvcache(q, k_cache, v_cache, seqlens, causal=True, num_splits=splits, out=out, lse=lse, debug_checks=True)
    again, _ = decode_outputs(len(lengths), HQ, D)
    serving.kvcache(q, k_cache, v_cache, seqlens, causal=True, num_splits=splits, out=again, debug_checks=True)
    assert torch.equal(out, again)  # the order never changes a bit
    for b, n in enumerate(lengths):
        ref, ref_lse = reference.sequence(q[b], k_cache[b, :n], v_cache[b, :n], causal=True, scale=1 / math.sqrt(D))
        close(out[b], ref, lse[b], ref_lse)


@pytest.mark.parametrize("page", [64, 16, 1])
def test_paged_cache(page: int) -> None:
    paged_decode_matches(_lengths(48), page, HQ, HKV, D, causal=True, splits=None, debug_checks=True)


def test_packed_keys() -> None:
    """flash_attn_varlen_func with one query row per sequence: cu_seqlens_k orders the sequences."""
    lengths = _lengths(48)
    cu_k = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    cu_q = torch.arange(len(lengths) + 1, dtype=torch.int32, device="cuda")
    k, v = rand(sum(lengths), HKV, D), rand(sum(lengths), HKV, D)
    q = rand(len(lengths), HQ, D)
    out = flashcore.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 1, max(lengths), causal=True)
    out = out[0] if isinstance(out, tuple) else out
    for b, n in enumerate(lengths):
        lo = int(cu_k[b])
        ref, _ = reference.sequence(q[b:b + 1], k[lo:lo + n], v[lo:lo + n], causal=True, scale=1 / math.sqrt(D))
        if n == 0:
            continue  # FA3 leaves a row without keys as it is; the reference has no value for it
        torch.testing.assert_close(out[b:b + 1].float(), ref.to(out.dtype).float(), atol=2e-2, rtol=2e-2)


def test_a_bad_length_leaves_the_other_sequences_right() -> None:
    lengths = _lengths(48)
    k_cache, v_cache = rand(len(lengths), CAPACITY, HKV, D), rand(len(lengths), CAPACITY, HKV, D)
    q = rand(len(lengths), 1, HQ, D)
    bad = 7
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    seqlens[bad] = 2**31 - 1  # sorts first; the kernel's own check makes its rows NaN
    out, lse = decode_outputs(len(lengths), HQ, D)
    serving.kvcache(q, k_cache, v_cache, seqlens, causal=True, out=out, lse=lse, debug_checks=False)
    with pytest.raises(flashcore.FlashCoreError, match="cache_seqlens"):
        flashcore.check_errors()
    assert out[bad].isnan().all()
    for b, n in enumerate(lengths):
        if b == bad:
            continue
        ref, ref_lse = reference.sequence(q[b], k_cache[b, :n], v_cache[b, :n], causal=True, scale=1 / math.sqrt(D))
        close(out[b], ref, lse[b], ref_lse)
