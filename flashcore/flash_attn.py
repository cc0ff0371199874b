"""FlashAttention-3's entry points on FlashCore: `flash_attn_func`, `flash_attn_varlen_func` and
`flash_attn_with_kvcache`, with FA3's argument names, order, defaults and semantics
(hopper/flash_attn_interface.py). Switch with one import:

    from flashcore import flash_attn_func          # instead of: from flash_attn_interface import flash_attn_func

Sliding windows, softcap, packed variable-length batches, per-sequence cache lengths, cache_batch_idx and paged
caches run on the kernel (flashcore/serving.py). FP8 (float8_e4m3fn q, k, v with q_descale, k_descale, v_descale)
runs through flash_attn_func on dense batches (flashcore.attention_fp8). An argument FlashCore does not implement
yet (descales with packed sequences or a KV cache, rotary, left-padded caches, seqused_q, ...) raises
UnsupportedArgument naming it, before anything runs; FA3's
pure speed hints (pack_gqa, scheduler_metadata left None) are accepted. FlashCore is forward-only: inputs that need
a gradient are refused as by flashcore.attention. Extension, keyword-only: `fallback="sdpa"` (plain torch) for CPU
tensors and non-Hopper GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from flashcore import serving
from flashcore.api import attention, is_fp8
from flashcore.errors import FlashCoreError

if TYPE_CHECKING:
    import torch


class UnsupportedArgument(FlashCoreError):
    """An FA3 argument FlashCore does not implement (yet): the message names it and says what to pass instead."""


# What each unsupported argument needs, for the message (issues: 15 serving features, 16 FP8).
_WHY = {
    "qv": "a second query operand (FA3's MLA path) is not implemented",
    "q_descale": "FP8 inputs run through flash_attn_func on dense batches only (flashcore.attention_fp8)",
    "k_descale": "FP8 inputs run through flash_attn_func on dense batches only (flashcore.attention_fp8)",
    "v_descale": "FP8 inputs run through flash_attn_func on dense batches only (flashcore.attention_fp8)",
    "fp8 window_size": "sliding windows with FP8 inputs are not implemented; pass (-1, -1)",
    "fp8 softcap": "softcap with FP8 inputs is not implemented; pass 0.0",
    "fp8 fallback": "fallback='sdpa' has no FP8 path: FP8 runs on the Hopper kernel only",
    "attention_chunk": "chunked attention is not implemented; pass 0",
    "rotary_cos": "rotary embedding inside the call is not implemented; apply it to q and k first",
    "rotary_sin": "rotary embedding inside the call is not implemented; apply it to q and k first",
    "rotary_seqlens": "rotary embedding inside the call is not implemented",
    "cache_leftpad": "left-padded caches are not implemented yet (issue 15)",
    "seqused_q": "per-sequence query counts are not implemented: pass cu_seqlens_q of the used rows",
    "cu_seqlens_q": "packed queries into a KV cache are not implemented: use a [B, Sq, Hq, D] q",
    "max_seqlen_q": "packed queries into a KV cache are not implemented: use a [B, Sq, Hq, D] q",
    "cu_seqlens_k_new": "variable-length new keys are not implemented yet (issue 15)",
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
    probabilities). pack_gqa is a speed hint FlashCore decides itself; deterministic fixes the split count.
    FP8: float8_e4m3fn q, k, v (head dim 64, 128 or 256) with FA3's float32 [B, Hkv] descales (None: 1) run on
    flashcore.attention_fp8; out is bf16."""
    _refuse({"qv": qv is not None, "attention_chunk": attention_chunk != 0})
    descales = {"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale}
    if is_fp8(q):
        _refuse({"fp8 window_size": _window_set(window_size), "fp8 softcap": softcap != 0.0,
                 "fp8 fallback": fallback != "error"})
        from flashcore.fp8 import attention_fp8

        out, lse = attention_fp8(q, k, v, causal=causal, softmax_scale=softmax_scale, deterministic=deterministic,
                                 num_splits=_splits(num_splits), sm_margin=sm_margin, **descales)
        return (out, lse) if return_attn_probs else out
    given = [name for name, d in descales.items() if d is not None]
    if given:
        raise FlashCoreError(f"{given[0]} is given but q is {getattr(q, 'dtype', type(q).__name__)}: descale "
                             "factors apply to float8_e4m3fn inputs only")
    if _window_set(window_size) or softcap != 0.0:
        out, lse = serving.dense(q, k, v, causal=causal, softmax_scale=softmax_scale, window_size=window_size,
                                 softcap=softcap, deterministic=deterministic, num_splits=_splits(num_splits),
                                 sm_margin=sm_margin, fallback=fallback)
    else:
        out, lse = attention(q, k, v, causal=causal, softmax_scale=softmax_scale, deterministic=deterministic,
                             num_splits=_splits(num_splits), sm_margin=sm_margin, fallback=fallback)
    return (out, lse) if return_attn_probs else out


def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, seqused_q: Any = None,
                           seqused_k: torch.Tensor | None = None, softmax_scale: float | None = None,
                           causal: bool = False, qv: Any = None, q_descale: Any = None, k_descale: Any = None,
                           v_descale: Any = None, window_size: Any = (-1, -1), attention_chunk: int = 0,
                           softcap: float = 0.0, num_splits: int = 1, pack_gqa: bool | None = None,
                           deterministic: bool = False, sm_margin: int = 0, return_attn_probs: bool = False, *,
                           fallback: str = "error", debug_checks: bool | None = None,
                           ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FA3's flash_attn_varlen_func: q [total_q, Hq, D], k and v [total_k, Hkv, D] packed; sequence b is rows
    [cu_seqlens[b], cu_seqlens[b + 1]) (int32 [B + 1]); seqused_k [B] limits its keys. Causal is aligned
    bottom-right per sequence. Returns out [total_q, Hq, D], or (out, softmax_lse [Hq, total_q]) with
    return_attn_probs=True. Packed queries never split the keys (num_splits is a hint here: 1 is used).
    debug_checks (extension): check the offsets on the host (one device sync; see flashcore.serving)."""
    _refuse({"qv": qv is not None, "q_descale": q_descale is not None, "k_descale": k_descale is not None,
             "v_descale": v_descale is not None, "attention_chunk": attention_chunk != 0,
             "seqused_q": seqused_q is not None})
    _splits(num_splits)
    out, lse = serving.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=seqused_k,
                              causal=causal, softmax_scale=softmax_scale, window_size=window_size, softcap=softcap,
                              deterministic=deterministic, fallback=fallback, debug_checks=debug_checks)
    return (out, lse) if return_attn_probs else out


def flash_attn_with_kvcache(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor | None = None,
    v: torch.Tensor | None = None, qv: Any = None, rotary_cos: Any = None, rotary_sin: Any = None,
    cache_seqlens: int | torch.Tensor | None = None, cache_batch_idx: torch.Tensor | None = None,
    cache_leftpad: Any = None, page_table: Any = None, cu_seqlens_q: Any = None, cu_seqlens_k_new: Any = None,
    max_seqlen_q: Any = None, rotary_seqlens: Any = None, q_descale: Any = None, k_descale: Any = None,
    v_descale: Any = None, softmax_scale: float | None = None, causal: bool = False, window_size: Any = (-1, -1),
    attention_chunk: int = 0, softcap: float = 0.0, rotary_interleaved: bool = True, scheduler_metadata: Any = None,
    num_splits: int = 0, pack_gqa: bool | None = None, sm_margin: int = 0, return_softmax_lse: bool = False, *,
    fallback: str = "error", debug_checks: bool | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FA3's flash_attn_with_kvcache on a contiguous cache [B_cache, S_cache, Hkv, D] or a paged one. cache_seqlens:
    the tokens each sequence already holds, an int (all the same) or a [B] int32 tensor (per sequence);
    cache_batch_idx [B] int32: the cache entry of sequence b (default b). page_table [B, max_pages] int32: the
    caches are [pages, page_size, Hkv, D] (page_size a multiple of 16) and sequence b's token j is row
    j % page_size of page page_table[b, j // page_size]. k, v [B, Snew, Hkv, D] are written into the cache in place
    at each sequence's cache_seqlens first (FA3's append), then q [B, Sq, Hq, D] attends to each sequence's first
    cache_seqlens + Snew keys (causal: bottom-right aligned to them). window_size and softcap as flash_attn_func.
    debug_checks (extension): check the lengths, slots and pages on the host, including that an append fits (one
    device sync; see flashcore.serving)."""
    _refuse({"qv": qv is not None, "rotary_cos": rotary_cos is not None, "rotary_sin": rotary_sin is not None,
             "cache_leftpad": cache_leftpad is not None,
             "cu_seqlens_q": cu_seqlens_q is not None, "cu_seqlens_k_new": cu_seqlens_k_new is not None,
             "max_seqlen_q": max_seqlen_q is not None, "rotary_seqlens": rotary_seqlens is not None,
             "q_descale": q_descale is not None, "k_descale": k_descale is not None,
             "v_descale": v_descale is not None, "attention_chunk": attention_chunk != 0,
             "scheduler_metadata": scheduler_metadata is not None})
    import torch

    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise FlashCoreError(f"{name} must be a 4-D tensor [B, Scache, Hkv, D], got "
                                 f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if k_cache.shape[:3] != v_cache.shape[:3]:
        raise FlashCoreError(f"k_cache has shape {tuple(k_cache.shape)} but v_cache has {tuple(v_cache.shape)}")
    if (k is None) != (v is None):
        raise FlashCoreError("k and v are appended together: pass both or neither")
    windowed = _window_set(window_size) or softcap != 0.0
    batch = q.shape[0] if isinstance(q, torch.Tensor) and q.dim() == 4 else 0
    table = None
    if page_table is not None:
        table = serving.check_page_table(page_table, batch, k_cache, k_cache.device, cache_batch_idx)
    per_sequence = isinstance(cache_seqlens, torch.Tensor) or cache_batch_idx is not None or table is not None
    if not per_sequence:  # one length for every sequence: the dense kernel on a slice of the cache
        length = _cache_length(cache_seqlens, k_cache.shape[1], appending=k is not None)
        end = _append(k_cache, v_cache, k, v, length) if k is not None and v is not None else length
        kc, vc = k_cache[:, :end], v_cache[:, :end]
        if windowed:
            out, lse = serving.dense(q, kc, vc, causal=causal, softmax_scale=softmax_scale, window_size=window_size,
                                     softcap=softcap, num_splits=_splits(num_splits), sm_margin=sm_margin,
                                     fallback=fallback)
        else:
            out, lse = attention(q, kc, vc, causal=causal, softmax_scale=softmax_scale,
                                 num_splits=_splits(num_splits), sm_margin=sm_margin, fallback=fallback)
        return (out, lse) if return_softmax_lse else out
    lengths = _lengths(cache_seqlens, batch, serving.cache_capacity(k_cache, table), k_cache.device,
                       appending=k is not None)
    if k is not None and v is not None:
        lengths = _append_each(k_cache, v_cache, k, v, lengths, cache_batch_idx, table,
                               serving.debug_checks_on(debug_checks))
    out, lse = serving.kvcache(q, k_cache, v_cache, lengths, cache_batch_idx=cache_batch_idx, page_table=table,
                               causal=causal, softmax_scale=softmax_scale, window_size=window_size, softcap=softcap,
                               num_splits=_splits(num_splits), sm_margin=sm_margin, fallback=fallback,
                               debug_checks=debug_checks)
    return (out, lse) if return_softmax_lse else out


def _lengths(cache_seqlens: Any, batch: int, capacity: int, device: torch.device, appending: bool) -> torch.Tensor:
    """Per-sequence cache lengths as an int32 [B] tensor (a tensor as given: serving.kvcache checks it); an int or
    None is _cache_length's one length for every sequence."""
    import torch

    if isinstance(cache_seqlens, torch.Tensor):
        return cache_seqlens
    length = _cache_length(cache_seqlens, capacity, appending)
    return torch.full((batch,), length, dtype=torch.int32, device=device)


def _append_each(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 lengths: torch.Tensor, slots: torch.Tensor | None, table: torch.Tensor | None,
                 check: bool) -> torch.Tensor:
    """Write k, v [B, Snew, Hkv, D] into each sequence's cache entry (or its pages) at [length, length + Snew); the
    new lengths. Without debug checks an append past the capacity is not detected (it would need a device sync);
    on a paged cache it then writes into the sequence's last page."""
    import torch

    batch = lengths.shape[0] if isinstance(lengths, torch.Tensor) and lengths.dim() == 1 else -1
    _check_new(k_cache, v_cache, k, v, batch, "the sequences'")
    if not isinstance(lengths, torch.Tensor) or lengths.dtype != torch.int32 or lengths.device != k_cache.device:
        raise FlashCoreError("cache_seqlens must be a torch.int32 [B] tensor on the cache's device")
    if slots is None and table is None and batch != k_cache.shape[0]:
        raise FlashCoreError(f"cache_seqlens has {batch} sequences but k_cache has {k_cache.shape[0]} entries: pass "
                             "cache_batch_idx to map sequences to entries")
    capacity = serving.cache_capacity(k_cache, table)
    steps = torch.arange(k.shape[1], device=k_cache.device, dtype=torch.int64)
    rows = lengths.to(torch.int64)[:, None] + steps[None, :]  # [B, Snew]: token positions
    if check and k.shape[1] and int(rows.max()) >= capacity:
        raise FlashCoreError(f"appending {k.shape[1]} tokens overflows the cache of {capacity} tokens "
                             f"(largest cache_seqlens {int(lengths.max())})")
    if table is not None:
        page_size = k_cache.shape[1]
        column = (rows // page_size).clamp(max=table.shape[1] - 1)
        entry, rows = torch.gather(table.to(torch.int64), 1, column), rows % page_size
    else:
        entry = (slots.to(torch.int64) if slots is not None else torch.arange(batch, device=k_cache.device))[:, None]
        entry = entry.expand_as(rows)
    k_cache[entry, rows] = k
    v_cache[entry, rows] = v
    return lengths + k.shape[1]


def _cache_length(cache_seqlens: Any, capacity: int, appending: bool) -> int:
    """The one number of cached tokens every sequence holds: an int, or None for the whole cache (a tensor takes the
    per-sequence path)."""
    if cache_seqlens is None:
        if appending:
            raise FlashCoreError("k and v are appended at cache_seqlens: pass cache_seqlens (the tokens already "
                                 "in the cache)")
        return capacity
    if isinstance(cache_seqlens, bool):
        raise FlashCoreError(f"cache_seqlens is {cache_seqlens!r}: expected an int or a [B] int32 tensor")
    if not isinstance(cache_seqlens, int):
        raise FlashCoreError(f"cache_seqlens is {type(cache_seqlens).__name__}: expected an int or a [B] int32 "
                             "tensor")
    length = cache_seqlens
    if not 0 <= length <= capacity:
        raise FlashCoreError(f"cache_seqlens is {length}: the cache holds 0..{capacity} tokens (k_cache.shape[1])")
    return length


def _append(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, length: int) -> int:
    """Write k, v into the caches at [length, length + Snew) in place; the new end."""
    _check_new(k_cache, v_cache, k, v, k_cache.shape[0], "the cache's")
    end = length + k.shape[1]
    if end > k_cache.shape[1]:
        raise FlashCoreError(f"appending {k.shape[1]} tokens at {length} overflows the cache of "
                             f"{k_cache.shape[1]} tokens")
    k_cache[:, length:end] = k
    v_cache[:, length:end] = v
    return end


def _check_new(k_cache: torch.Tensor, v_cache: torch.Tensor, k: Any, v: Any, batch: int, whose: str) -> None:
    """k and v to append: 4-D [B, Snew, Hkv, D] with `batch` (`whose` batch), the cache's heads, head dim, dtype and
    device."""
    import torch

    for name, new, cache in (("k", k, k_cache), ("v", v, v_cache)):
        if not isinstance(new, torch.Tensor) or new.dim() != 4:
            raise FlashCoreError(f"{name} must be a 4-D tensor [B, Snew, Hkv, D]")
        want = (batch, new.shape[1], cache.shape[2], cache.shape[3])
        if tuple(new.shape) != want:
            raise FlashCoreError(f"{name} has shape {tuple(new.shape)}: expected [B, Snew, Hkv, D] = {want} "
                                 f"({whose} batch, the cache's heads and head dim)")
        if new.dtype != cache.dtype or new.device != cache.device:
            raise FlashCoreError(f"{name} is {new.dtype} on {new.device}: the cache is {cache.dtype} on "
                                 f"{cache.device}")
