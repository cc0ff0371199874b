"""FA3's append of new keys into a KV cache (flash_attn_with_kvcache's k and v): written in place at each
sequence's length before the attention reads the cache, with the rotary embedding of the new keys and of q
(flashcore/rotary.py) when the call has one.

New keys come as [B, Snew, Hkv, D] or packed [total_new, Hkv, D] with cu_seqlens_k_new [B + 1] (sequence b's rows
[cu[b], cu[b + 1])). Sequence b's j-th new row goes to position cache_seqlens[b] + j of its cache entry
(cache_batch_idx[b], default b) or of its page-table row (paged caches); with cache_leftpad too (FA3 writes there:
the length counts the pad). The new lengths are cache_seqlens + the new rows.

On a Hopper GPU the append is one launch of the library's kernel (kernel/append.cu, fc_append_kv): the index values
are checked on the device, a bad one writes nothing out of bounds and is recorded in the device error word
(flashcore/device_errors.py; debug checks raise at once), with no host sync. Elsewhere (CPU tensors, or a GPU the
kernel does not run on, with fallback="sdpa") torch computes it, checking the values on the host first.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

from flashcore import _lib, check_serving, device_errors, launch
from flashcore.errors import FlashCoreError, KernelLaunchError

if TYPE_CHECKING:
    import torch

    from flashcore.rotary import Rotary


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


def packed_keys(k_cache: torch.Tensor, v_cache: torch.Tensor, k: Any, v: Any, cu_seqlens_k_new: Any,
                cache_seqlens: Any, batch: int, by_entry: bool) -> torch.Tensor:
    """Packed new keys: k and v [total_new, Hkv, D] (the cache's heads, head dims, dtype and device) and
    cu_seqlens_k_new int32 [batch + 1]; the offsets, checked."""
    import torch

    if (k is None) != (v is None):
        raise FlashCoreError("k and v are appended together: pass both or neither")
    if cache_seqlens is None:
        raise FlashCoreError("k and v are appended at cache_seqlens: pass cache_seqlens (the tokens already in the "
                             "cache)")
    for name, new, cache in (("k", k, k_cache), ("v", v, v_cache)):
        if not isinstance(new, torch.Tensor) or new.dim() != 3 or tuple(new.shape[1:]) != tuple(cache.shape[2:]):
            shape = tuple(new.shape) if isinstance(new, torch.Tensor) else type(new).__name__
            raise FlashCoreError(f"{name} is {shape}: with cu_seqlens_k_new it is packed [total_new, Hkv, D] with "
                                 f"the cache's heads and head dim {tuple(cache.shape[2:])}")
        if new.dtype != cache.dtype or new.device != cache.device:
            raise FlashCoreError(f"{name} is {new.dtype} on {new.device}: the cache is {cache.dtype} on "
                                 f"{cache.device}")
        if new.shape[0] and new.stride(2) != 1 and new.shape[2] > 1:
            raise FlashCoreError(f"{name} has stride {new.stride()}: its last dim must be contiguous")
    if k.shape[0] != v.shape[0]:
        raise FlashCoreError(f"k has {k.shape[0]} rows but v has {v.shape[0]}")
    if by_entry and batch != k_cache.shape[0]:
        raise FlashCoreError(f"cu_seqlens_k_new has {batch} sequences but k_cache has {k_cache.shape[0]} entries: "
                             "pass cache_batch_idx to map sequences to entries")
    return check_serving.index("cu_seqlens_k_new", cu_seqlens_k_new, batch + 1, k_cache.device)


def run(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor,
        slots: torch.Tensor | None, table: torch.Tensor | None, *, cu_new: torch.Tensor | None = None,
        rotary: Rotary | None = None, q: torch.Tensor | None = None, cu_q: torch.Tensor | None = None,
        debug: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Append k, v (module docstring) and rotate q with `rotary`: (the new lengths int32 [B], q rotated (a new
    tensor) or q itself without rotary). Every input's layout is checked already; the index values are checked
    here (kernel: on the device, -1 lengths and NaN q rows for a skipped sequence; torch: FlashCoreError)."""
    if on_kernel(k_cache):
        return _kernel(k_cache, v_cache, k, v, lengths, slots, table, cu_new, rotary, q, cu_q, debug)
    return _torch(k_cache, v_cache, k, v, lengths, slots, table, cu_new, rotary, q, cu_q)


def on_kernel(k_cache: torch.Tensor) -> bool:
    """The library's kernel appends into caches on an SM 9.0 GPU; torch elsewhere."""
    if k_cache.device.type != "cuda":
        return False
    capability, _ = launch.device_info(launch.device_index(k_cache.device))
    return capability == (9, 0)


# ---- the kernel


def _strides(t: torch.Tensor, packed: bool = False) -> ctypes.Array[ctypes.c_int64]:
    """Element strides (batch, row, head); a packed [total, H, D] tensor has no batch stride. Size-1 dims: 0."""
    dims = [None, 0, 1] if packed else [0, 1, 2]
    return _lib.Strides(*[0 if d is None or t.shape[d] <= 1 else t.stride(d) for d in dims])


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _kernel(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor,
            slots: torch.Tensor | None, table: torch.Tensor | None, cu_new: torch.Tensor | None,
            rotary: Rotary | None, q: torch.Tensor | None, cu_q: torch.Tensor | None,
            debug: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    import torch

    device, batch, packed = k_cache.device, lengths.shape[0], cu_new is not None
    out_lengths = torch.empty(batch, dtype=torch.int32, device=device)
    p = _lib.FcAppendParams(
        dtype=launch.c_dtype(k_cache), batch=batch, heads_kv=k_cache.shape[2], head_dim=k_cache.shape[3],
        head_dim_v=v_cache.shape[3], k_new=k.data_ptr(), v_new=v.data_ptr(), k_new_stride=_strides(k, packed),
        v_new_stride=_strides(v, packed), seqlen_new=0 if packed else k.shape[1],
        total_new=k.shape[0] if packed else batch * k.shape[1], cu_seqlens_k_new=_ptr(cu_new),
        k_cache=k_cache.data_ptr(), v_cache=v_cache.data_ptr(), k_cache_stride=_strides(k_cache),
        v_cache_stride=_strides(v_cache), cache_batch=k_cache.shape[0],
        capacity=check_serving.cache_capacity(k_cache, table), cache_seqlens=lengths.data_ptr(),
        cache_batch_idx=_ptr(slots), seqlens_out=out_lengths.data_ptr(),
        errors=device_errors.words(device).data_ptr(),
    )  # fmt: skip
    if table is not None:
        p.page_table, p.page_table_stride, p.page_table_rows = table.data_ptr(), table.stride(0), table.shape[0]
        p.page_size = k_cache.shape[1]
    q_out = q
    if rotary is not None:
        p.rotary_cos, p.rotary_sin, p.rotary_rows, p.rotary_dim = (rotary.cos.data_ptr(), rotary.sin.data_ptr(),
                                                                   rotary.cos.shape[0], rotary.dim)
        p.rotary_cos_stride, p.rotary_sin_stride = rotary.cos.stride(0), rotary.sin.stride(0)
        p.rotary_interleaved, p.rotary_seqlens = int(rotary.interleaved), _ptr(rotary.seqlens)
        if q is not None and q.numel():
            q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
            packed_q = cu_q is not None
            p.q, p.q_out, p.heads_q = q.data_ptr(), q_out.data_ptr(), q.shape[-2]
            p.seqlen_q, p.total_q = (0, q.shape[0]) if packed_q else (q.shape[1], q.shape[0] * q.shape[1])
            p.q_stride, p.q_out_stride = _strides(q, packed_q), _strides(q_out, packed_q)
            p.cu_seqlens_q, p.q_rotary_per_row = _ptr(cu_q), int(rotary.q_per_row)
    lib = _lib.load()
    with torch.cuda.device(device):
        status = lib.fc_append_kv(p, torch.cuda.current_stream(device).cuda_stream)
    if status != _lib.FC_OK:
        message = _lib.last_error(lib)
        raise KernelLaunchError(message) if status == _lib.FC_ERR_CUDA else FlashCoreError(message)
    if debug:
        device_errors.check_errors(device)
    return out_lengths, q_out


# ---- torch (CPU tensors, or a GPU the kernel does not run on)


def _bad(code: int, index: int, value: int, bound: int) -> FlashCoreError:
    """The error the kernel would record (flashcore/device_errors.py's names), raised at once."""
    name, rule = device_errors.TENSORS[code]
    return FlashCoreError(f"bad index data: {name}[{index}] = {value} (bound {bound}; expected {rule})")


def _offsets(name_code: int, cu: list[int], b: int, total: int) -> tuple[int, int]:
    first, last = cu[b], cu[b + 1]
    if not 0 <= first <= total:
        raise _bad(name_code, b, first, total + 1)
    if not first <= last <= total:
        raise _bad(name_code, b + 1, last, total + 1)
    return first, last - first


def _torch(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor,
           slots: torch.Tensor | None, table: torch.Tensor | None, cu_new: torch.Tensor | None,
           rotary: Rotary | None, q: torch.Tensor | None,
           cu_q: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    import torch

    from flashcore import rotary as rotary_mod

    batch, device = lengths.shape[0], k_cache.device
    starts = lengths.tolist()
    rows = slots.tolist() if slots is not None else list(range(batch))
    entries = table.shape[0] if table is not None else k_cache.shape[0]
    capacity = check_serving.cache_capacity(k_cache, table)
    cu = cu_new.tolist() if cu_new is not None else None
    cuq = cu_q.tolist() if cu_q is not None and q is not None else None
    bases = rotary.seqlens.tolist() if rotary is not None and rotary.seqlens is not None else starts
    offsets, counts, q_offsets, q_counts = [], [], [], []
    for b in range(batch):  # the kernel's checks, in its order
        if q is not None:
            first, n_q = _offsets(5, cuq, b, q.shape[0]) if cuq is not None else (b * q.shape[1], q.shape[1])
            q_offsets.append(first)
            q_counts.append(n_q)
        if not 0 <= rows[b] < entries:
            raise _bad(3, b, rows[b], entries)
        first, n = _offsets(9, cu, b, k.shape[0]) if cu is not None else (b * k.shape[1], k.shape[1])
        offsets.append(first)
        counts.append(n)
        if not 0 <= starts[b] <= capacity - n:
            raise _bad(2, b, starts[b], capacity - n + 1)
        if rotary is not None:
            span = max(n, (q_counts[b] if rotary.q_per_row else min(q_counts[b], 1)) if q is not None else 0)
            if not 0 <= bases[b] <= rotary.cos.shape[0] - span:
                raise _bad(10, b, bases[b], rotary.cos.shape[0] - span + 1)
    seq = torch.repeat_interleave(torch.arange(batch), torch.tensor(counts, dtype=torch.int64))
    j = _within(counts)
    pos = torch.tensor(starts, dtype=torch.int64)[seq] + j
    src = torch.tensor(offsets, dtype=torch.int64)[seq] + j
    entry, row = torch.tensor(rows, dtype=torch.int64)[seq], pos
    if table is not None:
        page_size = k_cache.shape[1]
        column = pos // page_size
        pages = table.cpu().to(torch.int64)[entry, column]
        bad = ((pages < 0) | (pages >= k_cache.shape[0])).nonzero()
        if bad.numel():
            i = int(bad[0, 0])
            raise _bad(1, int(entry[i]) * table.stride(0) + int(column[i]), int(pages[i]), k_cache.shape[0])
        entry, row = pages, pos % page_size
    k_rows = k.reshape(-1, *k.shape[-2:]).index_select(0, src.to(device))
    v_rows = v.reshape(-1, *v.shape[-2:]).index_select(0, src.to(device))
    if rotary is not None:
        k_rows = rotary_mod.rotate(k_rows, rotary, (torch.tensor(bases, dtype=torch.int64)[seq] + j).to(device))
    entry, row = entry.to(device), row.to(device)
    k_cache[entry, row] = k_rows
    v_cache[entry, row] = v_rows
    new_lengths = lengths + torch.tensor(counts, dtype=torch.int32, device=device)
    if rotary is None or q is None or not q.numel():
        return new_lengths, q
    q_seq = torch.repeat_interleave(torch.arange(batch), torch.tensor(q_counts, dtype=torch.int64))
    q_j = _within(q_counts)
    q_pos = torch.tensor(bases, dtype=torch.int64)[q_seq] + (q_j if rotary.q_per_row else 0)
    q_src = torch.tensor(q_offsets, dtype=torch.int64)[q_seq] + q_j
    flat = q.reshape(-1, *q.shape[-2:])
    q_out = flat.clone()
    q_out[q_src.to(device)] = rotary_mod.rotate(flat.index_select(0, q_src.to(device)), rotary, q_pos.to(device))
    return new_lengths, q_out.view(q.shape)


def _within(counts: list[int]) -> torch.Tensor:
    """Each row's index within its sequence, for sequences of `counts` rows laid end to end (int64)."""
    import torch

    n = torch.tensor(counts, dtype=torch.int64)
    first = n.cumsum(0) - n
    return torch.arange(int(n.sum())) - torch.repeat_interleave(first, n)
