"""The serving layouts of FlashCore's kernel (issue 15): packed variable-length batches, KV caches with a length and a
slot per sequence, sliding windows and soft-capping. FA3's names and semantics (flashcore/flash_attn.py maps its
entry points here):

    varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=None, ...)
        q [total_q, Hq, D], k and v [total_k, Hkv, D]; sequence b is rows [cu[b], cu[b + 1]) of each (zero-length
        sequences allowed); causal aligned bottom-right per sequence. Returns out [total_q, Hq, D], lse [Hq, total_q].
    kvcache(q, k_cache, v_cache, cache_seqlens, cache_batch_idx=None, page_table=None, ...)
        q [B, Sq, Hq, D], k_cache and v_cache [B_cache, S_cache, Hkv, D]; sequence b attends to the first
        cache_seqlens[b] keys of cache slot cache_batch_idx[b] (default b). Returns out like q, lse [B, Hq, Sq].
        Paged: k_cache and v_cache are [pages, page_size, Hkv, D] (page_size a multiple of 16) and page_table
        int32 [B, max_pages]: sequence b's key j is row j % page_size of page page_table[b, j // page_size]. Every
        page size takes the TMA path (boxes of gcd(page_size, BLOCK_N) rows, each inside one page).
    dense(q, k, v, ...): flashcore.attention's layout with window_size and softcap.

window_size (left, right): query row i sees keys [i + d - left, i + d + right], d = its sequence's Sk - Sq, -1 =
unbounded; causal=True sets right to 0. softcap > 0: scores = softcap * tanh(softmax_scale * q.k / softcap).

Host checks (shapes, dtypes, devices, strides, window and softcap values) raise FlashCoreError before anything runs.
The values inside the index tensors (offsets, lengths, slots) live on the GPU: reading them costs a device sync, so
they are checked only with debug_checks=True (or FLASHCORE_DEBUG_CHECKS=1): cu_seqlens start at 0, never decrease
and end within the tensor; no sequence is longer than max_seqlen; seqused_k and cache_seqlens fit; slots and
pages exist. Without the checks, a wrong offset, length or slot gives wrong rows or an illegal address, as in FA3;
a wrong page id reads zeros (the kernel's loads are bounded by the cache's page count). Cache rows past a
sequence's length are never read into the result, even when they hold NaN or Inf (unlike FA3, issue 1745).
Query rows of a packed q outside every sequence (past cu_seqlens_q[-1]) are not written.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from flashcore import _lib, api, fastpath, reference, validate
from flashcore.errors import FlashCoreError

if TYPE_CHECKING:
    import torch

MAX_WINDOW = 1 << 30


def debug_checks_on(flag: bool | None) -> bool:
    if flag is None:
        return os.environ.get("FLASHCORE_DEBUG_CHECKS", "") not in ("", "0")
    return validate.flag("debug_checks", flag)


def check_window(window_size: Any) -> tuple[int, int]:
    """(left, right), each an int in [-1, 2**30] (-1: unbounded)."""
    try:
        left, right = window_size
    except (TypeError, ValueError):
        raise FlashCoreError(f"window_size is {window_size!r}: expected a pair (left, right) of ints >= -1 "
                             "((-1, -1): no window)") from None
    for name, value in (("left", left), ("right", right)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not -1 <= int(value) <= MAX_WINDOW:
            raise FlashCoreError(f"window_size {name} is {value!r}: expected an int in [-1, {MAX_WINDOW}] "
                                 "(-1: unbounded on that side)")
    return int(left), int(right)


def check_softcap(softcap: Any) -> float:
    """A finite float >= 0 (0: off)."""
    if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real):
        raise FlashCoreError(f"softcap is {softcap!r}: expected a float >= 0 (0.0: no soft-capping)")
    value = float(softcap)
    if not (math.isfinite(value) and value >= 0):
        raise FlashCoreError(f"softcap is {value}: it must be finite and >= 0 (0.0: no soft-capping)")
    return value


def _index(name: str, t: Any, length: int, device: torch.device) -> torch.Tensor:
    """A contiguous int32 vector of `length` on `device`."""
    import torch

    t = validate.tensor(name, t, device.type, device)
    if t.dtype != torch.int32 or t.dim() != 1 or t.shape[0] != length:
        raise FlashCoreError(f"{name} has dtype {t.dtype} and shape {tuple(t.shape)}: expected torch.int32 "
                             f"[{length}]")
    if not t.is_contiguous():
        raise FlashCoreError(f"{name} has stride {t.stride()}: it must be contiguous")
    return t


def _packed(name: str, t: Any, device: torch.device | None, device_type: str = "cuda") -> torch.Tensor:
    t = validate.tensor(name, t, device_type, device)
    validate.rank(name, t, 3, "[total, H, D] (packed sequences)")
    return t


def _as4(t: torch.Tensor) -> torch.Tensor:
    return t.unsqueeze(0)


def _window_fields(causal: bool, window: tuple[int, int]) -> dict[str, int]:
    if window == (-1, -1):
        return {"window": 0, "window_left": 0, "window_right": 0}
    return {"window": 1, "window_left": window[0], "window_right": 0 if causal else window[1]}


def _tile_fields(q: torch.Tensor, heads_kv: int, max_q: int, max_k: int, causal: bool, deterministic: bool,
                 softcap: float) -> dict[str, int]:
    """The tuned table's tile configuration for the bucket of the longest sequences (api.tile_config's rules); soft-
    capping runs each head dim's short default point only, so it takes the table's tile order but no point. Cached:
    a decode step's host time is what a serving loop waits for."""
    env = (os.environ.get("FLASHCORE_TUNE"), os.environ.get("FLASHCORE_TUNE_TABLE"))
    return dict(_tile_fields_cached(api.device_index(q.device), q.dtype, q.shape[-2], heads_kv, q.shape[-1], max_q,
                                    max_k, causal, deterministic, softcap > 0, env))


@lru_cache(maxsize=1024)
def _tile_fields_cached(index: int, dtype: torch.dtype, heads_q: int, heads_kv: int, head_dim: int, max_q: int,
                        max_k: int, causal: bool, deterministic: bool, softcap: bool,
                        env: tuple[str | None, str | None]) -> tuple[tuple[str, int], ...]:
    import torch

    _, name = api._device_info(index)
    probe = api.Call(torch.empty((1, max_q, heads_q, head_dim), dtype=dtype, device="meta"),
                     torch.empty((1, max_k, heads_kv, head_dim), dtype=dtype, device="meta"),
                     torch.empty(0, device="meta"), None, None, causal, 1.0, deterministic, "error", 0)
    config = api.tile_config(probe, index, name)
    if softcap:
        config = replace(config, block_n=0, point="")
    return (*config.c_fields().items(), ("num_splits", config.num_splits))


def _base_params(call: api.Call, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: torch.Tensor, window: tuple[int, int], softcap: float) -> _lib.FcParams:
    """flashcore.attention's fc_params (api._params) of the call on these 4-D [B, S, H, D] tensors (packed ones as a
    batch of one; a cache as itself), with the window and softcap fields; tile fields come from _tune."""
    params = api._params(replace(call, q=q, k=k, v=v), out, lse)
    params.softcap = softcap
    for name, value in _window_fields(call.causal, window).items():
        setattr(params, name, value)
    return params


def _tune(params: _lib.FcParams, q: torch.Tensor, call: api.Call, softcap: float) -> None:
    """Apply the tuned tile configuration of the call's bucket (the call's own num_splits wins)."""
    fields = _tile_fields(q, params.heads_kv, params.seqlen_q, params.seqlen_k, call.causal, call.deterministic,
                          softcap)
    splits = fields.pop("num_splits")
    for name, value in fields.items():
        setattr(params, name, value)
    if params.num_splits == 0 and params.cu_seqlens_q is None:
        params.num_splits = splits


def _on_kernel(q: torch.Tensor, fallback: str) -> bool:
    """True: launch the kernel; False: compute with the reference (fallback='sdpa' off SM 9.0 or on the CPU)."""
    if q.device.type == "cpu":
        return False
    capability, name = api._device_info(api.device_index(q.device))
    return not api.use_fallback(str(q.device), capability, name, fallback)


def _check_fallback(fallback: Any) -> str:
    if fallback not in api.FALLBACKS:
        raise FlashCoreError(f"fallback is {fallback!r}: expected 'error' or 'sdpa' (compute with plain torch "
                             "off SM 9.0 and on the CPU)")
    return str(fallback)


def dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
          softmax_scale: float | None = None, window_size: Any = (-1, -1), softcap: Any = 0.0,
          deterministic: bool = False, num_splits: int | None = None, sm_margin: int = 0,
          fallback: str = "error", out: torch.Tensor | None = None,
          lse: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """flashcore.attention's [B, S, H, D] layout with a sliding window and soft-capping; (out, lse [B, Hq, Sq]).
    out / lse: optional output buffers, as flashcore.attention takes them."""
    import torch

    key = None
    if out is None and lse is None:
        key = _signature("dense", (q, k, v), (causal, softmax_scale, window_size, softcap, deterministic,
                                              num_splits, sm_margin, fallback))
        if (hit := _again(key, q, k, v, {}, _lse_dense)) is not None:
            return hit
    window, cap = check_window(window_size), check_softcap(softcap)
    fallback = _check_fallback(fallback)
    if window == (-1, -1) and cap == 0.0:  # flashcore.attention, which checks the rest itself
        return api.attention(q, k, v, causal=causal, softmax_scale=softmax_scale, out=out, lse=lse,
                             deterministic=deterministic, num_splits=num_splits, sm_margin=sm_margin,
                             fallback=fallback)
    call = api.check_call(q, k, v, causal=causal, softmax_scale=softmax_scale, out=out, lse=lse,
                          deterministic=deterministic, fallback=fallback, num_splits=num_splits,
                          sm_margin=sm_margin, device_type=api.device_type(q, fallback))
    q, k, v = call.q, call.k, call.v
    # check_call has checked a caller's out and lse (as flashcore.attention's); only missing ones are made here
    out = api.new_out(q, v) if call.out is None else call.out
    lse = call.lse if call.lse is not None else torch.empty(_lse_dense(q), dtype=torch.float32, device=q.device)
    if call.empty:
        out.zero_()
        lse.fill_(-math.inf)
        return out, lse
    if not _on_kernel(q, fallback):
        o, s = reference.dense(q, k, v, causal=call.causal, scale=call.scale, window=window, softcap=cap)
        return out.copy_(o), lse.copy_(s)
    params = _base_params(call, q, k, v, out, lse, window, cap)
    _tune(params, q, call, cap)
    api.launch(params, q.device, key)
    return out, lse


def varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, *, seqused_k: Any = None,
           causal: bool = False, softmax_scale: float | None = None, window_size: Any = (-1, -1),
           softcap: Any = 0.0, deterministic: bool = False, fallback: str = "error",
           debug_checks: bool | None = None, out: torch.Tensor | None = None,
           lse: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed variable-length sequences (module docstring): (out [total_q, Hq, D], lse [Hq, total_q] float32).
    out / lse: optional output buffers of those shapes (rows outside every sequence are then left as they were)."""
    key = None
    if not debug_checks_on(debug_checks) and out is None and lse is None:
        key = _signature("varlen", (q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k),
                         (max_seqlen_q, max_seqlen_k, causal, softmax_scale, window_size, softcap, deterministic,
                          fallback))
        arrays = {"cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k, "seqused_k": seqused_k}
        if (hit := _again(key, q, k, v, arrays, _lse_packed, -math.inf)) is not None:
            return hit
    fallback = _check_fallback(fallback)
    device_type = api.device_type(q, fallback)
    q = _packed("q", q, None, device_type)
    k = _packed("k", k, q.device, device_type)
    v = _packed("v", v, q.device, device_type)
    # The 4-D checks of a batch of one: dtypes, head dims, GQA, layouts, grad.
    call = api.check_call(_as4(q), _as4(k), _as4(v), causal=causal, softmax_scale=softmax_scale,
                          deterministic=deterministic, fallback=fallback, device_type=device_type)
    window, cap = check_window(window_size), check_softcap(softcap)
    batch = validate.count("cu_seqlens_q.shape[0] - 1 (batch)", _length(cu_seqlens_q, "cu_seqlens_q") - 1, 0,
                           validate.MAX_GRID_YZ)
    cu_q = _index("cu_seqlens_q", cu_seqlens_q, batch + 1, q.device)
    cu_k = _index("cu_seqlens_k", cu_seqlens_k, batch + 1, q.device)
    used = None if seqused_k is None else _index("seqused_k", seqused_k, batch, q.device)
    max_q = validate.count("max_seqlen_q", max_seqlen_q, 0, validate.MAX_SEQLEN)
    max_k = validate.count("max_seqlen_k", max_seqlen_k, 0, validate.MAX_SEQLEN)
    total_q, total_k = q.shape[0], k.shape[0]
    if debug_checks_on(debug_checks):
        check_offsets("cu_seqlens_q", cu_q, total_q, max_q)
        check_offsets("cu_seqlens_k", cu_k, total_k, max_k)
        if used is not None:
            check_used(used, (cu_k[1:] - cu_k[:-1]))
    given = lse is not None
    out, lse = outputs(out, lse, q, v, (q.shape[1], total_q), {"q": q, "k": k, "v": v}, device_type, _as4)
    if not given:
        lse.fill_(-math.inf)
    if batch == 0 or total_q == 0 or max_q == 0:
        return out, lse
    if max_k == 0 or total_k == 0:
        return out.zero_(), lse.fill_(-math.inf)
    if not _on_kernel(q, fallback):
        o, s = reference.varlen(q, k, v, cu_q.tolist(), cu_k.tolist(), None if used is None else used.tolist(),
                                causal=call.causal, scale=call.scale, window=window, softcap=cap)
        return out.copy_(o), lse.copy_(s)
    params = _base_params(call, _as4(q), _as4(k), _as4(v), _as4(out), lse, window, cap)
    params.batch, params.seqlen_q, params.seqlen_k = batch, max_q, max_k
    params.total_q, params.total_k = total_q, total_k
    params.cu_seqlens_q, params.cu_seqlens_k = cu_q.data_ptr(), cu_k.data_ptr()
    params.seqused_k = None if used is None else used.data_ptr()
    _tune(params, q, call, cap)
    api.launch(params, q.device, key)
    return out, lse


def kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor, *,
            cache_batch_idx: Any = None, page_table: Any = None, causal: bool = False,
            softmax_scale: float | None = None, window_size: Any = (-1, -1), softcap: Any = 0.0,
            num_splits: int | None = None, sm_margin: int = 0, fallback: str = "error",
            debug_checks: bool | None = None, out: torch.Tensor | None = None,
            lse: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A KV cache with a length (and optionally a slot) per sequence, or a paged cache (module docstring): (out,
    lse [B, Hq, Sq]). out / lse: optional output buffers of those shapes."""
    import torch

    key = None
    if not debug_checks_on(debug_checks) and out is None and lse is None:
        key = _signature("kvcache", (q, k_cache, v_cache, cache_seqlens, cache_batch_idx, page_table),
                         (causal, softmax_scale, window_size, softcap, num_splits, sm_margin, fallback))
        arrays = {"seqused_k": cache_seqlens, "kv_batch_idx": cache_batch_idx, "page_table": page_table}
        if (hit := _again(key, q, k_cache, v_cache, arrays, _lse_dense)) is not None:
            return hit
    fallback = _check_fallback(fallback)
    device_type = api.device_type(q, fallback)
    q = validate.tensor("q", q, device_type, None)
    validate.rank("q", q, 4, api.BSHD)
    batch = q.shape[0]
    k_cache = validate.tensor("k_cache", k_cache, device_type, q.device)
    slots = table = None
    if cache_batch_idx is not None:
        slots = _index("cache_batch_idx", cache_batch_idx, batch, q.device)
    if page_table is not None:
        table = check_page_table(page_table, batch, k_cache, q.device, slots)
    if isinstance(v_cache, torch.Tensor) and v_cache.shape[:3] != k_cache.shape[:3]:
        raise FlashCoreError(f"k_cache has shape {tuple(k_cache.shape)} but v_cache has {tuple(v_cache.shape)}")
    # The 4-D checks; with slots or pages the cache's batch differs from q's, so they run on one entry of each and
    # the layouts of the whole tensors are checked after.
    one = slice(0, 1) if slots is not None or table is not None else slice(None)
    call = api.check_call(q[one], k_cache[one], v_cache[one], causal=causal, softmax_scale=softmax_scale,
                          fallback=fallback, num_splits=num_splits, sm_margin=sm_margin, device_type=device_type)
    if one != slice(None) and not call.empty:
        for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
            validate.layout(name, t)
    window, cap = check_window(window_size), check_softcap(softcap)
    lengths = _index("cache_seqlens", cache_seqlens, batch, q.device)
    capacity = cache_capacity(k_cache, table)
    if debug_checks_on(debug_checks):
        check_used(lengths, torch.full_like(lengths, capacity), "cache_seqlens", "the cache's capacity")
        if slots is not None and (bool((slots < 0).any()) or bool((slots >= k_cache.shape[0]).any())):
            raise FlashCoreError(f"cache_batch_idx has values outside [0, {k_cache.shape[0]}) (k_cache.shape[0])")
        if table is not None:
            check_pages(table, lengths, k_cache.shape[1], k_cache.shape[0])
    out, lse = outputs(out, lse, q, v_cache, (batch, q.shape[2], q.shape[1]),
                       {"q": q, "k_cache": k_cache, "v_cache": v_cache}, device_type)
    if q.numel() == 0 or capacity == 0:
        return out.zero_(), lse.fill_(-math.inf)
    if not _on_kernel(q, fallback):
        for b, n in enumerate(lengths.tolist()):
            kb, vb = cached_keys(k_cache, v_cache, b, n, slots, table)
            out[b], lse[b] = reference.sequence(q[b], kb, vb, causal=call.causal, scale=call.scale, window=window,
                                                softcap=cap)
        return out, lse
    params = _base_params(call, q, k_cache, v_cache, out, lse, window, cap)
    params.seqused_k = lengths.data_ptr()
    if slots is not None:
        params.kv_batch_idx, params.kv_batch = slots.data_ptr(), k_cache.shape[0]
    if table is not None:
        params.batch, params.seqlen_k = batch, capacity
        params.page_table, params.page_table_stride = table.data_ptr(), table.stride(0)
        params.page_size, params.kv_batch = k_cache.shape[1], k_cache.shape[0]
        # The tuned table is not read: a paged cache runs on the default points (2 consumer warpgroups).
    else:
        _tune(params, q, call, cap)
    api.launch(params, q.device, key)
    return out, lse


def outputs(out: Any, lse: Any, q: torch.Tensor, v: torch.Tensor, lse_shape: tuple[int, ...],
            inputs: dict[str, torch.Tensor], device_type: str,
            as4: Callable[[torch.Tensor], torch.Tensor] = lambda t: t) -> tuple[torch.Tensor, torch.Tensor]:
    """The caller's out and lse, checked (shape, dtype, device, layout, no aliasing), or new ones."""
    import torch

    if out is None:
        out = api.new_out(q, v)
    else:
        out = validate.tensor("out", out, device_type, q.device)
        if tuple(out.shape) != api.out_shape(q, v):
            raise FlashCoreError(f"out has shape {tuple(out.shape)}: expected {api.out_shape(q, v)} (q's, with v's "
                                 "head dim)")
        validate.same("out", "dtype", out.dtype, q.dtype, "out must have q's dtype")
        validate.self_overlap("out", out)
        validate.not_aliased("out", out, inputs)
        if out.numel():
            validate.layout("out", as4(out))
    if lse is None:
        return out, torch.empty(lse_shape, dtype=torch.float32, device=q.device)
    lse = validate.tensor("lse", lse, device_type, q.device)
    if tuple(lse.shape) != lse_shape or lse.dtype != torch.float32 or not lse.is_contiguous():
        raise FlashCoreError(f"lse is {lse.dtype} {tuple(lse.shape)} with stride {lse.stride()}: expected a "
                             f"contiguous torch.float32 tensor of shape {lse_shape}")
    validate.not_aliased("lse", lse, {**inputs, "out": out})
    return out, lse


def check_page_table(page_table: Any, batch: int, k_cache: torch.Tensor, device: torch.device,
                     cache_batch_idx: Any = None) -> torch.Tensor:
    """page_table: int32 [B, max_pages] on the cache's device, rows contiguous, no cache_batch_idx beside it;
    k_cache [pages, page_size, Hkv, D] with page_size a multiple of 16 (the kernel's TMA boxes lie inside a page)."""
    import torch

    if cache_batch_idx is not None:
        raise FlashCoreError("cache_batch_idx and page_table cannot be combined: a paged cache names each "
                             "sequence's pages in its row of page_table")
    table = validate.tensor("page_table", page_table, device.type, device)
    if table.dtype != torch.int32 or table.dim() != 2 or table.shape[0] != batch or table.shape[1] < 1:
        raise FlashCoreError(f"page_table has dtype {table.dtype} and shape {tuple(table.shape)}: expected "
                             f"torch.int32 [{batch}, max_pages_per_sequence >= 1]")
    if table.stride(1) != 1:
        raise FlashCoreError(f"page_table has stride {table.stride()}: each row must be contiguous")
    page_size = k_cache.shape[1] if k_cache.dim() == 4 else 0
    if page_size < 16 or page_size % 16:
        raise FlashCoreError(f"page size (k_cache.shape[1]) is {page_size}: a paged cache needs a multiple of 16")
    if table.shape[0] * table.stride(0) >= 1 << 31:
        raise FlashCoreError(f"page_table has {table.shape[0] * table.stride(0)} entries: at most 2^31 - 1")
    return table


def cache_capacity(k_cache: torch.Tensor, table: torch.Tensor | None) -> int:
    """Tokens one sequence's cache can hold: a slot's rows, or its row of page_table's pages."""
    return k_cache.shape[1] * (table.shape[1] if table is not None else 1)


def check_pages(table: torch.Tensor, lengths: torch.Tensor, page_size: int, pages: int) -> None:
    """Debug check (one device sync): every page a sequence uses (the first ceil(cache_seqlens / page_size) of its
    row) is in [0, pages). Without it, an id outside reads zeros (TMA bounds the loads), never other memory."""
    for b, (row, n) in enumerate(zip(table.tolist(), lengths.tolist(), strict=True)):
        used = row[:-(-n // page_size)]
        bad = [p for p in used if not 0 <= p < pages]
        if bad:
            raise FlashCoreError(f"page_table[{b}] names page {bad[0]}: pages are 0 .. {pages - 1} (k_cache.shape[0])")


def cached_keys(k_cache: torch.Tensor, v_cache: torch.Tensor, b: int, n: int, slots: torch.Tensor | None,
                table: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence b's first n keys and values [n, Hkv, D] of a cache (its slot, or its pages)."""
    if table is None:
        entry = int(slots[b]) if slots is not None else b
        return k_cache[entry, :n], v_cache[entry, :n]
    page_size = k_cache.shape[1]
    pages = table[b, :-(-n // page_size)].long()
    return (k_cache[pages].flatten(0, 1)[:n], v_cache[pages].flatten(0, 1)[:n])


def _length(t: Any, name: str) -> int:
    import torch

    if not isinstance(t, torch.Tensor) or t.dim() != 1:
        raise FlashCoreError(f"{name} must be a 1-D torch.int32 tensor [batch + 1], got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if t.shape[0] < 1:
        raise FlashCoreError(f"{name} is empty: it holds batch + 1 offsets, starting with 0")
    return int(t.shape[0])


def check_offsets(name: str, cu: torch.Tensor, total: int, max_len: int) -> None:
    """Debug check (one device sync): cu[0] == 0, non-decreasing, cu[-1] <= total, every length <= max_len."""
    values = cu.tolist()
    if values[0] != 0:
        raise FlashCoreError(f"{name}[0] is {values[0]}: offsets start at 0")
    lengths = [b - a for a, b in zip(values, values[1:], strict=False)]
    if any(n < 0 for n in lengths):
        raise FlashCoreError(f"{name} decreases at index {next(i for i, n in enumerate(lengths) if n < 0) + 1}: "
                             "offsets must be non-decreasing")
    if values[-1] > total:
        raise FlashCoreError(f"{name}[-1] is {values[-1]} but the packed tensor has {total} rows")
    if lengths and max(lengths) > max_len:
        raise FlashCoreError(f"{name} has a sequence of {max(lengths)} rows but max_seqlen is {max_len}")


def check_used(used: torch.Tensor, limit: torch.Tensor, name: str = "seqused_k",
               what: str = "its sequence's keys") -> None:
    """Debug check (one device sync): 0 <= used[b] <= limit[b]."""
    for b, (n, cap) in enumerate(zip(used.tolist(), limit.tolist(), strict=True)):
        if not 0 <= n <= cap:
            raise FlashCoreError(f"{name}[{b}] is {n}: expected 0 .. {cap} ({what})")


# ---- repeat calls: flashcore/fastpath.py's rule and cache for the serving entries. A call whose every input but the
# data pointers and the index tensors' values matches an earlier checked launch skips the checks, the table lookup
# and the plan; debug_checks always takes the checked path. The keys start with the entry's name, so they never
# meet flashcore.attention's.


def _signature(kind: str, tensors: tuple[Any, ...], args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """What the checked path's verdict and launch depend on, pointers and index values aside; None: uncacheable."""
    import torch

    try:
        key: list[Any] = [kind, torch.is_grad_enabled()]
        for t in tensors:
            if t is None:
                key.append(None)
            else:
                key += [type(t), t.shape, t.stride(), t.dtype, t.device, t.layout, t.requires_grad]
        for a in args:
            key += [type(a), tuple(a) if isinstance(a, list) else a]
        key += [os.environ.get("FLASHCORE_TUNE"), os.environ.get("FLASHCORE_TUNE_TABLE")]
        out = tuple(key)
        hash(out)
    except (AttributeError, TypeError):
        return None
    return out


def _again(key: tuple[Any, ...] | None, q: Any, k: Any, v: Any, arrays: dict[str, Any],
           lse_shape: Callable[[torch.Tensor], tuple[int, ...]],
           fill: float | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Launch with a remembered call's parameters and these tensors' addresses; None when there is none or a base
    address is not 16-byte aligned (the checked path then says why). A hit means every tensor has the type, shape
    and layout of the checked call's (the key says so), so q, k, v and the index arrays are tensors or None as
    there."""
    import torch

    entry = fastpath.lookup(key)
    if entry is None or not fastpath.aligned(q, k, v):
        return None
    out = api.new_out(q, v)
    if fill is None:
        lse = torch.empty(lse_shape(q), dtype=torch.float32, device=q.device)
    else:
        lse = torch.full(lse_shape(q), fill, dtype=torch.float32, device=q.device)
    params = fastpath.params_for(entry, q, k, v, out, lse)
    for name, t in arrays.items():
        setattr(params, name, None if t is None else t.data_ptr())
    api._forward(_lib.load(), params, entry.workspace_bytes, q.device)
    return out, lse


def _lse_dense(q: torch.Tensor) -> tuple[int, ...]:
    return (q.shape[0], q.shape[2], q.shape[1])


def _lse_packed(q: torch.Tensor) -> tuple[int, ...]:
    return (q.shape[1], q.shape[0])


def fast_entries() -> int:
    """Signatures the repeat-call cache holds (flashcore/fastpath.py's, shared with flashcore.attention)."""
    return fastpath.size()
