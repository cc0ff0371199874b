"""FP8 on the serving layouts, the host side on the CPU: what runs (packed batches, contiguous caches and hdim-128
paged caches build an FP8 Call whose descales are [sequences, Hkv] and reach fc_params), what takes the bf16 copy
of the cache instead (other pages, a paged left pad, windows, softcap, chunks, sinks, the fallback), descales with
16-bit inputs and descales of the wrong shape raise naming them, and FP8 appends go to the 16-bit append kernel as
byte pairs. The kernel side is tests/test_fp8_layouts_gpu.py."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
import torch

import flashcore
from flashcore import _lib, check_serving, fp8_cache, launch, serving
from flashcore.call import Call
from flashcore.errors import FlashCoreError

E4M3 = torch.float8_e4m3fn
SDPA = {"fallback": "sdpa"}  # the checks' CPU device type (FP8 itself refuses the fallback before running)


def rand(*shape: int, dtype: torch.dtype = E4M3) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape))).to(dtype)


def i32(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def varlen_call(dtype: torch.dtype = E4M3) -> Call:
    """Three packed sequences (lengths 4, 0, 6 queries; 5, 1, 6 keys), Hq 4, Hkv 2, D 128."""
    q, k, v = rand(10, 4, 128, dtype=dtype), rand(12, 2, 128, dtype=dtype), rand(12, 2, 128, dtype=dtype)
    return check_serving.varlen(q, k, v, i32(0, 4, 4, 10), i32(0, 5, 6, 12), 6, 6, seqused_q=None, seqused_k=None,
                                causal=True, softmax_scale=None, window_size=(-1, -1), softcap=0.0,
                                deterministic=False, out=None, lse=None, **SDPA)


def cache_call(dtype: torch.dtype = E4M3, entries: int = 5) -> Call:
    """Two sequences, one query each, into a cache of `entries` entries through cache_batch_idx."""
    q, k_cache, v_cache = rand(2, 1, 4, 128, dtype=dtype), rand(entries, 64, 2, 128, dtype=dtype), \
        rand(entries, 64, 2, 128, dtype=dtype)
    return check_serving.kvcache(q, k_cache, v_cache, i32(3, 40), k_new=None, v_new=None,
                                 cache_batch_idx=i32(4, 1), page_table=None, causal=False, softmax_scale=None,
                                 window_size=(-1, -1), softcap=0.0, num_splits=None, sm_margin=0, out=None, lse=None,
                                 **SDPA)


def test_fp8_varlen_call_checks_and_takes_descales_per_sequence() -> None:
    call = varlen_call()
    assert call.fp8 and call.batch == 3
    ones = torch.ones(3, 2)
    with_ds = serving.with_descales(call, ones, ones * 2, None)
    assert with_ds.q_descale is ones and with_ds.v_descale is None
    p = launch.params(with_ds, torch.empty(10, 4, 128, dtype=torch.bfloat16), None)
    assert p.dtype == _lib.FC_E4M3 and p.q_descale == ones.data_ptr() and p.v_descale is None
    assert p.cu_seqlens_q == call.cu_seqlens_q.data_ptr() and p.batch == 3 and p.total_q == 10
    assert p.fp8_v_transpose == 0  # auto: the kernel picks the shared-memory transpose for packed rows


def test_fp8_descales_of_a_packed_batch_are_sequences_by_kv_heads() -> None:
    with pytest.raises(FlashCoreError, match=r"k_descale has shape \(1, 2\): expected \[B, Hkv\] = \(3, 2\) "
                                             r"\(one factor per sequence and K/V head"):
        serving.with_descales(varlen_call(), None, torch.ones(1, 2), None)


def test_fp8_descales_of_a_cache_call_are_the_calls_batch_not_the_caches_entries() -> None:
    call = cache_call(entries=5)
    assert serving.with_descales(call, torch.ones(2, 2), None, None).q_descale is not None
    with pytest.raises(FlashCoreError, match=r"q_descale has shape \(5, 2\): expected \[B, Hkv\] = \(2, 2\)"):
        serving.with_descales(call, torch.ones(5, 2), None, None)


@pytest.mark.parametrize("make", [varlen_call, cache_call])
def test_descales_with_16_bit_serving_inputs_raise_naming_them(make: Any) -> None:
    call = make(torch.bfloat16)
    assert serving.with_descales(call, None, None, None) is call
    with pytest.raises(FlashCoreError, match="v_descale is given but q is torch.bfloat16: descale factors apply to "
                                             "float8_e4m3fn inputs only"):
        serving.with_descales(call, None, None, torch.ones(call.batch, 2))


def test_fp8_serving_out_must_be_bf16() -> None:
    q, k, v = rand(10, 4, 128), rand(12, 2, 128), rand(12, 2, 128)
    with pytest.raises(FlashCoreError, match="out must have q's dtype .bf16 for FP8 inputs."):
        check_serving.varlen(q, k, v, i32(0, 10), i32(0, 12), 10, 12, seqused_q=None, seqused_k=None, causal=False,
                             softmax_scale=None, window_size=(-1, -1), softcap=0.0, deterministic=False,
                             out=torch.empty(10, 4, 128).to(E4M3), lse=None, **SDPA)


def test_fp8_serving_refuses_a_head_dim_fp8_does_not_run() -> None:
    q, k, v = rand(10, 4, 96), rand(12, 2, 96), rand(12, 2, 96)
    with pytest.raises(FlashCoreError, match="FP8 inputs run head dims"):
        check_serving.varlen(q, k, v, i32(0, 10), i32(0, 12), 10, 12, seqused_q=None, seqused_k=None, causal=False,
                             softmax_scale=None, window_size=(-1, -1), softcap=0.0, deterministic=False, out=None,
                             lse=None, **SDPA)


def _varlen(**kw: Any) -> Any:
    q, k, v = rand(10, 4, 128), rand(12, 2, 128), rand(12, 2, 128)
    return flashcore.flash_attn_varlen_func(q, k, v, i32(0, 10), i32(0, 12), 10, 12, **kw)


def _kvcache(d: int = 128, page_size: int = 64, **kw: Any) -> Any:
    q, k_cache, v_cache = rand(2, 1, 4, d), rand(4, page_size, 2, d), rand(4, page_size, 2, d)
    return flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=i32(3, 40), **kw)


PAGES = {"page_table": i32(0, 1, 2, 3).view(2, 2)}


@pytest.mark.parametrize("kwargs", [
    {"window_size": (8, 0)}, {"softcap": 30.0}, {"attention_chunk": 16}, {"s_aux": torch.zeros(4)},
    {"fallback": "sdpa"}, {"d": 64, **PAGES}, {"d": 256, **PAGES}, {"page_size": 8, **PAGES},
    {"cache_leftpad": i32(0, 1), **PAGES},
], ids=["window", "softcap", "chunk", "sinks", "fallback", "paged-d64", "paged-d256", "pages-8", "paged-leftpad"])
def test_what_fp8_kernels_lack_on_a_cache_takes_the_bf16_copy(kwargs: dict[str, Any]) -> None:
    # (tests/test_fp8_cache.py checks the values; here: the route, with no FP8 kernel call)
    with mock.patch.object(fp8_cache, "run", return_value=("out", "lse")) as route:
        assert _kvcache(**{"fallback": "sdpa", **kwargs}) == "out"
    assert route.call_count == 1


def test_fp8_paged_cache_at_head_dim_128_with_pages_of_16_keys_checks_into_a_call() -> None:
    q, k_pages, v_pages = rand(2, 1, 4, 128), rand(6, 16, 2, 128), rand(6, 16, 2, 128)
    table = i32(5, 0, 3, 1, 2, 4).view(2, 3)
    call = check_serving.kvcache(q, k_pages, v_pages, i32(3, 40), k_new=None, v_new=None, cache_batch_idx=None,
                                 page_table=table, causal=False, softmax_scale=None, window_size=(-1, -1),
                                 softcap=0.0, num_splits=None, sm_margin=0, out=None, lse=None, **SDPA)
    call = serving.with_descales(call, torch.ones(2, 2), None, None)
    p = launch.params(call, torch.empty(2, 1, 4, 128, dtype=torch.bfloat16), None)
    assert p.dtype == _lib.FC_E4M3 and p.page_size == 16 and p.page_table == table.data_ptr()
    with mock.patch.object(fp8_cache, "run", return_value=("out", "lse")) as route:
        _kvcache(page_size=24, fallback="sdpa", **PAGES)
    assert route.call_count == 1  # pages of 24 keys: not the FP8 kernel's TMA boxes


def test_fp8_appends_go_as_byte_pairs() -> None:
    k = rand(2, 3, 2, 128)
    pairs = serving.byte_pairs("k", k)
    assert pairs.dtype == torch.float16 and pairs.shape == (2, 3, 2, 64)
    assert torch.equal(pairs.view(torch.uint8), k.view(torch.uint8))
    with pytest.raises(FlashCoreError, match=r"k has stride .*: FP8 appends need a contiguous last dim"):
        serving.byte_pairs("k", rand(2, 3, 128, 2).transpose(2, 3))
