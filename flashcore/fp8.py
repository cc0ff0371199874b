"""FP8 (E4M3) attention forward: q, k, v in torch.float8_e4m3fn with FA3's descale factors, bf16 output."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from flashcore import check
from flashcore.forward import forward

if TYPE_CHECKING:
    import torch


def attention_fp8(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    q_descale: torch.Tensor | None = None,
    k_descale: torch.Tensor | None = None,
    v_descale: torch.Tensor | None = None,
    causal: bool = False,
    softmax_scale: float | None = None,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    deterministic: bool = False,
    num_splits: int | None = None,
    sm_margin: int = 0,
    v_transpose: str = "auto",
    debug_fault: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """O = softmax(softmax_scale * Q K^T + mask) V on FP8 inputs, with the per-row log-sum-exp. Forward only.

    q: [B, Sq, Hq, D]; k, v: [B, Sk, Hkv, D], torch.float8_e4m3fn CUDA tensors on one device, D 64, 128 or 256
    (strides multiples of 16 elements). The values attended are q * q_descale[b, h // (Hq // Hkv)], likewise k and v:
    q_descale, k_descale, v_descale are float32 [B, Hkv] (FA3's arguments), None meaning 1. out: bf16 [B, Sq, Hq, D]
    (optional); lse: float32 [B, Hq, Sq] (optional). causal, softmax_scale, deterministic, num_splits, sm_margin as in
    flashcore.attention. P is rounded to E4M3 before P V (scaled by 2^8 first, as FA3). wgmma needs V transposed,
    and v_transpose says where: "pass" (the kernel's producer warps write a transposed copy of V into the workspace,
    each block once per call while the GEMMs run: one extra read and write of V), "smem" (they transpose each V block
    in shared memory for every query tile that reads it: no copy, but work per query tile), or "auto" (default:
    "smem" for few query rows per K/V head, as in decode, else "pass"; flashcore.plan says which). The outputs are
    the same bits either way. Returns (out, lse); raises FlashCoreError for an unsupported input before anything is
    launched.
    """
    call = check.dense(q, k, v, causal=causal, softmax_scale=softmax_scale, out=out, lse=lse,
                       deterministic=deterministic, debug_fault=debug_fault, num_splits=num_splits,
                       sm_margin=sm_margin, fp8=True)
    call = replace(call, v_transpose=check.v_transpose(v_transpose))
    return forward(check.with_descales(call, q_descale, k_descale, v_descale))
