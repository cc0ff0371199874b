"""get_scheduler_metadata and flash_attn_with_kvcache(scheduler_metadata=...): the record is checked against the
call's shapes on the host; a matching record, a copy and FA3-style metadata leave the result unchanged; bad
metadata is refused naming what differs. On CPU through fallback="sdpa"."""

from __future__ import annotations

import pytest
import torch

import flashcore
from flashcore.errors import FlashCoreError


def caches(seed: int, paged: bool = False) -> dict:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(3, 2, 8, 64, generator=g).bfloat16()
    shape = (12, 16, 2, 64) if paged else (3, 64, 2, 64)
    k, v = torch.randn(*shape, generator=g).bfloat16(), torch.randn(*shape, generator=g).bfloat16()
    call = {"q": q, "k_cache": k, "v_cache": v, "cache_seqlens": torch.tensor([5, 40, 17], dtype=torch.int32),
            "causal": True, "fallback": "sdpa"}
    if paged:
        call["page_table"] = torch.randperm(12, generator=g).to(torch.int32).view(3, 4)
    return call


def metadata(call: dict, **change: object) -> torch.Tensor:
    args = {"batch_size": 3, "max_seqlen_q": 2, "max_seqlen_k": 64, "num_heads_q": 8, "num_heads_kv": 2,
            "headdim": 64, "cache_seqlens": call["cache_seqlens"], "qkv_dtype": torch.bfloat16, "causal": True,
            "page_size": 16 if "page_table" in call else None}
    args.update(change)
    return flashcore.get_scheduler_metadata(**args)


@pytest.mark.parametrize("paged", [False, True])
def test_matching_metadata_and_a_copy_give_the_same_result(paged: bool) -> None:
    call = caches(1, paged)
    plain = flashcore.flash_attn_with_kvcache(**call)
    meta = metadata(call)
    assert meta.dtype == torch.int32 and meta.device == call["cache_seqlens"].device
    assert torch.equal(flashcore.flash_attn_with_kvcache(**call, scheduler_metadata=meta), plain)
    assert torch.equal(flashcore.flash_attn_with_kvcache(**call, scheduler_metadata=meta.clone()), plain)


def test_fa3_style_metadata_is_accepted() -> None:
    call = caches(2)
    fa3_like = torch.zeros(3 * 4 + 1, dtype=torch.int32)
    assert torch.equal(flashcore.flash_attn_with_kvcache(**call, scheduler_metadata=fa3_like),
                       flashcore.flash_attn_with_kvcache(**call))


@pytest.mark.parametrize(("change", "named"), [({"batch_size": 4}, "batch 4"), ({"num_heads_q": 16}, "heads_q 16"),
                                               ({"num_heads_kv": 1}, "heads_kv 1"), ({"headdim": 128}, "head_dim 128"),
                                               ({"qkv_dtype": torch.float16}, "dtype"),
                                               ({"page_size": 32}, "page_size 32"),
                                               ({"max_seqlen_q": 1}, "max_seqlen_q 1")])
def test_metadata_of_other_shapes_is_refused_naming_them(change: dict, named: str) -> None:
    call = caches(3)
    with pytest.raises(FlashCoreError, match=named):
        flashcore.flash_attn_with_kvcache(**call, scheduler_metadata=metadata(call, **change))


def test_plan_tuning_arguments_do_not_make_metadata_wrong() -> None:
    """causal, window, softcap, num_splits and sm_margin tune FA3's device plan only: no error here."""
    call = caches(4)
    meta = metadata(call, causal=False, num_splits=4, sm_margin=2, has_softcap=True, window_size=(8, 0))
    assert torch.equal(flashcore.flash_attn_with_kvcache(**call, scheduler_metadata=meta),
                       flashcore.flash_attn_with_kvcache(**call))


@pytest.mark.parametrize("bad", ["not-a-tensor", "negative-attention-chunk", "int8-dtype", "float-batch"])
def test_bad_arguments_are_refused(bad: str) -> None:
    call = caches(5)
    with pytest.raises(FlashCoreError):
        if bad == "not-a-tensor":
            flashcore.flash_attn_with_kvcache(**call, scheduler_metadata=[1, 2, 3])
        elif bad == "negative-attention-chunk":
            metadata(call, attention_chunk=-64)
        elif bad == "int8-dtype":
            metadata(call, qkv_dtype=torch.int8)
        else:
            metadata(call, batch_size=3.0)
