"""FA3's rotary embedding inside flash_attn_with_kvcache (hopper/flash_api.cpp, hopper/rotary.h): the appended keys,
and q, rotated by a table of cos and sin [seqlen_ro, rotary_dim / 2] before the attention. Columns past rotary_dim
stay as they are. interleaved=True pairs columns (2i, 2i + 1) (GPT-J); False pairs (i, i + rotary_dim / 2)
(GPT-NeoX). Each pair (x0, x1) with the position's (cos, sin) becomes (x0 cos - x1 sin, x0 sin + x1 cos), in fp32,
rounded once to the tensor's dtype.

Positions (FA3's): new key j of sequence b is at rotary_seqlens[b] + j, or cache_seqlens[b] + j without
rotary_seqlens (also with cache_leftpad: FA3's position there is the length before the append, leftpad included).
Query row i of sequence b is at that same base + i when the call is causal or local (`q_per_row`), else every row
of the sequence is at the base. The torch code here is the CPU fallback's and the tests' reference; the CUDA kernel
(kernel/append.cu) evaluates the same formula op by op, so both give the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flashcore import validate
from flashcore.errors import FlashCoreError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Rotary:
    cos: torch.Tensor  # [seqlen_ro, rotary_dim / 2], q's dtype and device, last dim contiguous
    sin: torch.Tensor
    seqlens: torch.Tensor | None  # int32 [B]: each sequence's first position (None: cache_seqlens)
    interleaved: bool
    q_per_row: bool  # query row i at base + i (FA3: causal or local); else every row at base

    @property
    def dim(self) -> int:
        return 2 * self.cos.shape[1]


def q_per_row(causal: bool, window: tuple[int, int], attention_chunk: int, seqlen_k: int, seqlen_q: int) -> bool:
    """FA3's rule for q's positions: row by row when the call is causal or local after FA3 drops window bounds that
    cover the whole cache (left >= seqlen_k - 1) or every query (right >= seqlen_q - 1); seqlen_k is the cache's
    capacity per sequence, seqlen_q q's rows (max_seqlen_q when packed)."""
    left, right = window
    return (causal or attention_chunk >= 1 or 0 <= left < seqlen_k - 1 or 0 <= right < seqlen_q - 1)


def checked(rotary_cos: Any, rotary_sin: Any, rotary_seqlens: Any, interleaved: Any, *, q: torch.Tensor,
            appending: bool, batch: int, head_dim: int, per_row: bool) -> Rotary | None:
    """The call's rotary embedding, checked as FA3 checks it; None without rotary_cos and rotary_sin (FA3 then
    ignores rotary_seqlens) or with an empty table (rotary_dim 0: FA3 rotates nothing)."""
    import torch

    if rotary_cos is None and rotary_sin is None:
        return None
    if rotary_cos is None or rotary_sin is None:
        raise FlashCoreError("rotary_cos and rotary_sin go together: pass both or neither")
    if not appending:
        raise FlashCoreError("rotary_cos is given but k and v are not: the rotary embedding rotates the appended "
                             "keys (and q); pass k and v, or rotate q yourself")
    tables = {}
    for name, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
        t = validate.tensor(name, t, q.device.type, q.device)
        if t.dim() != 2 or t.dtype != q.dtype:
            raise FlashCoreError(f"{name} has dtype {t.dtype} and shape {tuple(t.shape)}: expected q's dtype "
                                 f"{q.dtype} and [seqlen_ro, rotary_dim / 2]")
        if t.shape[1] > 1 and t.stride(1) != 1:
            raise FlashCoreError(f"{name} has stride {t.stride()}: its last dim must be contiguous")
        tables[name] = t
    cos, sin = tables["rotary_cos"], tables["rotary_sin"]
    if cos.shape != sin.shape:
        raise FlashCoreError(f"rotary_cos has shape {tuple(cos.shape)} but rotary_sin has {tuple(sin.shape)}")
    rotary_dim = 2 * cos.shape[1]
    if rotary_dim == 0:
        return None
    if rotary_dim % 16 or rotary_dim > head_dim:
        raise FlashCoreError(f"rotary_cos has {cos.shape[1]} columns: rotary_dim = {rotary_dim} must be a multiple of "
                             f"16 and at most the head dim {head_dim} (as FA3)")
    seqlens = None
    if rotary_seqlens is not None:
        seqlens = validate.tensor("rotary_seqlens", rotary_seqlens, q.device.type, q.device)
        if seqlens.dtype != torch.int32 or seqlens.shape != (batch,) or not seqlens.is_contiguous():
            raise FlashCoreError(f"rotary_seqlens has dtype {seqlens.dtype} and shape {tuple(seqlens.shape)}: "
                                 f"expected a contiguous torch.int32 [{batch}]")
    return Rotary(cos, sin, seqlens, validate.flag("rotary_interleaved", interleaved), per_row)


def rotate(x: torch.Tensor, rotary: Rotary, positions: torch.Tensor) -> torch.Tensor:
    """x [N, H, D] with each row's table position (int64 [N], within the table) rotated into a new tensor."""
    import torch

    rd = rotary.dim
    cos = rotary.cos.index_select(0, positions).float()[:, None, :]  # [N, 1, rd / 2]
    sin = rotary.sin.index_select(0, positions).float()[:, None, :]
    head = x[..., :rd].float()
    x0, x1 = (head[..., 0::2], head[..., 1::2]) if rotary.interleaved else (head[..., :rd // 2], head[..., rd // 2:])
    real = x0 * cos - x1 * sin
    imag = x0 * sin + x1 * cos
    turned = torch.stack((real, imag), -1).flatten(-2) if rotary.interleaved else torch.cat((real, imag), -1)
    out = x.clone()
    out[..., :rd] = turned.to(x.dtype)
    return out
