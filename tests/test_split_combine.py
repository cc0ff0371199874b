"""flash_attn_combine (flashcore/split_combine.py) against attention over the whole key range: split the keys, run
each range on the fp32 reference, merge, compare; FA3's rules for empty splits and rows; bad input refused."""

from __future__ import annotations

import math

import pytest
import torch

import flashcore
from flashcore import reference
from flashcore.errors import FlashCoreError


def partials(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cuts: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Each key range [cuts[i], cuts[i+1]) of every sequence on the reference: out [S, B, L, H, D], lse [S, B, L, H]
    (an empty range: lse -inf and NaN in out, as an unwritten FA3 split may hold)."""
    outs, lses = [], []
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        o = torch.full((q.shape[0], q.shape[1], q.shape[2], v.shape[-1]), math.nan)
        lse = torch.full((q.shape[0], q.shape[1], q.shape[2]), -math.inf)
        if hi > lo:
            for b in range(q.shape[0]):
                ref, ref_lse = reference.sequence(q[b], k[b, lo:hi], v[b, lo:hi], causal=False,
                                                  scale=1 / math.sqrt(q.shape[-1]))
                o[b], lse[b] = ref, ref_lse.transpose(0, 1)
        outs.append(o)
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


def inputs(seed: int, keys: int = 50) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 3, 4, 32, generator=g), torch.randn(2, keys, 4, 32, generator=g),
            torch.randn(2, keys, 4, 32, generator=g))


@pytest.mark.parametrize("cuts", [[0, 50], [0, 17, 50], [0, 1, 2, 30, 49, 50], [0, 20, 20, 50]])
def test_merged_splits_equal_attention_over_all_keys(cuts: list[int]) -> None:
    q, k, v = inputs(len(cuts))
    out_p, lse_p = partials(q, k, v, cuts)
    out, lse = flashcore.flash_attn_combine(out_p, lse_p)
    whole, whole_lse = partials(q, k, v, [0, 50])
    assert out.dtype == torch.float32 and out.shape == (2, 3, 4, 32) and lse.shape == (2, 3, 4)
    torch.testing.assert_close(out, whole[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, whole_lse[0], atol=1e-5, rtol=1e-5)


def test_lse_is_stored_head_major_as_fa3s() -> None:
    q, k, v = inputs(1)
    _, lse = flashcore.flash_attn_combine(*partials(q, k, v, [0, 10, 50]))
    assert lse.transpose(1, 2).is_contiguous()


def test_a_row_no_split_saw_gets_zero_and_minus_inf() -> None:
    out_p = torch.full((3, 1, 2, 1, 8), math.nan)
    lse_p = torch.full((3, 1, 2, 1), -math.inf)
    out_p[1, 0, 1], lse_p[1, 0, 1] = 2.0, 0.5  # row 1 has one split with keys
    out, lse = flashcore.flash_attn_combine(out_p, lse_p)
    assert torch.equal(out[0, 0], torch.zeros(1, 8)) and lse[0, 0, 0] == -math.inf
    assert torch.equal(out[0, 1], torch.full((1, 8), 2.0)) and lse[0, 1, 0] == pytest.approx(0.5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_out_dtype_and_out_buffer(dtype: torch.dtype) -> None:
    q, k, v = inputs(3)
    out_p, lse_p = partials(q, k, v, [0, 25, 50])
    buf = torch.full((2, 3, 4, 32), math.nan, dtype=dtype)
    out, _ = flashcore.flash_attn_combine(out_p, lse_p, out=buf, out_dtype=dtype)
    assert out is buf and out.dtype == dtype
    torch.testing.assert_close(out.float(), partials(q, k, v, [0, 50])[0][0], atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("bad", ["fp16-partials", "lse-shape", "no-splits", "too-many-splits", "int-out-dtype",
                                 "out-shape"])
def test_bad_input_is_refused_with_its_name(bad: str) -> None:
    out_p, lse_p = torch.zeros(2, 1, 3, 4, 8), torch.zeros(2, 1, 3, 4)
    kwargs: dict = {}
    if bad == "fp16-partials":
        out_p = out_p.half()
    elif bad == "lse-shape":
        lse_p = torch.zeros(2, 1, 4, 3)
    elif bad == "no-splits":
        out_p, lse_p = out_p[:0], lse_p[:0]
    elif bad == "too-many-splits":
        out_p, lse_p = torch.zeros(257, 1, 1, 1, 8), torch.zeros(257, 1, 1, 1)
    elif bad == "int-out-dtype":
        kwargs["out_dtype"] = torch.int32
    else:
        kwargs["out"] = torch.zeros(1, 3, 4, 7)
    with pytest.raises(FlashCoreError, match="out_partial|lse_partial|num_splits|out_dtype|out is"):
        flashcore.flash_attn_combine(out_p, lse_p, **kwargs)
