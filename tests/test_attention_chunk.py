"""FA3's attention_chunk (chunked local attention) on the CPU: the float32 reference's mask against FA3's own
definition (hopper/test_util.py construct_chunk_mask OR its local mask), the fallback of each entry point against
the reference, and the argument's checks. The kernel's side: tests/test_chunk_gpu.py."""

from __future__ import annotations

import math

import pytest
import torch

import flashcore
from flashcore import reference

torch.manual_seed(0)


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape).to(torch.bfloat16)


def ints(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def fa3_mask(sq: int, sk: int, chunk: int, causal: bool, window: tuple[int, int]) -> torch.Tensor:
    """[Sq, Sk] True where FA3 keeps the score: its chunk mask OR its local mask, negated (written from FA3's
    definition: col_limit_left_chunk = x - x % C with x = row + Sk - Sq)."""
    row = torch.arange(sq)[:, None]
    col = torch.arange(sk)[None, :]
    x = row + sk - sq
    start = x - x % chunk
    masked = (col < start) | (col >= start + chunk)
    left, right = window
    if causal:
        right = 0
    if right >= 0:
        masked |= col > torch.minimum(x + right, torch.tensor(sk))
    if left >= 0:
        masked |= col < x - left
    return ~masked


@pytest.mark.parametrize("sq,sk", [(1, 1), (7, 7), (5, 40), (40, 5), (33, 100), (64, 64)])
@pytest.mark.parametrize("chunk", [1, 3, 8, 16, 1000])
@pytest.mark.parametrize("causal,window", [(True, (-1, -1)), (False, (-1, -1)), (True, (4, -1)), (False, (5, 2))])
def test_the_reference_mask_is_fa3s(sq: int, sk: int, chunk: int, causal: bool, window: tuple[int, int]) -> None:
    got = reference.visible(sq, sk, slice(None), causal, window, torch.device("cpu"), chunk)
    assert torch.equal(got, fa3_mask(sq, sk, chunk, causal, window))


def _check(out: torch.Tensor, lse: torch.Tensor, ref: torch.Tensor, ref_lse: torch.Tensor) -> None:
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, ref_lse)


@pytest.mark.parametrize("causal,window", [(True, (-1, -1)), (False, (-1, -1)), (True, (9, -1))])
def test_func_with_chunks_matches_the_reference(causal: bool, window: tuple[int, int]) -> None:
    q, k, v = rand(2, 37, 4, 64), rand(2, 45, 2, 64), rand(2, 45, 2, 64)
    out, lse = flashcore.flash_attn_func(q, k, v, causal=causal, window_size=window, attention_chunk=16,
                                         return_attn_probs=True, fallback="sdpa")
    ref, ref_lse = reference.dense(q, k, v, causal=causal, scale=1 / 8, window=window, chunk=16)
    _check(out, lse, ref, ref_lse)
    plain, _ = reference.dense(q, k, v, causal=causal, scale=1 / 8, window=window)
    assert not torch.allclose(ref, plain, atol=1e-3)  # the chunks changed the result: the test can fail


def test_varlen_with_chunks_masks_each_sequence_from_its_first_key() -> None:
    lq, lk = [5, 0, 40], [9, 3, 33]
    cu_q, cu_k = [0, 5, 5, 45], [0, 9, 12, 45]
    q, k, v = rand(45, 2, 64), rand(45, 2, 64), rand(45, 2, 64)
    out, lse = flashcore.flash_attn_varlen_func(q, k, v, ints(cu_q), ints(cu_k), max(lq), max(lk), causal=True,
                                                attention_chunk=8, return_attn_probs=True, fallback="sdpa")
    for b in range(3):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        ref, ref_lse = reference.sequence(q[qs], k[ks], v[ks], causal=True, scale=1 / 8, chunk=8)
        _check(out[qs], lse[:, qs], ref, ref_lse)


def test_kvcache_with_chunks_and_a_left_pad_counts_chunks_from_the_pad() -> None:
    """FA3 counts chunks on the sequence's own keys: behind a left pad the first chunk starts at the pad."""
    lengths, pads = [30, 17], [7, 0]
    k_cache, v_cache, q = rand(2, 40, 2, 64), rand(2, 40, 2, 64), rand(2, 3, 4, 64)
    out, lse = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=ints(lengths),
                                                 cache_leftpad=ints(pads), causal=True, attention_chunk=8,
                                                 return_softmax_lse=True, fallback="sdpa")
    for b in range(2):
        keys = slice(pads[b], lengths[b])
        ref, ref_lse = reference.sequence(q[b], k_cache[b, keys], v_cache[b, keys], causal=True, scale=1 / 8,
                                          chunk=8)
        _check(out[b], lse[b], ref, ref_lse)


@pytest.mark.parametrize("value", [-1, 1.5, True, "8", 2**31])
def test_a_bad_chunk_is_refused_naming_it(value: object) -> None:
    q = rand(1, 4, 2, 64)
    with pytest.raises(flashcore.FlashCoreError, match="attention_chunk is"):
        flashcore.flash_attn_func(q, q, q, attention_chunk=value, fallback="sdpa")


def test_fp8_with_chunks_runs_on_the_dequantized_inputs() -> None:
    q = torch.randn(1, 12, 2, 64, generator=torch.Generator().manual_seed(5)).to(torch.float8_e4m3fn)
    got = flashcore.flash_attn_func(q, q, q, causal=True, attention_chunk=4, fallback="sdpa")
    want = flashcore.flash_attn_func(*(q.to(torch.bfloat16),) * 3, causal=True, attention_chunk=4, fallback="sdpa")
    assert torch.equal(got, want)


def test_a_chunk_past_every_length_changes_nothing() -> None:
    q, k, v = rand(1, 9, 2, 64), rand(1, 9, 2, 64), rand(1, 9, 2, 64)
    a = flashcore.flash_attn_func(q, k, v, causal=True, attention_chunk=64, fallback="sdpa")
    b = flashcore.flash_attn_func(q, k, v, causal=True, fallback="sdpa")
    torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)
    assert math.isfinite(float(a.float().abs().max()))
