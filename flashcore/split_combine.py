"""FA3's `flash_attn_combine`: merge attention computed over disjoint key ranges (split-KV partials) into one result.

Split i of a row holds O_i (normalized by its own softmax sum) and its log-sum-exp L_i. The merged row is
L = log(sum_i exp(L_i)) and O = sum_i exp(L_i - L) O_i. As FA3's combine kernel (hopper/flash_fwd_combine_kernel.h):
a row whose every L_i is -inf (no split saw a key) gets L = -inf and O = 0, and a split whose weight is 0 is skipped,
so the garbage an empty split may leave in O_i (FA3 leaves it unwritten) never reaches the result.

Plain torch, on any device (CPU tensors included): a handful of elementwise passes over the partials, memory-bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flashcore.errors import FlashCoreError

if TYPE_CHECKING:
    import torch

MAX_SPLITS = 256  # FA3's limit; beyond it FA3 refuses the call, so a caller's code that runs here runs there


def _check(out_partial: torch.Tensor, lse_partial: torch.Tensor, out: torch.Tensor | None,
           out_dtype: torch.dtype | None) -> torch.dtype:
    import torch

    for name, t in (("out_partial", out_partial), ("lse_partial", lse_partial)):
        if not isinstance(t, torch.Tensor):
            raise FlashCoreError(f"{name} is {type(t).__name__}: expected a torch.Tensor")
        if t.dtype != torch.float32:
            raise FlashCoreError(f"{name} is {t.dtype}: split partials are float32 (as FA3 takes them)")
    if out_partial.dim() != 5:
        raise FlashCoreError(f"out_partial has shape {tuple(out_partial.shape)}: expected [num_splits, batch, seqlen, "
                             "heads, head_dim]")
    splits, batch, seqlen, heads, _ = out_partial.shape
    if tuple(lse_partial.shape) != (splits, batch, seqlen, heads):
        raise FlashCoreError(f"lse_partial has shape {tuple(lse_partial.shape)}: expected "
                             f"{(splits, batch, seqlen, heads)} ([num_splits, batch, seqlen, heads] of out_partial)")
    if not 1 <= splits <= MAX_SPLITS:
        raise FlashCoreError(f"num_splits (out_partial.shape[0]) is {splits}: expected 1 .. {MAX_SPLITS}")
    if lse_partial.device != out_partial.device:
        raise FlashCoreError(f"lse_partial is on {lse_partial.device}, out_partial on {out_partial.device}")
    dtype = out_dtype if out_dtype is not None else (out.dtype if out is not None else torch.float32)
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise FlashCoreError(f"out_dtype is {dtype}: expected torch.float32, torch.float16 or torch.bfloat16")
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise FlashCoreError(f"out is {type(out).__name__}: expected a torch.Tensor")
        if tuple(out.shape) != tuple(out_partial.shape[1:]) or out.dtype != dtype or out.device != out_partial.device:
            raise FlashCoreError(f"out is {tuple(out.shape)} {out.dtype} on {out.device}: expected "
                                 f"{tuple(out_partial.shape[1:])} {dtype} on {out_partial.device}")
    return dtype


def flash_attn_combine(out_partial: torch.Tensor, lse_partial: torch.Tensor, out: torch.Tensor | None = None,
                       out_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """out_partial [num_splits, B, S, H, D] and lse_partial [num_splits, B, S, H] (float32) -> (out [B, S, H, D] in
    out_dtype (default float32, or out's dtype), lse [B, S, H] float32, stored head-major as FA3's is: a view of a
    [B, H, S] tensor). out: an optional output tensor, written and returned."""
    import torch

    dtype = _check(out_partial, lse_partial, out, out_dtype)
    top = lse_partial.amax(dim=0)
    top = torch.where(top == -torch.inf, torch.zeros_like(top), top)  # every split empty: no inf - inf
    scale = torch.exp(lse_partial - top)
    total = scale.sum(dim=0)
    weight = scale * torch.where(total > 0, 1.0 / total, torch.zeros_like(total))  # total 0 or NaN: weight 0
    # where(), not a product: a skipped split's out_partial may hold NaN or inf, and 0 * NaN is NaN
    nothing = torch.zeros((), device=out_partial.device)
    parts = torch.where((weight > 0).unsqueeze(-1), weight.unsqueeze(-1) * out_partial, nothing)
    merged = parts.sum(dim=0)
    batch, seqlen, heads = lse_partial.shape[1:]
    lse = torch.empty(batch, heads, seqlen, dtype=torch.float32, device=lse_partial.device).transpose(1, 2)
    lse.copy_(torch.log(total) + top)  # log 0 = -inf: a row no split saw
    if out is None:
        return merged.to(dtype), lse
    out.copy_(merged)
    return out, lse
