"""FA3's append of new keys into a KV cache (flash_attn_with_kvcache's k and v): written in place at each sequence's
length before the attention reads the cache. The inputs are checked by flashcore/check_serving.py; an append past
the capacity is detected only with debug checks (it needs a device sync)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flashcore import check_serving
from flashcore.errors import FlashCoreError

if TYPE_CHECKING:
    import torch


def at(k_cache: torch.Tensor, v_cache: torch.Tensor, k: Any, v: Any, length: int) -> int:
    """Write k, v into every cache entry at [length, length + Snew) (checked here); the new end (one length for
    all)."""
    check_serving.new_keys(k_cache, v_cache, k, v, k_cache.shape[0], "the cache's")
    end = length + k.shape[1]
    if end > k_cache.shape[1]:
        raise FlashCoreError(f"appending {k.shape[1]} tokens at {length} overflows the cache of "
                             f"{k_cache.shape[1]} tokens")
    k_cache[:, length:end] = k
    v_cache[:, length:end] = v
    return end


def each(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor,
         slots: torch.Tensor | None, table: torch.Tensor | None, check: bool) -> torch.Tensor:
    """Write k, v [B, Snew, Hkv, D] into each sequence's cache entry (or its pages) at [length, length + Snew); the
    new lengths. Without `check` an append past the capacity is not detected; on a paged cache it then writes into
    the sequence's last page."""
    import torch

    capacity = check_serving.cache_capacity(k_cache, table)
    steps = torch.arange(k.shape[1], device=k_cache.device, dtype=torch.int64)
    rows = lengths.to(torch.int64)[:, None] + steps[None, :]  # [B, Snew]: token positions
    if check and k.shape[1] and int(rows.max()) >= capacity:
        raise FlashCoreError(f"appending {k.shape[1]} tokens overflows the cache of {capacity} tokens "
                             f"(largest cache_seqlens {int(lengths.max())})")
    if table is not None:
        page_size = k_cache.shape[1]
        column = (rows // page_size).clamp(max=table.shape[1] - 1)
        own = table if slots is None else table.index_select(0, slots)  # a device gather: FA3's row per slot
        entry, rows = torch.gather(own.to(torch.int64), 1, column), rows % page_size
    else:
        batch = lengths.shape[0]
        entry = (slots.to(torch.int64) if slots is not None else torch.arange(batch, device=k_cache.device))[:, None]
        entry = entry.expand_as(rows)
    k_cache[entry, rows] = k
    v_cache[entry, rows] = v
    return lengths + k.shape[1]
