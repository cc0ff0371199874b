"""The host checks of the serving layouts into a Call: packed variable-length batches (varlen) and KV caches with a
length, a slot or a page table per sequence (kvcache); and their debug checks of index values (`values`), which
cost a device sync and run only with debug_checks=True (or FLASHCORE_DEBUG_CHECKS=1). Shapes, dtypes, devices and
strides are checked here once per call; the dense checks (flashcore/check.py) run on a batch of one of the packed
tensors, or on one entry of each cache.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from flashcore import check, validate
from flashcore.call import Call, is_fp8, out_dtype, out_shape
from flashcore.errors import FlashCoreError

if TYPE_CHECKING:
    import torch

# The kernel's bound on keys per page (kernel/validate.cu): a page's rows are one TMA map dim, and 65536 keys per page
# is past any serving stack's page.
MAX_PAGE_SIZE = 65536


def debug_checks_on(flag: bool | None) -> bool:
    if flag is None:
        return os.environ.get("FLASHCORE_DEBUG_CHECKS", "") not in ("", "0")
    return validate.flag("debug_checks", flag)


def host_checks(flag: bool | None, q: Any, page_table: Any = None) -> bool:
    """Whether a serving call checks its index values on the host (check_serving.values, then check_errors after the
    call): with debug checks on, and always for FP8 inputs on packed rows or a contiguous cache. The FP8 kernels read
    those values unchecked (their 24-40-register producers spilled with the device checks), and an offset, length or
    slot out of range must never read or write outside its tensor; a paged FP8 cache is checked on the device. Such a
    check is a device sync: under CUDA graph capture the call is refused by name."""
    import torch

    if not (is_fp8(q) and page_table is None):
        return debug_checks_on(flag)
    check.refuse({"fp8 graph capture": torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()})
    return True


def index(name: str, t: Any, length: int, device: torch.device) -> torch.Tensor:
    """A contiguous int32 vector of `length` on `device`."""
    import torch

    t = validate.tensor(name, t, device.type, device)
    if t.dtype != torch.int32 or t.dim() != 1 or t.shape[0] != length:
        raise FlashCoreError(f"{name} has dtype {t.dtype} and shape {tuple(t.shape)}: expected torch.int32 "
                             f"[{length}]")
    if not t.is_contiguous():
        raise FlashCoreError(f"{name} has stride {t.stride()}: it must be contiguous")
    return t


def as4(t: torch.Tensor) -> torch.Tensor:
    """A packed [total, H, D] tensor as the kernel sees it: a batch of one."""
    return t.unsqueeze(0)


def _packed(name: str, t: Any, device: torch.device | None, device_type: str) -> torch.Tensor:
    t = validate.tensor(name, t, device_type, device)
    validate.rank(name, t, 3, "[total, H, D] (packed sequences)")
    return t


def _offsets_length(t: Any, name: str) -> int:
    import torch

    if not isinstance(t, torch.Tensor) or t.dim() != 1:
        raise FlashCoreError(f"{name} must be a 1-D torch.int32 tensor [batch + 1], got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if t.shape[0] < 1:
        raise FlashCoreError(f"{name} is empty: it holds batch + 1 offsets, starting with 0")
    return int(t.shape[0])


def varlen(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: Any, max_seqlen_k: Any, *,
           seqused_q: Any, seqused_k: Any, causal: Any, softmax_scale: Any, window_size: Any, softcap: Any,
           deterministic: Any, fallback: Any, out: Any, lse: Any, num_splits: Any = None, sm_margin: Any = 0) -> Call:
    """Packed sequences: q [total_q, Hq, D], k and v [total_k, Hkv, D], int32 offsets [B + 1], seqused_q and
    seqused_k [B]."""
    fallback = check.fallback_choice(fallback)
    device_type = check.device_type(q, fallback)
    q = _packed("q", q, None, device_type)
    k = _packed("k", k, q.device, device_type)
    v = _packed("v", v, q.device, device_type)
    # The 4-D checks of a batch of one: dtypes, head dims, GQA, layouts, grad.
    call = check.dense(as4(q), as4(k), as4(v), causal=causal, softmax_scale=softmax_scale,
                       deterministic=deterministic, fallback=fallback, num_splits=num_splits, sm_margin=sm_margin,
                       device_type=device_type, fp8=is_fp8(q))
    window, cap = check.window(window_size), check.softcap(softcap)
    batch = validate.count("cu_seqlens_q.shape[0] - 1 (batch)", _offsets_length(cu_seqlens_q, "cu_seqlens_q") - 1, 0,
                           validate.MAX_GRID_YZ)
    cu_q = index("cu_seqlens_q", cu_seqlens_q, batch + 1, q.device)
    cu_k = index("cu_seqlens_k", cu_seqlens_k, batch + 1, q.device)
    used_q = None if seqused_q is None else index("seqused_q", seqused_q, batch, q.device)
    used = None if seqused_k is None else index("seqused_k", seqused_k, batch, q.device)
    max_q = validate.count("max_seqlen_q", max_seqlen_q, 0, validate.MAX_SEQLEN)
    max_k = validate.count("max_seqlen_k", max_seqlen_k, 0, validate.MAX_SEQLEN)
    out, lse = outputs(out, lse, q, v, (q.shape[1], q.shape[0]), {"q": q, "k": k, "v": v}, device_type, as4)
    return replace(call, layout="varlen", q=q, k=k, v=v, out=out, lse=lse, window=window, softcap=cap,
                   cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, seqused_q=used_q, seqused_k=used, max_seqlen_q=max_q,
                   max_seqlen_k=max_k)


def caches(k_cache: Any, v_cache: Any) -> None:
    """k_cache and v_cache: 4-D tensors of one shape but for the head dim."""
    import torch

    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise FlashCoreError(f"{name} must be a 4-D tensor [B, Scache, Hkv, D], got "
                                 f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if k_cache.shape[:3] != v_cache.shape[:3]:
        raise FlashCoreError(f"k_cache has shape {tuple(k_cache.shape)} but v_cache has {tuple(v_cache.shape)}")


def kvcache(q: Any, k_cache: Any, v_cache: Any, cache_seqlens: Any, *, k_new: Any, v_new: Any, cache_batch_idx: Any,
            page_table: Any, cache_leftpad: Any = None, cu_seqlens_q: Any = None, max_seqlen_q: Any = None,
            causal: Any, softmax_scale: Any, window_size: Any, softcap: Any, num_splits: Any, sm_margin: Any,
            fallback: Any, out: Any, lse: Any) -> Call:
    """q [B, Sq, Hq, D] into caches [B_cache, S, Hkv, D] (int32 lengths [B], optional slots [B]) or paged caches
    [pages, page_size, Hkv, D] behind page_table [B, max_pages]. cache_seqlens may also be FA3's int or None (one
    length for every sequence, cache_length). k_new, v_new: keys to append at each sequence's length (checked here,
    written by flashcore/append.py); the Call's cache_seqlens are the lengths before the append. cu_seqlens_q
    (with max_seqlen_q): q packed [total_q, Hq, D], sequence b's queries rows [cu[b], cu[b + 1])."""
    import torch

    caches(k_cache, v_cache)
    fallback = check.fallback_choice(fallback)
    device_type = check.device_type(q, fallback)
    cu_q = None
    if cu_seqlens_q is None:
        q = validate.tensor("q", q, device_type, None)
        validate.rank("q", q, 4, check.BSHD)
        batch = q.shape[0]
    else:
        q = _packed("q", q, None, device_type)
        batch = validate.count("cu_seqlens_q.shape[0] - 1 (batch)", _offsets_length(cu_seqlens_q, "cu_seqlens_q") - 1,
                               0, validate.MAX_GRID_YZ)
        cu_q = index("cu_seqlens_q", cu_seqlens_q, batch + 1, q.device)
        if max_seqlen_q is None:
            raise FlashCoreError("max_seqlen_q is None: packed queries (cu_seqlens_q) need their longest sequence")
        max_seqlen_q = validate.count("max_seqlen_q", max_seqlen_q, 0, validate.MAX_SEQLEN)
        if cache_batch_idx is None and page_table is None and k_cache.shape[0] != batch:
            raise FlashCoreError(f"k_cache has {k_cache.shape[0]} entries for {batch} sequences (cu_seqlens_q): "
                                 "pass cache_batch_idx to map sequences to entries")
    q4 = q if cu_q is None else as4(q)
    k_cache = validate.tensor("k_cache", k_cache, device_type, q.device)
    slots = table = None
    if cache_batch_idx is not None:
        slots = index("cache_batch_idx", cache_batch_idx, batch, q.device)
    if page_table is not None:
        table = check_page_table(page_table, batch, k_cache, q.device, slots is not None)
    lengths = cache_seqlens
    if not isinstance(cache_seqlens, torch.Tensor):
        length = cache_length(cache_seqlens, cache_capacity(k_cache, table), k_new is not None)
        lengths = torch.full((batch,), length, dtype=torch.int32, device=k_cache.device)
    if k_new is not None or v_new is not None:
        _appendable(k_cache, v_cache, k_new, v_new, lengths, slots is None and table is None)
    # The 4-D checks; with slots or pages the cache's batch differs from q's, so they run on one entry of each and
    # the layouts of the whole tensors are checked after.
    one = slice(0, 1) if slots is not None or table is not None or cu_q is not None else slice(None)
    call = check.dense(q4[one], k_cache[one], v_cache[one], causal=causal, softmax_scale=softmax_scale,
                       fallback=fallback, num_splits=num_splits, sm_margin=sm_margin, device_type=device_type,
                       fp8=is_fp8(q))
    if one != slice(None) and q4[one].numel() and k_cache.shape[1]:
        for name, t in (("q", q4), ("k_cache", k_cache), ("v_cache", v_cache)):
            validate.layout(name, t)
    window, cap = check.window(window_size), check.softcap(softcap)
    lengths = index("cache_seqlens", lengths, batch, q.device)
    pad = None
    if cache_leftpad is not None:
        pad = index("cache_leftpad", cache_leftpad, batch, q.device)
    lse_shape = (q.shape[1], q.shape[0]) if cu_q is not None else (batch, q.shape[2], q.shape[1])
    out, lse = outputs(out, lse, q, v_cache, lse_shape, {"q": q, "k_cache": k_cache, "v_cache": v_cache},
                       device_type, as4 if cu_q is not None else lambda t: t)
    return replace(call, layout="kvcache", q=q, k=k_cache, v=v_cache, out=out, lse=lse, window=window, softcap=cap,
                   cache_seqlens=lengths, cache_batch_idx=slots, page_table=table, cache_leftpad=pad,
                   cu_seqlens_q=cu_q, max_seqlen_q=max_seqlen_q if cu_q is not None else 0)


def cache_length(cache_seqlens: Any, capacity: int, appending: bool) -> int:
    """FA3's one number of cached tokens for every sequence: an int, or None for the whole cache."""
    if cache_seqlens is None:
        if appending:
            raise FlashCoreError("k and v are appended at cache_seqlens: pass cache_seqlens (the tokens already "
                                 "in the cache)")
        return capacity
    if isinstance(cache_seqlens, bool) or not isinstance(cache_seqlens, int):
        raise FlashCoreError(f"cache_seqlens is {cache_seqlens!r}: expected an int or a [B] int32 tensor")
    if not 0 <= cache_seqlens <= capacity:
        raise FlashCoreError(f"cache_seqlens is {cache_seqlens}: the cache holds 0..{capacity} tokens "
                             "(k_cache.shape[1])")
    return cache_seqlens


def new_keys(k_cache: torch.Tensor, v_cache: torch.Tensor, k: Any, v: Any, batch: int, whose: str) -> None:
    """k and v to append: 4-D [B, Snew, Hkv, D] with `batch` (`whose` batch), the cache's heads, head dim, dtype and
    device."""
    import torch

    if (k is None) != (v is None):
        raise FlashCoreError("k and v are appended together: pass both or neither")
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


def _appendable(k_cache: torch.Tensor, v_cache: torch.Tensor, k: Any, v: Any, lengths: Any, by_entry: bool) -> None:
    """An append per sequence: k and v of the sequences' batch, int32 lengths on the cache's device, and (without
    slots or pages) one cache entry per sequence."""
    import torch

    batch = lengths.shape[0] if isinstance(lengths, torch.Tensor) and lengths.dim() == 1 else -1
    new_keys(k_cache, v_cache, k, v, batch, "the sequences'")
    if not isinstance(lengths, torch.Tensor) or lengths.dtype != torch.int32 or lengths.device != k_cache.device:
        raise FlashCoreError("cache_seqlens must be a torch.int32 [B] tensor on the cache's device")
    if by_entry and batch != k_cache.shape[0]:
        raise FlashCoreError(f"cache_seqlens has {batch} sequences but k_cache has {k_cache.shape[0]} entries: pass "
                             "cache_batch_idx to map sequences to entries")


def outputs(out: Any, lse: Any, q: torch.Tensor, v: torch.Tensor, lse_shape: tuple[int, ...],
            inputs: dict[str, torch.Tensor], device_type: str,
            view4: Callable[[torch.Tensor], torch.Tensor] = lambda t: t,
            ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The caller's out and lse, checked (shape, dtype, device, layout, no aliasing); None where none was given."""
    import torch

    if out is not None:
        out = validate.tensor("out", out, device_type, q.device)
        if tuple(out.shape) != out_shape(q, v):
            raise FlashCoreError(f"out has shape {tuple(out.shape)}: expected {out_shape(q, v)} (q's, with v's "
                                 "head dim)")
        validate.same("out", "dtype", out.dtype, out_dtype(q), "out must have q's dtype (bf16 for FP8 inputs)")
        validate.self_overlap("out", out)
        validate.not_aliased("out", out, inputs)
        if out.numel():
            validate.layout("out", view4(out))
    if lse is None:
        return out, None
    lse = validate.tensor("lse", lse, device_type, q.device)
    if tuple(lse.shape) != lse_shape or lse.dtype != torch.float32 or not lse.is_contiguous():
        raise FlashCoreError(f"lse is {lse.dtype} {tuple(lse.shape)} with stride {lse.stride()}: expected a "
                             f"contiguous torch.float32 tensor of shape {lse_shape}")
    validate.not_aliased("lse", lse, {**inputs, **({"out": out} if out is not None else {})})
    return out, lse


def check_page_size(page_size: int) -> None:
    """Any number of keys per page from 1 to MAX_PAGE_SIZE: the kernel loads each page's rows in TMA boxes of
    gcd(page_size, BLOCK_N) rows (one row for odd sizes), so no size needs a multiple of 16."""
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise FlashCoreError(f"page size (k_cache.shape[1]) is {page_size}: a paged cache needs 1 .. "
                             f"{MAX_PAGE_SIZE} keys per page")


def check_page_table(page_table: Any, batch: int, k_cache: torch.Tensor, device: torch.device,
                     slotted: bool = False) -> torch.Tensor:
    """page_table: int32 [B, max_pages] on the cache's device, rows contiguous; with cache_batch_idx (`slotted`)
    [B_cache, max_pages], any count of rows, sequence b reading row cache_batch_idx[b] (FA3's: the slot names a row
    of the table); k_cache [pages, page_size, Hkv, D] with page_size in 1 .. MAX_PAGE_SIZE."""
    import torch

    table = validate.tensor("page_table", page_table, device.type, device)
    rows_ok = table.dim() == 2 and (table.shape[0] >= 1 if slotted else table.shape[0] == batch)
    if table.dtype != torch.int32 or not rows_ok or table.shape[1] < 1:
        rows = "B_cache >= 1 (rows cache_batch_idx names)" if slotted else str(batch)
        raise FlashCoreError(f"page_table has dtype {table.dtype} and shape {tuple(table.shape)}: expected "
                             f"torch.int32 [{rows}, max_pages_per_sequence >= 1]")
    if table.stride(1) != 1:
        raise FlashCoreError(f"page_table has stride {table.stride()}: each row must be contiguous")
    check_page_size(k_cache.shape[1] if k_cache.dim() == 4 else 0)
    if table.shape[0] * table.stride(0) >= 1 << 31:
        raise FlashCoreError(f"page_table has {table.shape[0] * table.stride(0)} entries: at most 2^31 - 1")
    return table


def cache_capacity(k_cache: torch.Tensor, table: torch.Tensor | None) -> int:
    """Tokens one sequence's cache can hold: a slot's rows, or its row of page_table's pages."""
    return k_cache.shape[1] * (table.shape[1] if table is not None else 1)


# ---- debug checks of index values (one device sync each): without them a wrong offset, length or slot gives wrong
# rows or an illegal address, as in FA3; a wrong page id reads zeros (the loads are bounded by the page count).


def values(call: Call) -> None:
    """The index values of a checked serving call: offsets, used keys, cache lengths, slots, pages."""
    import torch

    if call.layout == "varlen":
        assert call.cu_seqlens_q is not None and call.cu_seqlens_k is not None
        check_offsets("cu_seqlens_q", call.cu_seqlens_q, call.q.shape[0], call.max_seqlen_q)
        check_offsets("cu_seqlens_k", call.cu_seqlens_k, call.k.shape[0], call.max_seqlen_k)
        if call.seqused_q is not None:
            check_used(call.seqused_q, call.cu_seqlens_q[1:] - call.cu_seqlens_q[:-1], "seqused_q",
                       "its sequence's queries")
        if call.seqused_k is not None:
            check_used(call.seqused_k, call.cu_seqlens_k[1:] - call.cu_seqlens_k[:-1])
    elif call.layout == "kvcache":
        assert call.cache_seqlens is not None
        lengths, slots, table, k_cache = call.cache_seqlens, call.cache_batch_idx, call.page_table, call.k
        if call.cu_seqlens_q is not None:
            check_offsets("cu_seqlens_q", call.cu_seqlens_q, call.q.shape[0], call.max_seqlen_q)
        check_used(lengths, torch.full_like(lengths, call.max_k), "cache_seqlens", "the cache's capacity")
        if call.cache_leftpad is not None:
            check_used(call.cache_leftpad, lengths, "cache_leftpad", "its sequence's end, cache_seqlens with the "
                       "appended tokens")
        entries, what = (k_cache.shape[0], "k_cache.shape[0]") if table is None else (table.shape[0],
                                                                                      "page_table.shape[0]")
        if slots is not None and (bool((slots < 0).any()) or bool((slots >= entries).any())):
            raise FlashCoreError(f"cache_batch_idx has values outside [0, {entries}) ({what})")
        if table is not None:
            rows = list(range(lengths.shape[0])) if slots is None else slots.tolist()
            check_pages(table, rows, lengths, k_cache.shape[1], k_cache.shape[0])


def check_pages(table: torch.Tensor, rows: list[int], lengths: torch.Tensor, page_size: int, pages: int) -> None:
    """Every page sequence b uses (the first ceil(cache_seqlens[b] / page_size) of its row rows[b]) is in
    [0, pages)."""
    entries = table.tolist()
    for b, (r, n) in enumerate(zip(rows, lengths.tolist(), strict=True)):
        used = entries[r][:-(-n // page_size)]
        bad = [p for p in used if not 0 <= p < pages]
        if bad:
            whose = "" if r == b else f" (the row cache_batch_idx[{b}] names)"
            raise FlashCoreError(f"page_table[{r}] names page {bad[0]}{whose}: pages are 0 .. {pages - 1} "
                                 "(k_cache.shape[0])")


def check_offsets(name: str, cu: torch.Tensor, total: int, max_len: int) -> None:
    """cu[0] == 0, non-decreasing, cu[-1] <= total, every length <= max_len."""
    offsets = cu.tolist()
    if offsets[0] != 0:
        raise FlashCoreError(f"{name}[0] is {offsets[0]}: offsets start at 0")
    lengths = [b - a for a, b in zip(offsets, offsets[1:], strict=False)]
    if any(n < 0 for n in lengths):
        raise FlashCoreError(f"{name} decreases at index {next(i for i, n in enumerate(lengths) if n < 0) + 1}: "
                             "offsets must be non-decreasing")
    if offsets[-1] > total:
        raise FlashCoreError(f"{name}[-1] is {offsets[-1]} but the packed tensor has {total} rows")
    if lengths and max(lengths) > max_len:
        raise FlashCoreError(f"{name} has a sequence of {max(lengths)} rows but max_seqlen is {max_len}")


def check_used(used: torch.Tensor, limit: torch.Tensor, name: str = "seqused_k",
               what: str = "its sequence's keys") -> None:
    """0 <= used[b] <= limit[b]."""
    for b, (n, cap) in enumerate(zip(used.tolist(), limit.tolist(), strict=True)):
        if not 0 <= n <= cap:
            raise FlashCoreError(f"{name}[{b}] is {n}: expected 0 .. {cap} ({what})")
