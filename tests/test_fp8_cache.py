"""An FP8 KV cache with what the FP8 kernels do not compile (flashcore/fp8_cache.py): flash_attn_with_kvcache runs
it on the 16-bit path over a bf16 copy of the caches, the factors folded into q and the output. Checked against the
float32 reference on each sequence's keys dequantized with its own factors (flashcore/reference.py), on the CPU
(fallback="sdpa") and, marked gpu, on the kernel; appends land in the caller's E4M3 caches, and nothing else there
changes."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402
from flashcore import fp8_cache, reference, serving  # noqa: E402

FP8 = torch.float8_e4m3fn
HQ, HKV, D = 4, 2, 64


def _gen(seed: int, device: str = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _fp8(*shape: int, seed: int, device: str = "cpu") -> torch.Tensor:
    return (torch.randn(*shape, generator=_gen(seed, device), device=device) * 2).to(FP8)


def _factors(batch: int, seed: int, device: str = "cpu") -> torch.Tensor:
    return torch.rand(batch, HKV, generator=_gen(seed, device), device=device) * 0.9 + 0.1


def _expected(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, lengths: list[int],
              table: torch.Tensor | None, factors: list[torch.Tensor], *, left: list[int] | None = None,
              **kw: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence by sequence: its keys dequantized with its own factors, float32 attention (bottom-right causal)."""
    qd, kd, vd = factors
    outs, lses = [], []
    for b, n in enumerate(lengths):
        k, v = reference.cached_keys(k_cache, v_cache, b, n, None, table, 0 if left is None else left[b])
        qb = reference.dequantize(q[b:b + 1], qd[b:b + 1], HKV)
        kb = reference.dequantize(k[None], kd[b:b + 1], HKV)
        vb = reference.dequantize(v[None], vd[b:b + 1], HKV)
        o, lse = reference.dense(qb, kb, vb, scale=D ** -0.5, **kw)
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


def _paged(pages: int, page_size: int, seed: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    return _fp8(pages, page_size, HKV, D, seed=seed, device=device), _fp8(pages, page_size, HKV, D, seed=seed + 1,
                                                                          device=device)


@pytest.mark.parametrize(("page_size", "kw", "ref_kw"), [
    (4, {"window_size": (6, 0), "causal": True}, {"window": (6, 0), "causal": True}),
    (1, {"softcap": 3.0}, {"softcap": 3.0, "causal": False}),
    (16, {"attention_chunk": 8, "causal": True}, {"chunk": 8, "causal": True}),
    (16, {}, {"causal": False}),  # head dim 64 paged: no FP8 kernel for it
], ids=["window-pages-4", "softcap-pages-1", "chunk-pages-16", "hdim64-pages-16"])
def test_an_fp8_paged_cache_with_what_fp8_kernels_lack_matches_fp32(page_size: int, kw: dict[str, Any],
                                                                     ref_kw: dict[str, Any]) -> None:
    per_seq = 48 // page_size
    k_cache, v_cache = _paged(2 * per_seq + 3, page_size, seed=1)
    table = torch.randperm(2 * per_seq + 3, generator=_gen(3))[:2 * per_seq].to(torch.int32).view(2, per_seq)
    q = _fp8(2, 3, HQ, D, seed=4)
    factors = [_factors(2, s) for s in (5, 6, 7)]
    lengths = [29, 48]
    before = (k_cache.clone(), v_cache.clone())
    out, lse = flashcore.flash_attn_with_kvcache(
        q, k_cache, v_cache, cache_seqlens=torch.tensor(lengths, dtype=torch.int32), page_table=table,
        q_descale=factors[0], k_descale=factors[1], v_descale=factors[2], fallback="sdpa", return_softmax_lse=True,
        **kw)
    want, want_lse = _expected(q, k_cache, v_cache, lengths, table, factors, **ref_kw)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), want, atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(lse, want_lse, atol=1e-2, rtol=1e-2)
    for a, b in zip(before, (k_cache, v_cache), strict=True):
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_sinks_on_an_fp8_contiguous_cache_see_fa3s_scores() -> None:
    k_cache, v_cache = _fp8(3, 40, HKV, D, seed=10), _fp8(3, 40, HKV, D, seed=11)
    q = _fp8(2, 1, HQ, D, seed=12)
    sinks = torch.randn(HQ, generator=_gen(13))
    factors = [_factors(2, s) for s in (14, 15, 16)]
    slots = torch.tensor([2, 0], dtype=torch.int32)
    out, lse = flashcore.flash_attn_with_kvcache(
        q, k_cache, v_cache, cache_seqlens=torch.tensor([17, 40], dtype=torch.int32), cache_batch_idx=slots,
        s_aux=sinks, q_descale=factors[0], k_descale=factors[1], v_descale=factors[2], fallback="sdpa",
        return_softmax_lse=True)
    want, want_lse = _expected(q, k_cache[slots.long()], v_cache[slots.long()], [17, 40], None, factors,
                               causal=False, sinks=sinks)
    torch.testing.assert_close(out.float(), want, atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(lse, want_lse, atol=1e-2, rtol=1e-2)


def test_an_append_with_rotary_lands_in_the_fp8_cache_rounded_and_nothing_else_moves() -> None:
    k_cache, v_cache = _fp8(2, 32, HKV, D, seed=20), _fp8(2, 32, HKV, D, seed=21)
    q, k_new, v_new = _fp8(2, 2, HQ, D, seed=22), _fp8(2, 2, HKV, D, seed=23), _fp8(2, 2, HKV, D, seed=24)
    cos, sin = torch.rand(64, 16, generator=_gen(25)).to(FP8), torch.rand(64, 16, generator=_gen(26)).to(FP8)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    lengths = torch.tensor([5, 20], dtype=torch.int32)
    flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, rotary_cos=cos, rotary_sin=sin,
                                      cache_seqlens=lengths, causal=True, window_size=(8, 0), fallback="sdpa")
    # what the 16-bit path writes into a bf16 cache, rounded to E4M3
    k16, v16 = before_k.to(torch.bfloat16), before_v.to(torch.bfloat16)
    flashcore.flash_attn_with_kvcache(q.to(torch.bfloat16), k16, v16, k_new.to(torch.bfloat16),
                                      v_new.to(torch.bfloat16), rotary_cos=cos.to(torch.bfloat16),
                                      rotary_sin=sin.to(torch.bfloat16), cache_seqlens=lengths, causal=True,
                                      window_size=(8, 0), fallback="sdpa")
    assert torch.equal(k_cache.view(torch.uint8), k16.clamp(-448, 448).to(FP8).view(torch.uint8))
    assert torch.equal(v_cache.view(torch.uint8), v16.to(FP8).view(torch.uint8))
    new_rows = torch.zeros(2, 32, dtype=torch.bool)
    new_rows[0, 5:7] = new_rows[1, 20:22] = True
    assert torch.equal(k_cache[~new_rows].view(torch.uint8), before_k[~new_rows].view(torch.uint8))
    assert torch.equal(v_cache[new_rows].view(torch.uint8), v_new.reshape(4, HKV, D).view(torch.uint8))


def test_packed_queries_take_their_sequences_factors_and_rows_in_no_sequence_stay_unwritten() -> None:
    k_cache, v_cache = _fp8(2, 24, HKV, D, seed=30), _fp8(2, 24, HKV, D, seed=31)
    q = _fp8(7, HQ, D, seed=32)
    cu = torch.tensor([0, 2, 5], dtype=torch.int32)  # rows 5 and 6 belong to no sequence
    factors = [_factors(2, s) for s in (33, 34, 35)]
    out = torch.full((7, HQ, D), float("nan"), dtype=torch.bfloat16)
    serving.kvcache(q, k_cache, v_cache, torch.tensor([9, 24], dtype=torch.int32), cu_seqlens_q=cu, max_seqlen_q=3,
                    causal=True, softcap=4.0, q_descale=factors[0], k_descale=factors[1], v_descale=factors[2],
                    out=out, fallback="sdpa")
    for b, rows in enumerate((slice(0, 2), slice(2, 5))):
        k, v = k_cache[b:b + 1, :(9, 24)[b]], v_cache[b:b + 1, :(9, 24)[b]]
        want, _ = reference.dense(reference.dequantize(q[None, rows], factors[0][b:b + 1], HKV),
                                  reference.dequantize(k, factors[1][b:b + 1], HKV),
                                  reference.dequantize(v, factors[2][b:b + 1], HKV), causal=True, scale=D ** -0.5,
                                  softcap=4.0)
        torch.testing.assert_close(out[rows].float(), want[0], atol=3e-2, rtol=3e-2)
    assert out[5:].isnan().all()


def test_what_the_fp8_kernels_run_keeps_the_fp8_path() -> None:
    q, k_cache = _fp8(2, 1, HQ, 128, seed=40), _fp8(4, 16, HKV, 128, seed=41)
    plain = {"page_table": None, "cache_leftpad": None, "window_size": (-1, -1), "softcap": 0.0,
             "attention_chunk": 0, "fallback": "error", "s_aux": None, "rotary_cos": None, "rotary_sin": None}
    assert not fp8_cache.wanted(q, k_cache, **plain)
    assert not fp8_cache.wanted(q, k_cache, **{**plain, "page_table": torch.zeros(2, 2, dtype=torch.int32)})
    assert fp8_cache.wanted(q, k_cache, **{**plain, "page_table": torch.zeros(2, 2, dtype=torch.int32),
                                           "cache_leftpad": torch.zeros(2, dtype=torch.int32)})
    assert fp8_cache.wanted(q, k_cache[:, :8], **{**plain, "page_table": torch.zeros(2, 2, dtype=torch.int32)})
    assert fp8_cache.wanted(q, k_cache, **{**plain, "rotary_cos": torch.zeros(4, 8)})
    assert not fp8_cache.wanted(q.to(torch.bfloat16), k_cache, **{**plain, "softcap": 2.0})


def test_a_16_bit_cache_under_an_fp8_q_is_named() -> None:
    q = _fp8(1, 1, HQ, D, seed=50)
    k_cache = torch.zeros(1, 8, HKV, D, dtype=torch.bfloat16)
    with pytest.raises(flashcore.FlashCoreError, match="k_cache is torch.bfloat16: with a float8_e4m3fn q"):
        flashcore.flash_attn_with_kvcache(q, k_cache, k_cache, cache_seqlens=torch.tensor([3], dtype=torch.int32),
                                          softcap=2.0, fallback="sdpa")


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [1, 4, 128])
def test_fp8_cache_calls_fa3_makes_run_on_the_kernel_and_match_fp32(page_size: int) -> None:
    """FA3's kvcache test shapes with E4M3: windows, chunks and small pages, with an append, on the 16-bit kernel."""
    per_seq = 256 // page_size
    k_cache, v_cache = _paged(2 * per_seq, page_size, seed=60, device="cuda")
    table = torch.randperm(2 * per_seq, device="cuda").to(torch.int32).view(2, per_seq)
    q, k_new, v_new = (_fp8(2, 3, h, D, seed=s, device="cuda") for h, s in ((HQ, 61), (HKV, 62), (HKV, 63)))
    factors = [_factors(2, s, "cuda") for s in (64, 65, 66)]
    lengths = torch.tensor([100, 250], dtype=torch.int32, device="cuda")
    out = torch.full((2, 3, HQ, D), float("nan"), dtype=torch.bfloat16, device="cuda")
    serving.kvcache(q, k_cache, v_cache, lengths, k=k_new, v=v_new, page_table=table, causal=True,
                    window_size=(40, 0), attention_chunk=64, q_descale=factors[0], k_descale=factors[1],
                    v_descale=factors[2], out=out)
    flashcore.check_errors()
    want, _ = _expected(q.cpu(), k_cache.cpu(), v_cache.cpu(), [103, 253], table.cpu(),
                        [f.cpu() for f in factors], causal=True, window=(40, 0), chunk=64)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float().cpu(), want, atol=3e-2, rtol=3e-2)


def test_an_append_leaves_every_other_byte_of_the_fp8_cache_as_it_was_nan_payloads_too() -> None:
    k_cache, v_cache = _fp8(2, 16, HKV, D, seed=70), _fp8(2, 16, HKV, D, seed=71)
    k_cache[:, 10:].view(torch.uint8).fill_(0xFF)  # E4M3 NaN with the sign bit: a bf16 round trip gives 0x7F
    v_cache[:, 10:].view(torch.uint8).fill_(0xFF)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    q, k_new, v_new = _fp8(2, 1, HQ, D, seed=72), _fp8(2, 1, HKV, D, seed=73), _fp8(2, 1, HKV, D, seed=74)
    flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, softcap=3.0, fallback="sdpa",
                                      cache_seqlens=torch.tensor([3, 7], dtype=torch.int32))
    new_rows = torch.zeros(2, 16, dtype=torch.bool)
    new_rows[0, 3] = new_rows[1, 7] = True
    for cache, before, new in ((k_cache, before_k, k_new), (v_cache, before_v, v_new)):
        assert torch.equal(cache[~new_rows].view(torch.uint8), before[~new_rows].view(torch.uint8))
        assert torch.equal(cache[new_rows].view(torch.uint8), new.reshape(2, HKV, D).view(torch.uint8))


def test_descales_with_rotary_scale_q_before_its_rotation_and_out_after() -> None:
    k_cache, v_cache = _fp8(2, 32, HKV, D, seed=80), _fp8(2, 32, HKV, D, seed=81)
    q, k_new, v_new = _fp8(2, 1, HQ, D, seed=82), _fp8(2, 1, HKV, D, seed=83), _fp8(2, 1, HKV, D, seed=84)
    cos, sin = torch.rand(64, 16, generator=_gen(85)), torch.rand(64, 16, generator=_gen(86))
    factors = [_factors(2, s) for s in (87, 88, 89)]
    lengths = torch.tensor([5, 20], dtype=torch.int32)
    scaled = [(k_cache.clone(), v_cache.clone())]
    got = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, rotary_cos=cos.to(FP8),
                                            rotary_sin=sin.to(FP8), cache_seqlens=lengths, q_descale=factors[0],
                                            k_descale=factors[1], v_descale=factors[2], causal=True, fallback="sdpa")
    # the same on bf16 values scaled by hand: q x qd x kd, the output x vd (rotation is linear)
    k16, v16 = (c.to(torch.bfloat16) for c in scaled[0])
    group = HQ // HKV
    qf = (q.float() * (factors[0] * factors[1]).repeat_interleave(group, 1)[:, None, :, None]).to(torch.bfloat16)
    want = flashcore.flash_attn_with_kvcache(qf, k16, v16, k_new.to(torch.bfloat16), v_new.to(torch.bfloat16),
                                             rotary_cos=cos.to(FP8).to(torch.bfloat16),
                                             rotary_sin=sin.to(FP8).to(torch.bfloat16), cache_seqlens=lengths,
                                             causal=True, fallback="sdpa")
    want = want.float() * factors[2].repeat_interleave(group, 1)[:, None, :, None]
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)
