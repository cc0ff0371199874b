"""FP8 calls with a window, softcap, chunks, sinks or fallback="sdpa" (flashcore/fp8_modifiers.py): flash_attn_func
and flash_attn_varlen_func run them on the 16-bit path over the inputs dequantized to bf16, each value times its
own factor; a KV cache runs them on a bf16 copy (flashcore/fp8_cache.py, tests/test_fp8_cache.py). On the CPU
(fallback="sdpa"); the references dequantize head by head and sequence by sequence, not with the module's
broadcasting."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402
from flashcore import FlashCoreError, fp8, fp8_modifiers, reference  # noqa: E402

FP8 = torch.float8_e4m3fn


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _fp8(*shape: int, seed: int) -> torch.Tensor:
    return (torch.randn(*shape, generator=_gen(seed)) * 2).to(FP8)


def _factors(batch: int, heads_kv: int, seed: int) -> torch.Tensor:
    return torch.rand(batch, heads_kv, generator=_gen(seed)) * 0.9 + 0.1


def _by_head(x: torch.Tensor, factor: torch.Tensor, seq_of_row: list[int], group: int) -> torch.Tensor:
    """x [rows, H, D] (one sequence index per row) times factor[seq, h // group], head by head, row by row."""
    out = torch.empty(x.shape, dtype=torch.float32)
    for r, b in enumerate(seq_of_row):
        for h in range(x.shape[1]):
            out[r, h] = x[r, h].float() * factor[b, h // group]
    return out.to(torch.bfloat16)


def test_a_window_on_dense_fp8_runs_on_the_dequantized_inputs() -> None:
    q, k, v = _fp8(2, 9, 4, 64, seed=1), _fp8(2, 11, 2, 64, seed=2), _fp8(2, 11, 2, 64, seed=3)
    qd, kd, vd = _factors(2, 2, 4), _factors(2, 2, 5), _factors(2, 2, 6)
    got, lse = flashcore.flash_attn_func(q, k, v, causal=True, window_size=(3, 0), q_descale=qd, k_descale=kd,
                                         v_descale=vd, fallback="sdpa", return_attn_probs=True)
    refs = [torch.stack([_by_head(x[b], f, [b] * x.shape[1], g) for b in range(2)])
            for x, f, g in ((q, qd, 2), (k, kd, 1), (v, vd, 1))]
    want, want_lse = flashcore.flash_attn_func(*refs, causal=True, window_size=(3, 0), fallback="sdpa",
                                               return_attn_probs=True)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want) and torch.equal(lse, want_lse)


@pytest.mark.parametrize("modifier", [{"softcap": 4.0}, {"attention_chunk": 4}, {"s_aux": "sinks"}, {}],
                         ids=["softcap", "chunk", "sinks", "fallback-only"])
def test_each_modifier_runs_on_dense_fp8(modifier: dict[str, Any]) -> None:
    q, k, v = _fp8(1, 8, 2, 64, seed=7), _fp8(1, 8, 1, 64, seed=8), _fp8(1, 8, 1, 64, seed=9)
    kw = {n: (torch.randn(2, generator=_gen(10)) if x == "sinks" else x) for n, x in modifier.items()}
    got = flashcore.flash_attn_func(q, k, v, causal=True, fallback="sdpa", **kw)
    want = flashcore.flash_attn_func(q.to(torch.bfloat16), k.to(torch.bfloat16), v.to(torch.bfloat16), causal=True,
                                     fallback="sdpa", **kw)
    assert torch.isfinite(got).all() and torch.equal(got, want)  # None factors: 1


def test_packed_fp8_rows_take_their_own_sequences_factors() -> None:
    cu_q, cu_k = torch.tensor([0, 3, 8], dtype=torch.int32), torch.tensor([0, 5, 12], dtype=torch.int32)
    q, k, v = _fp8(8, 4, 64, seed=11), _fp8(12, 2, 64, seed=12), _fp8(12, 2, 64, seed=13)
    qd, kd, vd = _factors(2, 2, 14), _factors(2, 2, 15), _factors(2, 2, 16)
    got = flashcore.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 7, causal=True, softcap=3.0, q_descale=qd,
                                           k_descale=kd, v_descale=vd, fallback="sdpa")
    rows_q, rows_k = [0] * 3 + [1] * 5, [0] * 5 + [1] * 7
    want = flashcore.flash_attn_varlen_func(_by_head(q, qd, rows_q, 2), _by_head(k, kd, rows_k, 1),
                                            _by_head(v, vd, rows_k, 1), cu_q, cu_k, 5, 7, causal=True, softcap=3.0,
                                            fallback="sdpa")
    assert torch.equal(got, want)
    swapped = flashcore.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 7, causal=True, softcap=3.0,
                                               q_descale=qd.flip(0), k_descale=kd, v_descale=vd, fallback="sdpa")
    assert not torch.equal(got, swapped)  # the factors of one sequence are not another's


def test_fp8_without_a_modifier_still_takes_the_fp8_kernel() -> None:
    q, k, v = _fp8(1, 8, 2, 64, seed=17), _fp8(1, 8, 1, 64, seed=18), _fp8(1, 8, 1, 64, seed=19)
    with mock.patch.object(fp8, "attention_fp8", return_value=("out", "lse")) as kernel:
        assert flashcore.flash_attn_func(q, k, v, causal=True) == "out"
    assert kernel.call_args.args[0] is q


@pytest.mark.parametrize(("name", "value", "match"), [
    ("q_descale", torch.ones(3, 1), r"q_descale has shape \(3, 1\)"),
    ("k_descale", torch.ones(1, 1, dtype=torch.float64), "k_descale.dtype"),
    ("v_descale", [1.0], "v_descale must be a torch.Tensor"),
])
def test_a_bad_factor_is_named(name: str, value: Any, match: str) -> None:
    q, k, v = _fp8(1, 8, 2, 64, seed=20), _fp8(1, 8, 1, 64, seed=21), _fp8(1, 8, 1, 64, seed=22)
    with pytest.raises(FlashCoreError, match=match):
        flashcore.flash_attn_func(q, k, v, window_size=(2, 2), fallback="sdpa", **{name: value})


def test_mixed_dtypes_are_named_before_any_copy() -> None:
    q, k = _fp8(1, 8, 2, 64, seed=23), _fp8(1, 8, 1, 64, seed=24)
    with pytest.raises(FlashCoreError, match="v.dtype is torch.bfloat16"):
        flashcore.flash_attn_func(q, k, torch.zeros(1, 8, 1, 64, dtype=torch.bfloat16), softcap=2.0, fallback="sdpa")


def test_a_kv_batch_of_one_is_not_broadcast_by_its_factors() -> None:
    q, k, v = _fp8(2, 8, 4, 64, seed=40), _fp8(1, 8, 2, 64, seed=41), _fp8(1, 8, 2, 64, seed=42)
    with pytest.raises(FlashCoreError, match="one batch"):
        flashcore.flash_attn_func(q, k, v, softcap=2.0, fallback="sdpa", k_descale=_factors(2, 2, 43),
                                  v_descale=_factors(2, 2, 44))


def test_packed_v_of_other_rows_than_k_is_not_broadcast_by_its_factors() -> None:
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    q, k, v = _fp8(8, 4, 64, seed=45), _fp8(8, 2, 64, seed=46), _fp8(1, 2, 64, seed=47)
    with pytest.raises(FlashCoreError, match="k and v alike"):
        flashcore.flash_attn_varlen_func(q, k, v, cu, cu, 5, 5, softcap=2.0, fallback="sdpa",
                                         v_descale=_factors(2, 2, 48))


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.float32])
def test_packed_offsets_of_another_dtype_are_named(dtype: torch.dtype) -> None:
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    q, k = _fp8(8, 4, 64, seed=49), _fp8(8, 2, 64, seed=50)
    with pytest.raises(FlashCoreError, match=f"cu_seqlens_q must be an int32 tensor .*got {dtype}"):
        flashcore.flash_attn_varlen_func(q, k, k, cu.to(dtype), cu, 5, 5, softcap=2.0, fallback="sdpa")


def test_a_window_over_an_fp8_kv_cache_runs_on_its_bf16_copy() -> None:
    q, kc, vc = _fp8(2, 1, 4, 64, seed=25), _fp8(2, 16, 2, 64, seed=26), _fp8(2, 16, 2, 64, seed=27)
    lengths = torch.tensor([5, 9], dtype=torch.int32)
    got = flashcore.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lengths, window_size=(4, 0), fallback="sdpa")
    want = flashcore.flash_attn_with_kvcache(*(x.to(torch.bfloat16) for x in (q, kc, vc)), cache_seqlens=lengths,
                                             window_size=(4, 0), fallback="sdpa")
    assert torch.equal(got, want)  # (tests/test_fp8_cache.py: the factors, pages, appends)


def test_fallback_on_the_kernels_gpu_keeps_the_fp8_kernel() -> None:
    q, k, v = _fp8(1, 8, 2, 64, seed=40), _fp8(1, 8, 1, 64, seed=41), _fp8(1, 8, 1, 64, seed=42)
    with mock.patch.object(fp8_modifiers, "_fallback_acts", return_value=False), \
            mock.patch.object(fp8, "attention_fp8", return_value=("out", "lse")) as kernel:
        assert flashcore.flash_attn_func(q, k, v, fallback="sdpa") == "out"  # fallback acts off SM 9.0 only
    assert kernel.call_args.args[0] is q


@pytest.mark.parametrize("head_dim", [96, 192])
def test_a_head_dim_without_an_fp8_kernel_runs_dequantized(head_dim: int) -> None:
    q, k, v = (_fp8(1, 8, h, head_dim, seed=43 + h) for h in (2, 1, 1))
    qd = _factors(1, 1, 46)
    got = flashcore.flash_attn_func(q, k, v, causal=True, q_descale=qd, fallback="sdpa")
    want = flashcore.flash_attn_func(_by_head(q[0], qd, [0] * 8, 2)[None], k.to(torch.bfloat16),
                                     v.to(torch.bfloat16), causal=True, fallback="sdpa")
    assert torch.equal(got, want)


def test_fp8_head_dims_of_q_k_and_v_must_agree() -> None:
    q, k = _fp8(1, 8, 2, 96, seed=47), _fp8(1, 8, 1, 64, seed=48)
    with pytest.raises(FlashCoreError, match=r"head dims are 96, 64, 64 \(q, k, v\): FP8 inputs run q's and k's"):
        flashcore.flash_attn_func(q, k, k, fallback="sdpa")


def test_a_bad_fallback_value_is_named_before_any_copy() -> None:
    q = _fp8(1, 8, 2, 64, seed=46)
    with pytest.raises(FlashCoreError, match="fallback"):
        flashcore.flash_attn_func(q, q[:, :, :1], q[:, :, :1], fallback="bogus")


@pytest.mark.gpu
@pytest.mark.parametrize(("kw", "ref_kw"), [({"window_size": (64, 0)}, {"window": (64, 0)}),
                                            ({"softcap": 20.0}, {"softcap": 20.0}),
                                            ({"attention_chunk": 128}, {"chunk": 128})],
                         ids=["window", "softcap", "chunk"])
def test_fp8_modifiers_on_the_kernel_match_fp32_on_the_dequantized_inputs(kw: dict[str, Any],
                                                                          ref_kw: dict[str, Any]) -> None:
    g = torch.Generator(device="cuda").manual_seed(31)
    q, k, v = ((torch.randn(2, 300, h, 128, device="cuda", generator=g) * 2).to(FP8) for h in (8, 2, 2))
    qd, kd, vd = (torch.rand(2, 2, device="cuda", generator=g) + 0.5 for _ in range(3))
    out = torch.full((2, 300, 8, 128), float("nan"), device="cuda", dtype=torch.bfloat16)
    out.copy_(flashcore.flash_attn_func(q, k, v, causal=True, q_descale=qd, k_descale=kd, v_descale=vd, **kw))
    deq = [reference.dequantize(x, f, 2).to(torch.bfloat16) for x, f in ((q, qd), (k, kd), (v, vd))]
    same_path = flashcore.flash_attn_func(*deq, causal=True, **kw)
    exact, _ = reference.dense(*(x.float() for x in deq), causal=True, scale=128 ** -0.5, **ref_kw)
    assert torch.isfinite(out).all() and torch.equal(out, same_path)
    torch.testing.assert_close(out.float(), exact, atol=2e-2, rtol=2e-2)


def test_fa3s_fp8_pair_192_with_128_runs_dequantized() -> None:
    q, k, v = _fp8(1, 8, 2, 192, seed=90), _fp8(1, 8, 1, 192, seed=91), _fp8(1, 8, 1, 128, seed=92)
    got = flashcore.flash_attn_func(q, k, v, causal=True, fallback="sdpa")
    want = flashcore.flash_attn_func(*(x.to(torch.bfloat16) for x in (q, k, v)), causal=True, fallback="sdpa")
    assert got.shape == (1, 8, 2, 128) and torch.equal(got, want)
