"""The PyTorch entry point: validate everything on the host, then launch through the C ABI."""

from __future__ import annotations

import ctypes
import math
from typing import TYPE_CHECKING

from flashcore import _lib
from flashcore.errors import FlashCoreError, KernelLaunchError, UnsupportedDeviceError

if TYPE_CHECKING:
    import torch

SUPPORTED_HEAD_DIMS = (64, 128, 256)
MAX_FAULT = 4


def _dtype_code(dtype: torch.dtype) -> int:
    import torch

    if dtype == torch.float16:
        return _lib.FC_FP16
    if dtype == torch.bfloat16:
        return _lib.FC_BF16
    raise FlashCoreError(f"q.dtype is {dtype}: FlashCore supports torch.float16 and torch.bfloat16")


def _check_tensor(name: str, t: object, device: torch.device | None) -> torch.Tensor:
    import torch

    if not isinstance(t, torch.Tensor):
        raise FlashCoreError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cuda":
        raise FlashCoreError(f"{name} is on {t.device}: FlashCore needs CUDA tensors")
    if device is not None and t.device != device:
        raise FlashCoreError(f"{name} is on {t.device} but q is on {device}: all tensors must share one device")
    if t.dim() != 4:
        raise FlashCoreError(f"{name} has shape {tuple(t.shape)} (rank {t.dim()}): expected rank 4 [B, S, H, D]")
    return t


def _check_layout(name: str, t: torch.Tensor) -> None:
    """Last dim contiguous; other strides multiples of 8 elements; base 16-byte aligned (16-byte copies)."""
    if t.stride(3) != 1 and t.shape[3] > 1:
        raise FlashCoreError(f"{name} has stride {t.stride()}: the last (head) dim must be contiguous (stride 1)")
    for dim, label in zip((0, 1, 2), ("batch", "seq", "head"), strict=True):
        if t.stride(dim) % 8 != 0 and t.shape[dim] > 1:
            raise FlashCoreError(
                f"{name}.stride({dim}) ({label}) is {t.stride(dim)}: strides must be multiples of 8 elements "
                "(16 bytes); call .contiguous() first"
            )
    if t.data_ptr() % 16 != 0:
        raise FlashCoreError(f"{name}.data_ptr() is not 16-byte aligned; call .clone() first")


def _strides(t: torch.Tensor) -> ctypes.Array[ctypes.c_int64]:
    # Size-1 dims may carry any stride in torch; the kernel never steps along them, so 0 is exact.
    return _lib.Strides(*[t.stride(d) if t.shape[d] > 1 else 0 for d in range(3)])


def _check_device(device: torch.device) -> None:
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) != (9, 0):
        name = torch.cuda.get_device_name(device)
        raise UnsupportedDeviceError(
            f"{device} ({name}) is SM {major}.{minor}: FlashCore's kernel is built for SM 9.0 (H100/H200) only"
        )


def _extent(t: torch.Tensor) -> tuple[int, int]:
    """Byte range [lo, hi) that a strided tensor's elements occupy."""
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True) if size > 0)
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    a_lo, a_hi = _extent(a)
    b_lo, b_hi = _extent(b)
    return a_lo < b_hi and b_lo < a_hi


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    debug_fault: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """O = softmax(softmax_scale * Q K^T + mask) V, with the per-row log-sum-exp.

    q: [B, Sq, Hq, D]; k, v: [B, Sk, Hkv, D]; fp16 or bf16 (all the same); D in 64, 128, 256;
    Hq a multiple of Hkv (query head h reads K/V head h // (Hq // Hkv)). Strided views are accepted when
    the last dim is contiguous and the other strides are multiples of 8 elements.
    causal: bottom-right aligned (row i sees key j iff j <= i + Sk - Sq), as FlashAttention.
    softmax_scale: default 1 / sqrt(D); must be finite and > 0.
    out: optional [B, Sq, Hq, D] output (q's dtype and device, not overlapping an input).
    lse: optional [B, Hq, Sq] float32 contiguous output.
    Returns (out, lse). A row that sees no key gets out = 0 and lse = -inf.
    debug_fault: test-only planted fault (0 = none); see docs/design.md.
    Raises FlashCoreError (a ValueError) for any unsupported input, before anything is launched.
    """
    import torch

    q = _check_tensor("q", q, None)
    k = _check_tensor("k", k, q.device)
    v = _check_tensor("v", v, q.device)
    dtype = _dtype_code(q.dtype)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise FlashCoreError(f"{name}.dtype is {t.dtype} but q.dtype is {q.dtype}: all must match")
    batch, seqlen_q, heads_q, head_dim = q.shape
    _, seqlen_k, heads_kv, _ = k.shape
    if k.shape != v.shape:
        raise FlashCoreError(f"k has shape {tuple(k.shape)} but v has {tuple(v.shape)}: they must match")
    if k.shape[0] != batch or k.shape[3] != head_dim:
        raise FlashCoreError(
            f"k/v shape {tuple(k.shape)} does not match q {tuple(q.shape)}: batch and head dim must agree"
        )
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise FlashCoreError(f"head dim is {head_dim}: FlashCore supports {SUPPORTED_HEAD_DIMS}")
    if heads_kv == 0 or heads_q % heads_kv != 0:
        raise FlashCoreError(f"q has {heads_q} heads and k/v {heads_kv}: Hq must be a multiple of Hkv")
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    if not (math.isfinite(scale) and scale > 0):
        raise FlashCoreError(f"softmax_scale is {softmax_scale}: it must be finite and > 0")
    if not 0 <= int(debug_fault) <= MAX_FAULT:
        raise FlashCoreError(f"debug_fault is {debug_fault}: known faults are 0..{MAX_FAULT}")

    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    else:
        out = _check_tensor("out", out, q.device)
        if out.shape != q.shape or out.dtype != q.dtype:
            raise FlashCoreError(
                f"out is {tuple(out.shape)} {out.dtype}: expected {tuple(q.shape)} {q.dtype} (like q)"
            )
        for name, t in (("q", q), ("k", k), ("v", v)):
            if _overlaps(out, t):
                raise FlashCoreError(f"out overlaps {name}: the output must not alias an input")
    expected_lse = (batch, heads_q, seqlen_q)
    if lse is None:
        lse = torch.empty(expected_lse, dtype=torch.float32, device=q.device)
    elif (
        not isinstance(lse, torch.Tensor)
        or tuple(lse.shape) != expected_lse
        or lse.dtype != torch.float32
        or lse.device != q.device
        or not lse.is_contiguous()
    ):
        raise FlashCoreError(f"lse must be a contiguous float32 tensor of shape {expected_lse} on {q.device}")

    if seqlen_q == 0 or batch == 0 or heads_q == 0:
        return out, lse
    if seqlen_k == 0:  # softmax over no key: defined as O = 0, LSE = -inf, no launch
        out.zero_()
        lse.fill_(-math.inf)
        return out, lse
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        _check_layout(name, t)
    _check_device(q.device)

    params = _lib.FcParams(
        q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=out.data_ptr(), lse=lse.data_ptr(),
        batch=batch, heads_q=heads_q, heads_kv=heads_kv, seqlen_q=seqlen_q, seqlen_k=seqlen_k,
        head_dim=head_dim, q_stride=_strides(q), k_stride=_strides(k), v_stride=_strides(v),
        o_stride=_strides(out), softmax_scale=scale, causal=int(bool(causal)), dtype=dtype,
        debug_fault=int(debug_fault),
    )  # fmt: skip
    lib = _lib.load()
    with torch.cuda.device(q.device):
        stream = torch.cuda.current_stream(q.device).cuda_stream
        status = lib.fc_attention_forward(params, stream)
    if status == _lib.FC_OK:
        return out, lse
    message = _lib.last_error(lib)
    if status == _lib.FC_ERR_UNSUPPORTED_DEVICE:
        raise UnsupportedDeviceError(message)
    if status == _lib.FC_ERR_INVALID_ARGUMENT:
        raise FlashCoreError(message)
    raise KernelLaunchError(message)
