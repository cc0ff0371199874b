"""FlashAttention-3's entry points on FlashCore: `flash_attn_func` and `flash_attn_with_kvcache`, with FA3's argument
names, order, defaults and semantics (hopper/flash_attn_interface.py). Switch with one import:

    from flashcore import flash_attn_func          # instead of: from flash_attn_interface import flash_attn_func

An argument FlashCore does not implement yet (sliding window, softcap, FP8 descales, paged or per-sequence KV
cache, rotary, ...) raises UnsupportedArgument naming it, before anything runs; FA3's pure speed hints (pack_gqa,
scheduler_metadata left None) are accepted. FlashCore is forward-only: inputs that need a gradient are refused as
by flashcore.attention. Extension, keyword-only: `fallback="sdpa"` (flashcore.attention's) for CPU tensors and
non-Hopper GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from flashcore.api import attention
from flashcore.errors import FlashCoreError

if TYPE_CHECKING:
    import torch


class UnsupportedArgument(FlashCoreError):
    """An FA3 argument FlashCore does not implement (yet): the message names it and says what to pass instead."""


# What each unsupported argument needs, for the message (issues: 15 serving features, 16 FP8).
_WHY = {
    "qv": "a second query operand (FA3's MLA path) is not implemented",
    "q_descale": "FP8 inputs are not implemented yet (issue 16)",
    "k_descale": "FP8 inputs are not implemented yet (issue 16)",
    "v_descale": "FP8 inputs are not implemented yet (issue 16)",
    "window_size": "sliding-window attention is not implemented yet (issue 15); pass (-1, -1)",
    "attention_chunk": "chunked attention is not implemented; pass 0",
    "softcap": "score soft-capping is not implemented yet (issue 15); pass 0.0",
    "rotary_cos": "rotary embedding inside the call is not implemented; apply it to q and k first",
    "rotary_sin": "rotary embedding inside the call is not implemented; apply it to q and k first",
    "rotary_seqlens": "rotary embedding inside the call is not implemented",
    "cache_batch_idx": "indexing the cache by batch is not implemented yet (issue 15)",
    "cache_leftpad": "left-padded caches are not implemented yet (issue 15)",
    "page_table": "a paged KV cache is not implemented yet (issue 15)",
    "cu_seqlens_q": "variable-length queries are not implemented yet (issue 15)",
    "cu_seqlens_k_new": "variable-length new keys are not implemented yet (issue 15)",
    "max_seqlen_q": "variable-length queries are not implemented yet (issue 15)",
    "scheduler_metadata": "FA3's precomputed scheduler metadata has no FlashCore equivalent; pass None",
}


def _refuse(given: Mapping[str, bool]) -> None:
    """Raise UnsupportedArgument for the first argument set away from its FA3 default."""
    for name, set_ in given.items():
        if set_:
            raise UnsupportedArgument(f"{name}: {_WHY[name]}")


def _window_set(window_size: Any) -> bool:
    try:
        return tuple(window_size) != (-1, -1)
    except TypeError:
        raise FlashCoreError(f"window_size is {window_size!r}: expected a pair (left, right); (-1, -1) = "
                             "no window") from None


def _splits(num_splits: Any) -> int | None:
    """FA3's num_splits (0: its heuristic, 1: no split, n: n splits) as flashcore.attention's (None: automatic)."""
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 0:
        raise FlashCoreError(f"num_splits is {num_splits!r}: expected 0 (chosen automatically), 1 (no split-KV) or "
                             "a split count")
    return None if num_splits == 0 else num_splits


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float | None = None,
                    causal: bool = False, qv: Any = None, q_descale: Any = None, k_descale: Any = None,
                    v_descale: Any = None, window_size: Any = (-1, -1), attention_chunk: int = 0,
                    softcap: float = 0.0, num_splits: int = 1, pack_gqa: bool | None = None,
                    deterministic: bool = False, sm_margin: int = 0, return_attn_probs: bool = False, *,
                    fallback: str = "error") -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FA3's flash_attn_func: q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D]; causal bottom-right aligned. Returns out,
    or (out, softmax_lse [B, Hq, Sq] fp32) with return_attn_probs=True (FA3 returns the LSE there, not
    probabilities). pack_gqa is a speed hint FlashCore decides itself; deterministic fixes the split count."""
    _refuse({"qv": qv is not None, "q_descale": q_descale is not None, "k_descale": k_descale is not None,
             "v_descale": v_descale is not None, "window_size": _window_set(window_size),
             "attention_chunk": attention_chunk != 0, "softcap": softcap != 0.0})
    out, lse = attention(q, k, v, causal=causal, softmax_scale=softmax_scale, deterministic=deterministic,
                         num_splits=_splits(num_splits), sm_margin=sm_margin, fallback=fallback)
    return (out, lse) if return_attn_probs else out


def flash_attn_with_kvcache(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor | None = None,
    v: torch.Tensor | None = None, qv: Any = None, rotary_cos: Any = None, rotary_sin: Any = None,
    cache_seqlens: int | torch.Tensor | None = None, cache_batch_idx: Any = None, cache_leftpad: Any = None,
    page_table: Any = None, cu_seqlens_q: Any = None, cu_seqlens_k_new: Any = None, max_seqlen_q: Any = None,
    rotary_seqlens: Any = None, q_descale: Any = None, k_descale: Any = None, v_descale: Any = None,
    softmax_scale: float | None = None, causal: bool = False, window_size: Any = (-1, -1), attention_chunk: int = 0,
    softcap: float = 0.0, rotary_interleaved: bool = True, scheduler_metadata: Any = None, num_splits: int = 0,
    pack_gqa: bool | None = None, sm_margin: int = 0, return_softmax_lse: bool = False, *, fallback: str = "error",
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FA3's flash_attn_with_kvcache for a contiguous cache [B, Scache, Hkv, D] whose sequences all hold the same
    number of tokens: cache_seqlens an int, or a [B] int32 tensor of one value (checked on the host: one device
    sync), or None for the whole cache. k, v [B, Snew, Hkv, D] are written into the cache in place at that
    position first (FA3's append), then q attends to the cache's first cache_seqlens + Snew tokens.
    Per-sequence lengths and paged caches need the varlen kernel (issue 15) and raise UnsupportedArgument."""
    _refuse({"qv": qv is not None, "rotary_cos": rotary_cos is not None, "rotary_sin": rotary_sin is not None,
             "cache_batch_idx": cache_batch_idx is not None, "cache_leftpad": cache_leftpad is not None,
             "page_table": page_table is not None, "cu_seqlens_q": cu_seqlens_q is not None,
             "cu_seqlens_k_new": cu_seqlens_k_new is not None, "max_seqlen_q": max_seqlen_q is not None,
             "rotary_seqlens": rotary_seqlens is not None, "q_descale": q_descale is not None,
             "k_descale": k_descale is not None, "v_descale": v_descale is not None,
             "window_size": _window_set(window_size), "attention_chunk": attention_chunk != 0,
             "softcap": softcap != 0.0, "scheduler_metadata": scheduler_metadata is not None})
    import torch

    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise FlashCoreError(f"{name} must be a 4-D tensor [B, Scache, Hkv, D], got "
                                 f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if k_cache.shape != v_cache.shape:
        raise FlashCoreError(f"k_cache has shape {tuple(k_cache.shape)} but v_cache has {tuple(v_cache.shape)}")
    capacity = k_cache.shape[1]
    if (k is None) != (v is None):
        raise FlashCoreError("k and v are appended together: pass both or neither")
    length = _cache_length(cache_seqlens, k_cache.shape[0], capacity, appending=k is not None)
    end = length
    if k is not None and v is not None:
        end = _append(k_cache, v_cache, k, v, length)
    out, lse = attention(q, k_cache[:, :end], v_cache[:, :end], causal=causal, softmax_scale=softmax_scale,
                         num_splits=_splits(num_splits), sm_margin=sm_margin, fallback=fallback)
    return (out, lse) if return_softmax_lse else out


def _cache_length(cache_seqlens: Any, batch: int, capacity: int, appending: bool) -> int:
    """The one number of cached tokens every sequence holds."""
    import torch

    if cache_seqlens is None:
        if appending:
            raise FlashCoreError("k and v are appended at cache_seqlens: pass cache_seqlens (the tokens already "
                                 "in the cache)")
        return capacity
    if isinstance(cache_seqlens, bool):
        raise FlashCoreError(f"cache_seqlens is {cache_seqlens!r}: expected an int or a [B] int32 tensor")
    if isinstance(cache_seqlens, int):
        length = cache_seqlens
    elif isinstance(cache_seqlens, torch.Tensor):
        if cache_seqlens.dtype != torch.int32 or tuple(cache_seqlens.shape) != (batch,):
            raise FlashCoreError(f"cache_seqlens has dtype {cache_seqlens.dtype} and shape "
                                 f"{tuple(cache_seqlens.shape)}: expected torch.int32 [{batch}]")
        values = torch.unique(cache_seqlens).tolist()
        if len(values) != 1:
            raise UnsupportedArgument(f"cache_seqlens: sequences hold different numbers of tokens ({min(values)} "
                                      f"to {max(values)}); per-sequence cache lengths need the varlen kernel "
                                      "(issue 15)")
        length = int(values[0])
    else:
        raise FlashCoreError(f"cache_seqlens is {type(cache_seqlens).__name__}: expected an int or a [B] int32 "
                             "tensor")
    if not 0 <= length <= capacity:
        raise FlashCoreError(f"cache_seqlens is {length}: the cache holds 0..{capacity} tokens (k_cache.shape[1])")
    return length


def _append(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, length: int) -> int:
    """Write k, v into the caches at [length, length + Snew) in place; the new end."""
    import torch

    for name, new, cache in (("k", k, k_cache), ("v", v, v_cache)):
        if not isinstance(new, torch.Tensor) or new.dim() != 4:
            raise FlashCoreError(f"{name} must be a 4-D tensor [B, Snew, Hkv, D]")
        want = (cache.shape[0], new.shape[1], cache.shape[2], cache.shape[3])
        if tuple(new.shape) != want:
            raise FlashCoreError(f"{name} has shape {tuple(new.shape)}: expected [B, Snew, Hkv, D] = {want} "
                                 "(the cache's batch, heads and head dim)")
        if new.dtype != cache.dtype or new.device != cache.device:
            raise FlashCoreError(f"{name} is {new.dtype} on {new.device}: the cache is {cache.dtype} on "
                                 f"{cache.device}")
    end = length + k.shape[1]
    if end > k_cache.shape[1]:
        raise FlashCoreError(f"appending {k.shape[1]} tokens at {length} overflows the cache of "
                             f"{k_cache.shape[1]} tokens")
    k_cache[:, length:end] = k
    v_cache[:, length:end] = v
    return end
