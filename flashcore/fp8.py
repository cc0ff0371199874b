"""FP8 (E4M3) attention forward: q, k, v in torch.float8_e4m3fn with FA3's descale factors, bf16 output."""

from __future__ import annotations

import ctypes
import math
from typing import TYPE_CHECKING

from flashcore import api, tuning
from flashcore.errors import FlashCoreError

if TYPE_CHECKING:
    import torch

DESCALES = ("q_descale", "k_descale", "v_descale")
# fc_params.fp8_v_transpose (kernel/flashcore.h enum fc_fp8_v_transpose): where the kernel transposes V for P V.
V_TRANSPOSE = {"auto": 0, "pass": 1, "smem": 2}


def v_transpose_code(v_transpose: object) -> int:
    """fc_params.fp8_v_transpose for attention_fp8's `v_transpose` ("auto", "pass" or "smem")."""
    if not isinstance(v_transpose, str) or v_transpose not in V_TRANSPOSE:
        raise FlashCoreError(f"v_transpose={v_transpose!r}: use 'auto' (by the shape), 'pass' (the kernel writes a "
                             "transposed copy of V into the workspace) or 'smem' (it transposes V in shared memory)")
    return V_TRANSPOSE[v_transpose]


def v_transpose_name(code: int) -> str:
    """fc_plan_info.fp8_v_transpose as attention_fp8 names it: "pass" or "smem"; "" for 16-bit inputs (0)."""
    return next((name for name, c in V_TRANSPOSE.items() if c == code and name != "auto"), "")


def check_descale(name: str, t: object, batch: int, heads_kv: int, device: torch.device) -> torch.Tensor | None:
    """None, or a float32 tensor [batch, heads_kv] on q's device (any non-negative strides: expanded views too).
    Its values are not read on the host (a copy would synchronize); a NaN or Inf factor gives NaN/Inf output."""
    import torch

    if t is None:
        return None
    if not isinstance(t, torch.Tensor):
        raise FlashCoreError(f"{name} must be a torch.Tensor or None, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise FlashCoreError(f"{name}.dtype is {t.dtype}: descale factors are torch.float32")
    if tuple(t.shape) != (batch, heads_kv):
        raise FlashCoreError(f"{name} has shape {tuple(t.shape)}: expected [B, Hkv] = {(batch, heads_kv)} (one "
                             "factor per batch entry and K/V head, as FA3)")
    if t.device != device:
        raise FlashCoreError(f"{name} is on {t.device} but q is on {device}: all tensors must be on one device")
    if t.layout != torch.strided or any(s < 0 for s in t.stride()):
        raise FlashCoreError(f"{name} has stride {t.stride()}: a dense tensor with non-negative strides is needed")
    return t


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
    call = api.check_call(q, k, v, causal=causal, softmax_scale=softmax_scale, out=out, lse=lse,
                          deterministic=deterministic, debug_fault=debug_fault, num_splits=num_splits,
                          sm_margin=sm_margin, fp8=True)
    batch, heads_kv = call.q.shape[0], call.k.shape[2]
    vt_code = v_transpose_code(v_transpose)
    given = {"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale}
    descales = {n: check_descale(n, t, batch, heads_kv, call.q.device) for n, t in given.items()}
    index = api.device_index(call.q.device)
    capability, name = api._device_info(index)
    api.use_fallback(str(call.q.device), capability, name, "error")
    res, res_lse = api.dense_outputs(call)
    if call.empty:
        res.zero_()
        res_lse.fill_(-math.inf)
        return res, res_lse
    params = api._params(call, res, res_lse, tuning.DEFAULT)
    params.fp8_v_transpose = vt_code
    for n, t in descales.items():
        if t is not None:
            setattr(params, n, t.data_ptr())
            setattr(params, n + "_stride", (ctypes.c_int64 * 2)(*t.stride()))
    api.launch(params, call.q.device)
    return res, res_lse
