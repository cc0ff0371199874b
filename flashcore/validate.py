"""Host-side checks of one flashcore.attention call. Each raises FlashCoreError naming the argument, its value
and what is allowed; nothing here touches the GPU (no kernel, no copy, no synchronization).

Limits come from the kernel: the grid is (query tiles, Hq, B), so B and Hq <= 65535 (grid y/z); indices are
32-bit, so S <= 2**30; every row is moved in 16-byte pieces (TMA boxes, cp.async), so the base address and
every stride of a dim that is stepped along must be a multiple of 16 bytes, and TMA strides stay below 2**40 bytes.
"""

from __future__ import annotations

import ctypes
import math
import numbers
from typing import TYPE_CHECKING

from flashcore.errors import FlashCoreError, UnsupportedArgument

if TYPE_CHECKING:
    import torch

MAX_GRID_YZ = 65535  # CUDA grid y and z limit: heads_q (y) and batch (z)
MAX_SEQLEN = 1 << 30  # 32-bit row indexing in the kernel
ALIGN_BYTES = 16  # TMA base address and stride granularity
MAX_STRIDE_BYTES = 1 << 40  # cuTensorMapEncodeTiled: globalStrides < 2**40
DIM_LABELS = ("batch", "seq", "head", "head dim")


def tensor(name: str, t: object, device_type: str, device: torch.device | None) -> torch.Tensor:
    """A dense tensor on a device of `device_type`, and on `device` when one is given (q's)."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise FlashCoreError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.layout != torch.strided:
        raise FlashCoreError(f"{name} has layout {t.layout}: FlashCore needs dense (torch.strided) tensors")
    if t.device.type != device_type:
        hint = " (fallback='sdpa' also takes CPU tensors: torch SDPA computes the same contract there)" \
            if device_type == "cuda" and t.device.type == "cpu" else ""
        raise FlashCoreError(f"{name} is on {t.device}: FlashCore needs {device_type.upper()} tensors{hint}")
    if device is not None and t.device != device:
        raise FlashCoreError(f"{name} is on {t.device} but q is on {device}: all tensors must be on one device")
    return t


def rank(name: str, t: torch.Tensor, expected: int, layout: str) -> None:
    if t.dim() != expected:
        raise FlashCoreError(
            f"{name} has shape {tuple(t.shape)} (rank {t.dim()}): expected rank {expected} {layout}"
        )


def dtype16(name: str, t: torch.Tensor) -> None:
    import torch

    if t.dtype is torch.float8_e4m3fn:  # an entry point FP8 does not take: say so by name, not as a bad dtype
        raise UnsupportedArgument(f"{name}.dtype is {t.dtype}: FP8 inputs run through flashcore.attention_fp8 and "
                                  "FA3's names with q_descale/k_descale/v_descale (dense, packed and contiguous KV "
                                  "cache calls); this call takes torch.float16 and torch.bfloat16")
    if t.dtype not in (torch.float16, torch.bfloat16):
        raise FlashCoreError(f"{name}.dtype is {t.dtype}: FlashCore supports torch.float16 and torch.bfloat16")


def dtype_fp8(name: str, t: torch.Tensor) -> None:
    import torch

    if t.dtype != torch.float8_e4m3fn:
        raise FlashCoreError(f"{name}.dtype is {t.dtype}: FP8 attention takes torch.float8_e4m3fn (use "
                             "flashcore.attention for fp16 and bf16)")


def same(name: str, what: str, value: object, q_value: object, why: str) -> None:
    if value != q_value:
        raise FlashCoreError(f"{name}.{what} is {value} but q.{what} is {q_value}: {why}")


def at_most(label: str, value: int, limit: int, why: str) -> None:
    if value > limit:
        raise FlashCoreError(f"{label} is {value}: at most {limit} ({why})")


def count(name: str, value: object, low: int, high: int, extra: str = "") -> int:
    """A Python int in [low, high] (bool is refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise FlashCoreError(f"{name} is {value!r}: expected an int in [{low}, {high}]{extra}")
    return value


def flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise FlashCoreError(f"{name} is {value!r} ({type(value).__name__}): expected True or False")
    return value


def scale(softmax_scale: object, head_dim: int) -> float:
    """The softmax scale as the kernel will see it (float32): finite and > 0; default 1/sqrt(head dim)."""
    if softmax_scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, numbers.Real):
        raise FlashCoreError(
            f"softmax_scale is {softmax_scale!r} ({type(softmax_scale).__name__}): expected a Python float, "
            "finite and > 0 (or None for 1/sqrt(head dim))"
        )
    value = float(softmax_scale)
    as_f32 = ctypes.c_float(value).value
    if not (math.isfinite(value) and value > 0):
        raise FlashCoreError(f"softmax_scale is {value}: it must be finite and > 0")
    if not (math.isfinite(as_f32) and as_f32 > 0):
        raise FlashCoreError(f"softmax_scale is {value}: it becomes {as_f32} in float32 (the kernel's type); "
                             "it must be finite and > 0 there")
    return value


def extent(t: torch.Tensor) -> tuple[int, int]:
    """Byte range [lo, hi) that a strided tensor's elements occupy; (p, p) when it has no element."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when the byte ranges of a and b intersect (conservative: interleaved views count as overlapping)."""
    a_lo, a_hi = extent(a)
    b_lo, b_hi = extent(b)
    return a_lo < b_hi and b_lo < a_hi


def not_aliased(name: str, t: torch.Tensor, others: dict[str, torch.Tensor]) -> None:
    for other, o in others.items():
        if overlaps(t, o):
            raise FlashCoreError(f"{name} overlaps {other} in memory: an output must not alias an input or another "
                                 "output; pass a separate buffer")


def self_overlap(name: str, t: torch.Tensor) -> None:
    """An output whose elements share memory (a broadcast or overlapping view) would be written racily."""
    if t.numel() == 0:
        return
    reach = 1  # elements spanned by the dims already placed, innermost first
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride(), strict=True) if sz > 1):
        if stride < reach:
            raise FlashCoreError(f"{name} has shape {tuple(t.shape)} and stride {t.stride()}: its elements share "
                                 "memory (a broadcast or overlapping view); every output element needs its own")
        reach += stride * (size - 1)


def layout(name: str, t: torch.Tensor) -> None:
    """Last dim contiguous; the other strides multiples of 16 bytes (non-zero where stepped) and < 2**40 bytes;
    base 16-byte aligned. A dim of size 1 is never stepped along, so its stride is free."""
    if t.stride(3) != 1:
        raise FlashCoreError(f"{name} has stride {t.stride()}: the last (head dim) stride is {t.stride(3)}, it must "
                             "be 1 (contiguous rows); call .contiguous() first")
    per_chunk = ALIGN_BYTES // t.element_size()
    for dim in range(3):
        stride, label = t.stride(dim), DIM_LABELS[dim]
        if t.shape[dim] <= 1:
            continue
        if stride == 0:
            raise FlashCoreError(f"{name}.stride({dim}) ({label}) is 0 (a broadcast/expanded view): the kernel "
                                 "needs real rows; call .contiguous(), or pass fewer k/v heads for shared K/V (GQA)")
        if stride % per_chunk:
            raise FlashCoreError(f"{name}.stride({dim}) ({label}) is {stride}: strides must be multiples of "
                                 f"{per_chunk} elements ({ALIGN_BYTES} bytes, what TMA can encode); call .contiguous()")
        if stride * t.element_size() >= MAX_STRIDE_BYTES:
            raise FlashCoreError(f"{name}.stride({dim}) ({label}) is {stride}: TMA strides must be below 2**40 bytes")
    if t.data_ptr() % ALIGN_BYTES:
        raise FlashCoreError(f"{name}.data_ptr() is {t.data_ptr():#x}, {t.data_ptr() % ALIGN_BYTES} bytes past a "
                             f"{ALIGN_BYTES}-byte boundary: TMA needs {ALIGN_BYTES}-byte aligned base addresses; "
                             "call .clone() first")


def no_grad_needed(tensors: dict[str, torch.Tensor]) -> None:
    """FlashCore is forward-only: an input that requires grad while grad mode is on is refused, never detached."""
    import torch

    if not torch.is_grad_enabled():
        return
    needing = [n for n, t in tensors.items() if t.requires_grad]
    if needing:
        raise FlashCoreError(f"{', '.join(needing)} require{'s' if len(needing) == 1 else ''} grad and grad mode is "
                             "on, but FlashCore is forward-only (no backward kernel): its output would carry no "
                             "gradient. Call it under torch.no_grad() or torch.inference_mode(), or pass detached "
                             "tensors")
