"""FA3's MLA operand qv (flashcore/mla.py): each score is (q . k + qv . v) x scale, the default scale (D + Dv)^-0.5,
on every entry point and layout; checked against the float32 reference over the concatenations [q, qv] and [k, v]
(the same scores by construction), on the CPU (fallback="sdpa") and, marked gpu, on an H100/H200 (torch computes it
there too, with the index values checked on the host: a bad page id raises and the GPU stays usable)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402
from flashcore import UnsupportedArgument, reference  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:flashcore")
D, DV, HQ, HKV = 64, 512, 4, 1


def _t(*shape: int, seed: int, device: str = "cpu") -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator(device=device).manual_seed(seed),
                       device=device).bfloat16()


def _cat(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.cat((a, b), dim=-1).float()


def test_dense_qv_matches_the_concatenated_reference_with_fa3s_default_scale() -> None:
    q, qv = _t(2, 9, HQ, D, seed=1), _t(2, 9, HQ, DV, seed=2)
    k, v = _t(2, 12, HKV, D, seed=3), _t(2, 12, HKV, DV, seed=4)
    out, lse = flashcore.flash_attn_func(q, k, v, qv=qv, causal=True, softcap=3.0, fallback="sdpa",
                                         return_attn_probs=True)
    want, want_lse = reference.dense(_cat(q, qv), _cat(k, v), v.float(), causal=True, scale=(D + DV) ** -0.5,
                                     softcap=3.0)
    assert out.shape == (2, 9, HQ, DV) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, want_lse, atol=1e-4, rtol=1e-4)


def test_varlen_qv_takes_each_sequences_rows_and_an_explicit_scale() -> None:
    q, qv = _t(9, HQ, D, seed=5), _t(9, HQ, DV, seed=6)
    k, v = _t(12, HKV, D, seed=7), _t(12, HKV, DV, seed=8)
    cu_q, cu_k = torch.tensor([0, 4, 9], dtype=torch.int32), torch.tensor([0, 5, 12], dtype=torch.int32)
    out = flashcore.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 7, qv=qv, softmax_scale=0.05, causal=True,
                                           fallback="sdpa")
    want, _ = reference.varlen(_cat(q, qv), _cat(k, v), v.float(), [0, 4, 9], [0, 5, 12], None, causal=True,
                               scale=0.05)
    torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=2e-2)


def test_a_paged_cache_with_an_append_takes_the_latent_values_whole() -> None:
    k_cache, v_cache = _t(8, 4, HKV, D, seed=9), _t(8, 4, HKV, DV, seed=10)
    q, qv = _t(2, 1, HQ, D, seed=11), _t(2, 1, HQ, DV, seed=12)
    k_new, v_new = _t(2, 1, HKV, D, seed=13), _t(2, 1, HKV, DV, seed=14)
    table = torch.tensor([[3, 1, 0, 2], [7, 6, 5, 4]], dtype=torch.int32)
    lengths = torch.tensor([5, 14], dtype=torch.int32)
    out = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, qv=qv, cache_seqlens=lengths,
                                            page_table=table, causal=True, fallback="sdpa")
    for b, n in enumerate((6, 15)):
        kb, vb = reference.cached_keys(k_cache, v_cache, b, n, None, table)
        assert torch.equal(vb[n - 1], v_new[b, 0]) and torch.equal(kb[n - 1], k_new[b, 0])
        want, _ = reference.sequence(_cat(q[b], qv[b]), _cat(kb, vb), vb.float(), causal=True,
                                     scale=(D + DV) ** -0.5)
        torch.testing.assert_close(out[b].float(), want, atol=2e-2, rtol=2e-2)


def test_qv_of_the_wrong_shape_or_fp8_is_named() -> None:
    q, k, v = _t(1, 4, HQ, D, seed=15), _t(1, 4, HKV, D, seed=16), _t(1, 4, HKV, DV, seed=17)
    with pytest.raises(flashcore.FlashCoreError, match=r"qv has shape \(1, 4, 4, 256\): expected q's shape with "
                                                       r"v's head dim, \(1, 4, 4, 512\)"):
        flashcore.flash_attn_func(q, k, v, qv=_t(1, 4, HQ, 256, seed=18), fallback="sdpa")
    with pytest.raises(flashcore.FlashCoreError, match="v's head dim is 64 with q and k's 128"):
        flashcore.flash_attn_func(_t(1, 4, HQ, 128, seed=19), _t(1, 4, HKV, 128, seed=20), k, qv=_t(1, 4, HQ, 64,
                                  seed=21), fallback="sdpa")
    with pytest.raises(UnsupportedArgument, match="^fp8 qv: "):
        flashcore.flash_attn_func(q, k, v, qv=_t(1, 4, HQ, DV, seed=22).to(torch.float8_e4m3fn), fallback="sdpa")


def test_a_v_head_dim_fa3_does_not_pair_with_qs_is_still_refused() -> None:
    q, k, v = _t(1, 4, HQ, 128, seed=23), _t(1, 4, HKV, 128, seed=24), _t(1, 4, HKV, DV, seed=25)
    with pytest.raises(flashcore.FlashCoreError, match="v's head dim is 512"):
        flashcore.flash_attn_func(q, k, v, fallback="sdpa")


@pytest.mark.gpu
def test_an_mla_decode_on_the_gpu_matches_fp32_and_a_bad_page_raises_with_the_gpu_usable() -> None:
    """DeepSeek-style decode as SGLang's FA3 backend calls it: 16 query heads on one latent head, pages of 64."""
    dev = "cuda"
    k_cache, v_cache = _t(40, 64, HKV, D, seed=30, device=dev), _t(40, 64, HKV, DV, seed=31, device=dev)
    q, qv = _t(4, 1, 16, D, seed=32, device=dev), _t(4, 1, 16, DV, seed=33, device=dev)
    table = torch.randperm(40, device=dev)[:40].to(torch.int32).view(4, 10)
    lengths = torch.tensor([1, 200, 640, 377], dtype=torch.int32, device=dev)
    out = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, qv=qv, cache_seqlens=lengths, page_table=table,
                                            causal=True, softmax_scale=0.1)
    for b, n in enumerate(lengths.tolist()):
        kb, vb = reference.cached_keys(k_cache, v_cache, b, n, None, table)
        want, _ = reference.sequence(_cat(q[b], qv[b]), _cat(kb, vb), vb.float(), causal=True, scale=0.1)
        torch.testing.assert_close(out[b].float(), want, atol=2e-2, rtol=2e-2)
    bad = table.clone()
    bad[2, 3] = 40
    with pytest.raises(flashcore.FlashCoreError, match="page_table"):
        flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, qv=qv, cache_seqlens=lengths, page_table=bad)
    torch.cuda.synchronize()
    assert torch.isfinite(flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, qv=qv, cache_seqlens=lengths,
                                                            page_table=table)).all()


@pytest.mark.parametrize("dv", [128, 256, 512])
def test_fa3s_mla_head_dims_without_qv_run_on_torch_at_d_to_the_minus_half(dv: int) -> None:
    q, k, v = _t(2, 5, HQ, D, seed=40), _t(2, 7, HKV, D, seed=41), _t(2, 7, HKV, dv, seed=42)
    out = flashcore.flash_attn_func(q, k, v, causal=True, fallback="sdpa")
    want, _ = reference.dense(q.float(), k.float(), v.float(), causal=True, scale=D ** -0.5)
    assert out.shape == (2, 5, HQ, dv)
    torch.testing.assert_close(out.float(), want, atol=2e-2, rtol=2e-2)


def test_mla_head_dims_take_the_float32_reference_and_warn_once_at_the_callers_line() -> None:
    import warnings

    from flashcore import fallback, mla

    q, k, v = _t(1, 3, HQ, D, seed=50), _t(1, 3, HKV, D, seed=51), _t(1, 3, HKV, 256, seed=52)
    mla._warned.clear()
    with warnings.catch_warnings(record=True) as caught, \
            pytest.MonkeyPatch.context() as patch:
        warnings.simplefilter("always")
        patch.setattr(fallback, "attention", lambda *a, **k: pytest.fail("SDPA's path with its fallback warning"))
        flashcore.flash_attn_func(q.requires_grad_(), k, v, fallback="sdpa")
    mine = [w for w in caught if "FA3's MLA head dims" in str(w.message)]
    assert len(mine) == 1 and mine[0].filename == __file__


def test_an_appended_v_narrower_than_the_latent_cache_is_named_before_anything_is_written() -> None:
    k_cache, v_cache = _t(2, 8, HKV, D, seed=60), _t(2, 8, HKV, DV, seed=61)
    q, qv, k_new = _t(2, 1, HQ, D, seed=62), _t(2, 1, HQ, DV, seed=63), _t(2, 1, HKV, D, seed=64)
    before = (k_cache.clone(), v_cache.clone())
    with pytest.raises(flashcore.FlashCoreError, match=r"v is \(2, 1, 1, 256\): the appended values have k's shape "
                                                       r"with v_cache's head dim, \(2, 1, 1, 512\)"):
        flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, _t(2, 1, HKV, 256, seed=65), qv=qv,
                                          cache_seqlens=torch.tensor([2, 3], dtype=torch.int32), fallback="sdpa")
    assert torch.equal(k_cache, before[0]) and torch.equal(v_cache, before[1])


def test_fp8_with_a_latent_v_and_no_qv_is_named_for_what_it_is() -> None:
    q, k, v = (_t(1, 4, h, d, seed=66).to(torch.float8_e4m3fn) for h, d in ((HQ, D), (HKV, D), (HKV, 256)))
    with pytest.raises(flashcore.FlashCoreError, match="v's head dim is 256 with q's 64: FP8 inputs take"):
        flashcore.flash_attn_func(q, k, v, q_descale=torch.ones(1, HKV), fallback="sdpa")
