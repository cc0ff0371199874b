"""Attention sinks (s_aux) without a GPU: the reference against HF GPT-OSS's eager rule (a sink column beside the
scaled scores, softmax, column dropped) on random inputs, every FA3 entry through the CPU fallback, the argument
checks, the ctypes mirror and launch parameters, and the HF integration against GPT-OSS's own eager attention."""

from __future__ import annotations

import math
import types

import pytest
import torch

from flashcore import _lib, launch, reference, serving
from flashcore.errors import FlashCoreError
from flashcore.flash_attn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache


def rand(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype)


def eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sinks: torch.Tensor, *, causal: bool, scale: float,
          window: tuple[int, int] = (-1, -1), softcap: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence by hand, float64: q [Sq, Hq, D], k, v [Sk, Hkv, D]; the sink concatenated as a last column."""
    sq, hq, _ = q.shape
    sk, hkv, _ = k.shape
    k64 = k.double().repeat_interleave(hq // hkv, dim=1)
    v64 = v.double().repeat_interleave(hq // hkv, dim=1)
    s = torch.einsum("qhd,khd->hqk", q.double(), k64) * scale
    if softcap > 0:
        s = torch.tanh(s / softcap) * softcap
    s = s.masked_fill(~reference.visible(sq, sk, slice(None), causal, window, q.device), -math.inf)
    col = sinks.double()[:, None, None].expand(hq, sq, 1)
    logits = torch.cat([s, col], dim=-1)
    probs = torch.softmax(logits, dim=-1)[..., :-1]
    out = torch.einsum("hqk,khd->qhd", probs, v64)
    return out, torch.logsumexp(logits, dim=-1)


CASES = [  # (sq, sk, hq, hkv, causal, window, softcap)
    (6, 10, 4, 4, False, (-1, -1), 0.0),
    (7, 7, 4, 2, True, (-1, -1), 0.0),
    (9, 5, 4, 1, True, (-1, -1), 0.0),  # the first 4 rows see no key
    (8, 12, 6, 2, True, (3, 0), 0.0),
    (5, 9, 4, 2, False, (2, 1), 0.0),
    (6, 8, 4, 2, True, (-1, -1), 5.0),
]


@pytest.mark.parametrize("case", CASES)
def test_reference_is_the_sink_column_softmax(case: tuple) -> None:
    sq, sk, hq, hkv, causal, window, cap = case
    q, k, v = rand(sq, hq, 64), rand(sk, hkv, 64), rand(sk, hkv, 64)
    sinks = torch.randn(hq) * 3
    out, lse = reference.sequence(q, k, v, causal=causal, scale=0.125, window=window, softcap=cap, sinks=sinks)
    want_out, want_lse = eager(q, k, v, sinks, causal=causal, scale=0.125, window=window, softcap=cap)
    torch.testing.assert_close(out.double(), want_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), want_lse, atol=1e-5, rtol=1e-5)


def test_a_row_without_keys_gets_zero_out_and_the_sink_as_lse() -> None:
    q, k, v = rand(9, 2, 64), rand(5, 2, 64), rand(5, 2, 64)
    sinks = torch.tensor([0.5, -2.0])
    out, lse = reference.sequence(q, k, v, causal=True, scale=0.125, sinks=sinks)
    assert (out[:4] == 0).all()
    assert torch.equal(lse[:, :4], sinks[:, None].expand(2, 4))
    empty_out, empty_lse = flash_attn_func(q[None], k[None, :0], v[None, :0], causal=True, s_aux=sinks,
                                           return_attn_probs=True, fallback="sdpa")
    assert (empty_out == 0).all() and torch.equal(empty_lse[0], sinks[:, None].expand(2, 9))


def test_a_very_large_sink_leaves_out_near_zero_without_overflow() -> None:
    q, k, v = rand(4, 2, 64), rand(6, 2, 64), rand(6, 2, 64)
    out, lse = reference.sequence(q, k, v, causal=False, scale=0.125, sinks=torch.tensor([80.0, -80.0]))
    assert torch.isfinite(out).all() and out[:, 0].abs().max() < 1e-20
    assert torch.allclose(lse[0], torch.full((4,), 80.0))


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_func_takes_s_aux_on_the_fallback(causal: bool) -> None:
    q, k, v = rand(2, 7, 4, 64), rand(2, 9, 2, 64), rand(2, 9, 2, 64)
    sinks = torch.randn(4, dtype=torch.bfloat16)  # the model's dtype: converted to float32
    out, lse = flash_attn_func(q, k, v, causal=causal, s_aux=sinks, return_attn_probs=True, fallback="sdpa")
    for b in range(2):
        want_out, want_lse = eager(q[b], k[b], v[b], sinks.float(), causal=causal, scale=0.125)
        torch.testing.assert_close(out[b].float(), want_out.float(), atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(lse[b], want_lse.float(), atol=1e-4, rtol=1e-4)
    plain = flash_attn_func(q, k, v, causal=causal, fallback="sdpa")
    assert not torch.equal(out, plain)  # the sink changed the answer


def test_varlen_and_paged_kvcache_take_s_aux_on_the_fallback() -> None:
    cu_q = torch.tensor([0, 3, 8], dtype=torch.int32)
    cu_k = torch.tensor([0, 6, 10], dtype=torch.int32)
    q, k, v = rand(8, 4, 64), rand(10, 2, 64), rand(10, 2, 64)
    sinks = torch.randn(4)
    out, lse = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 6, causal=True, s_aux=sinks, return_attn_probs=True,
                                      fallback="sdpa")
    for b in range(2):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        want_out, want_lse = eager(q[qs], k[ks], v[ks], sinks, causal=True, scale=0.125)
        torch.testing.assert_close(out[qs].float(), want_out.float(), atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(lse[:, qs], want_lse.float(), atol=1e-4, rtol=1e-4)
    # a paged cache: 2 sequences, pages of 4 keys
    kc, vc = rand(6, 4, 2, 64), rand(6, 4, 2, 64)
    table = torch.tensor([[5, 0, 3], [1, 2, 4]], dtype=torch.int32)
    seqlens = torch.tensor([9, 5], dtype=torch.int32)
    qd = rand(2, 2, 4, 64)
    out, lse = flash_attn_with_kvcache(qd, kc, vc, cache_seqlens=seqlens, page_table=table, causal=True,
                                       s_aux=sinks, return_softmax_lse=True, fallback="sdpa")
    for b in range(2):
        kb, vb = reference.cached_keys(kc, vc, b, int(seqlens[b]), None, table)
        want_out, want_lse = eager(qd[b], kb, vb, sinks, causal=True, scale=0.125)
        torch.testing.assert_close(out[b].float(), want_out.float(), atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(lse[b], want_lse.float(), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("s_aux", "match"), [
    ([0.0] * 4, "s_aux must be a torch.Tensor"),
    (torch.zeros(4, dtype=torch.int32), r"s_aux.dtype is torch.int32"),
    (torch.zeros(3), r"s_aux has shape \(3,\): expected \[Hq\] = \(4,\)"),
    (torch.zeros(1, 4), r"s_aux has shape \(1, 4\)"),
    (torch.zeros(4, device="meta"), "s_aux is on meta but q is on cpu"),
])
def test_bad_s_aux_is_refused_by_name(s_aux: object, match: str) -> None:
    q, k = rand(1, 3, 4, 64), rand(1, 5, 2, 64)
    with pytest.raises(FlashCoreError, match=match):
        flash_attn_func(q, k, k, s_aux=s_aux, fallback="sdpa")


def test_learnable_sinks_run_through_fa3s_names_and_their_backward_raises() -> None:
    from flashcore import serving

    q, k = rand(1, 3, 4, 64), rand(1, 5, 2, 64)
    sinks = torch.zeros(4, requires_grad=True)
    out = flash_attn_func(q, k, k, s_aux=sinks, fallback="sdpa")  # as fa3-fwd: the forward runs
    with pytest.raises(FlashCoreError, match="forward-only"):
        out.float().sum().backward()
    assert sinks.grad is None
    with pytest.raises(FlashCoreError, match="s_aux requires grad"):  # flashcore's own entry points refuse it
        serving.dense(q, k, k, s_aux=sinks, fallback="sdpa")


def test_fp8_with_s_aux_runs_on_the_dequantized_inputs() -> None:
    q = torch.randn(1, 4, 2, 64, generator=torch.Generator().manual_seed(3)).to(torch.float8_e4m3fn)
    sinks = torch.tensor([0.5, -1.0])
    got = flash_attn_func(q, q, q, s_aux=sinks, fallback="sdpa")
    assert torch.equal(got, flash_attn_func(*(q.to(torch.bfloat16),) * 3, s_aux=sinks, fallback="sdpa"))


def test_fp8_with_s_aux_over_a_kv_cache_runs_as_the_16_bit_call_on_its_values() -> None:
    g = torch.Generator().manual_seed(3)
    q, cache = (torch.randn(*s, generator=g).to(torch.float8_e4m3fn) for s in ((1, 1, 2, 64), (1, 8, 2, 64)))
    sinks, lengths = torch.randn(2, generator=g), torch.tensor([4], dtype=torch.int32)
    got = flash_attn_with_kvcache(q, cache, cache, cache_seqlens=lengths, s_aux=sinks, fallback="sdpa")
    want = flash_attn_with_kvcache(q.to(torch.bfloat16), *(cache.to(torch.bfloat16),) * 2, cache_seqlens=lengths,
                                   s_aux=sinks, fallback="sdpa")
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)


def test_a_strided_s_aux_is_made_contiguous_float32() -> None:
    from flashcore import check

    got = check.sinks(torch.arange(8.0, dtype=torch.float16)[::2], 4, torch.device("cpu"))
    assert got is not None and got.dtype == torch.float32 and got.is_contiguous()
    assert got.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_fc_params_ends_with_sinks_and_launch_sets_its_pointer() -> None:
    names = [f[0] for f in _lib.FcParams._fields_]
    assert "sinks" in names and names.index("sinks") > names.index("attention_chunk")
    q, k = rand(1, 3, 4, 64), rand(1, 5, 2, 64)
    sinks = torch.zeros(4)
    call = serving.check.dense(q, k, k, device_type="cpu", fallback="sdpa")
    from dataclasses import replace

    p = launch.params(replace(call, sinks=sinks), q, None)
    assert p.sinks == sinks.data_ptr()
    assert launch.params(call, q, None).sinks is None
    # fc_plan's cache key holds whether sinks are set, not their address (one plan for every layer's sinks)
    other = launch.params(replace(call, sinks=torch.ones(4)), q, None)
    assert launch.plan_key(p, 0) == launch.plan_key(other, 0) != launch.plan_key(launch.params(call, q, None), 0)


def test_hf_attention_maps_s_aux_like_gpt_oss_eager() -> None:
    pytest.importorskip("transformers")
    from transformers.models.gpt_oss import modeling_gpt_oss

    import flashcore.integrations.transformers as fct

    b, hq, hkv, s, d = 2, 4, 2, 6, 64
    q, k, v = (torch.randn(b, h, s, d, dtype=torch.float32) for h in (hq, hkv, hkv))
    module = types.SimpleNamespace(sinks=torch.randn(hq), num_key_value_groups=hq // hkv, training=False,
                                   is_causal=True)
    causal_mask = torch.full((s, s), -math.inf).triu(1)[None, None]
    want, _ = modeling_gpt_oss.eager_attention_forward(module, q, k, v, causal_mask, scaling=d**-0.5)
    with torch.no_grad():
        got, _ = fct.attention_forward(module, q.bfloat16(), k.bfloat16(), v.bfloat16(), None, scaling=d**-0.5,
                                       is_causal=True, fallback="sdpa", s_aux=module.sinks)
    torch.testing.assert_close(got.float(), want, atol=3e-2, rtol=3e-2)
    with torch.no_grad():
        by_name, _ = fct.attention_forward(module, q.bfloat16(), k.bfloat16(), v.bfloat16(), None, scaling=d**-0.5,
                                           is_causal=True, fallback="sdpa", sinks=module.sinks)
    assert torch.equal(by_name, got)
