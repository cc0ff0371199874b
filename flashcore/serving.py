"""The serving layouts of FlashCore's kernel: packed variable-length batches, KV caches with a length and a
slot per sequence, sliding windows and soft-capping. FA3's names and semantics (flashcore/flash_attn.py maps its
entry points here):

    varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None, seqused_k=None, ...)
        q [total_q, Hq, D], k and v [total_k, Hkv, D]; sequence b is rows [cu[b], cu[b + 1]) of each (zero-length
        sequences allowed), of which it uses the first seqused_q[b] queries and seqused_k[b] keys (FA3's: the used
        counts are its lengths for the masks and the bottom-right diagonal); causal aligned bottom-right per
        sequence. Returns out [total_q, Hq, D], lse [Hq, total_q]; rows past seqused_q[b] are not written (as FA3:
        never read them).
    kvcache(q, k_cache, v_cache, cache_seqlens, cache_batch_idx=None, page_table=None, ...)
        q [B, Sq, Hq, D], k_cache and v_cache [B_cache, S_cache, Hkv, D]; sequence b attends to the first
        cache_seqlens[b] keys of cache slot cache_batch_idx[b] (default b). Returns out like q, lse [B, Hq, Sq].
        Paged: k_cache and v_cache are [pages, page_size, Hkv, D] (any page_size in 1 .. 65536, as FA3) and
        page_table int32 [B, max_pages]: sequence b's key j is row j % page_size of page page_table[b, j // page_size]
        (with cache_batch_idx: page_table [B_cache, max_pages], row cache_batch_idx[b] instead of b, as FA3).
        Every page size takes the TMA path (boxes of gcd(page_size, BLOCK_N) rows, each inside one page; a page of
        one key is a box of one row: correct at any size, slow below 16 keys, one TMA per row and chunk).
    dense(q, k, v, ...): flashcore.attention's layout with window_size and softcap.

window_size (left, right): query row i sees keys [i + d - left, i + d + right], d = its sequence's Sk - Sq, -1 =
unbounded; causal=True sets right to 0. softcap > 0: scores = softcap * tanh(softmax_scale * q.k / softcap).
attention_chunk C > 0 (FA3's chunked local attention): row i sees only the keys of the chunk [c, c + C) holding
i + d (c a multiple of C counted from the sequence's first key), within its causal and window bounds.
s_aux (attention sinks: GPT-OSS, vLLM's FA3 fork; every layout): [Hq] logits, one per query head, in raw units
(HF's GPT-OSS eager attention concatenates them as a column beside the scaled, masked scores, softmaxes, drops the
column): out = sum_j e^{s_j} v_j / (sum_j e^{s_j} + e^{sink_h}) over the keys row i sees, lse = log(sum_j e^{s_j} +
e^{sink_h}); a row that sees no key gets out = 0, lse = sink_h. The sink is not masked, scaled or soft-capped.

FP8 (float8_e4m3fn q, k, v; bf16 out): packed batches, contiguous caches (lengths, slots, left pad, appends copied
byte for byte) and, at head dim 128, paged caches with pages of a multiple of 16 keys, with FA3's float32 descales
q_descale, k_descale, v_descale [B, Hkv], B the call's sequences (packed: cu_seqlens_q's entries - 1; a cache: q's
batch, not the cache's entries), None meaning 1. The kernel transposes V in shared memory for these layouts (the
workspace copy of V^T is laid out per dense batch entry, and for a cache would transpose every entry's whole
capacity on every call). With windows, softcap, chunks, sinks or an acting fallback, packed FP8 rows run on the 16-bit
path dequantized (flashcore/fp8_modifiers.py); an FP8 cache with those, rotary, other paged caches or a left-padded
paged cache runs on a bf16 copy of the caches (flashcore/fp8_cache.py). The FP8 kernels check the index values
of paged caches on the device; those of packed rows and contiguous caches are checked on the host on every FP8 call
(a device sync; such a call is refused under CUDA graph capture).

Host checks (flashcore/check_serving.py: shapes, dtypes, devices, strides, window and softcap values) raise
FlashCoreError before anything runs; each entry here checks its arguments into one Call and computes it with
flashcore.forward.forward.
The values inside the index tensors (offsets, lengths, slots, page ids) live on the GPU, where the kernels check
each one they read (16-bit inputs, and FP8 on paged caches): a value out of range never reads or writes outside its
tensor, the rows it touches are NaN and flashcore.check_errors() names it (flashcore/device_errors.py), with no host
sync. debug_checks=True (or FLASHCORE_DEBUG_CHECKS=1) checks them on the host before the launch as well (a sync:
cu_seqlens start at 0, never decrease and end within the tensor; no sequence is longer than max_seqlen; seqused_q,
seqused_k and cache_seqlens fit; slots and pages exist) and raises at once. Cache rows past a sequence's length are
never read into the result, even when they hold NaN or Inf (unlike FA3).
Query rows of a packed q outside every sequence (past cu_seqlens_q[-1]) or past a sequence's seqused_q are not
written, by the kernel or the fallback: out keeps what it held (uninitialized memory where FlashCore allocates it)
and lse -inf where FlashCore allocates it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from flashcore import append, check, check_serving, device_errors, fastpath, fp8_cache, fp8_modifiers, launch, rotary
from flashcore.api import attention
from flashcore.call import Call, is_fp8, lse_shape
from flashcore.errors import FlashCoreError
from flashcore.forward import forward

if TYPE_CHECKING:
    import torch


def dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
          softmax_scale: float | None = None, window_size: Any = (-1, -1), softcap: Any = 0.0,
          attention_chunk: Any = 0, deterministic: bool = False, num_splits: int | None = None, sm_margin: int = 0,
          fallback: str = "error", out: torch.Tensor | None = None,
          lse: torch.Tensor | None = None, s_aux: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """flashcore.attention's [B, S, H, D] layout with a sliding window, chunks, soft-capping and attention sinks
    (s_aux: module docstring); (out, lse [B, Hq, Sq]). out / lse: optional output buffers, as flashcore.attention
    takes them."""
    key = None
    if out is None and lse is None and s_aux is None:  # sinks are a tensor the repeat-call key does not hold
        key = fastpath.serving_signature("dense", (q, k, v), (causal, softmax_scale, window_size, softcap,
                                                              attention_chunk, deterministic, num_splits, sm_margin,
                                                              fallback))
        entry = fastpath.lookup(key)
        if entry is not None and fastpath.aligned(q, k, v):
            return launch.again(entry, q, k, v, lse_shape(q))
    window, cap, chunk = check.window(window_size), check.softcap(softcap), check.chunk(attention_chunk)
    fallback = check.fallback_choice(fallback)
    if window == (-1, -1) and cap == 0.0 and chunk == 0 and s_aux is None:  # flashcore.attention's call and key
        return attention(q, k, v, causal=causal, softmax_scale=softmax_scale, out=out, lse=lse,
                         deterministic=deterministic, num_splits=num_splits, sm_margin=sm_margin, fallback=fallback)
    call = check.dense(q, k, v, causal=causal, softmax_scale=softmax_scale, out=out, lse=lse,
                       deterministic=deterministic, fallback=fallback, num_splits=num_splits, sm_margin=sm_margin,
                       device_type=check.device_type(q, fallback))
    sinks = check.sinks(s_aux, call.q.shape[2], call.q.device)
    return forward(replace(call, window=window, softcap=cap, attention_chunk=chunk, sinks=sinks), key)


def varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, *, seqused_q: Any = None,
           seqused_k: Any = None,
           causal: bool = False, softmax_scale: float | None = None, window_size: Any = (-1, -1),
           softcap: Any = 0.0, attention_chunk: Any = 0, deterministic: bool = False, fallback: str = "error",
           debug_checks: bool | None = None, out: torch.Tensor | None = None,
           lse: torch.Tensor | None = None, num_splits: int | None = None, sm_margin: int = 0,
           s_aux: Any = None, q_descale: Any = None, k_descale: Any = None,
           v_descale: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed variable-length sequences (module docstring): (out [total_q, Hq, D], lse [Hq, total_q] float32).
    out / lse: optional output buffers of those shapes (rows outside every sequence or past its seqused_q are then
    left as they were). FP8 (module docstring): q_descale, k_descale, v_descale float32 [B, Hkv]."""
    key = None
    if is_fp8(q) and fp8_modifiers.wanted(q, window_size, softcap, attention_chunk, fallback, s_aux):
        descales = {"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale}
        q, k, v = fp8_modifiers.packed(q, k, v, cu_seqlens_q, cu_seqlens_k, descales)  # (flashcore/fp8_modifiers.py)
        q_descale = k_descale = v_descale = None  # the 16-bit kernel checks the index values on the device
    debug = check_serving.host_checks(debug_checks, q)
    if not is_fp8(q) and not debug and out is None and lse is None and s_aux is None:
        arrays = {"cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k, "seqused_q": seqused_q,
                  "seqused_k": seqused_k}
        key = fastpath.serving_signature("varlen", (q, k, v, *arrays.values()),
                                         (max_seqlen_q, max_seqlen_k, causal, softmax_scale, window_size, softcap,
                                          attention_chunk, deterministic, fallback, num_splits, sm_margin))
        entry = fastpath.lookup(key)
        if entry is not None and fastpath.aligned(q, k, v):
            return launch.again(entry, q, k, v, lse_shape(q, packed=True), arrays, -math.inf)
    call = check_serving.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=seqused_q,
                                seqused_k=seqused_k,
                                causal=causal, softmax_scale=softmax_scale, window_size=window_size, softcap=softcap,
                                deterministic=deterministic, fallback=fallback, out=out, lse=lse,
                                num_splits=num_splits, sm_margin=sm_margin)
    call = replace(call, attention_chunk=check.chunk(attention_chunk),
                   sinks=check.sinks(s_aux, call.q.shape[-2], call.q.device))
    call = with_descales(call, q_descale, k_descale, v_descale)
    if debug:
        check_serving.values(call)
    return checked(forward(call, key), call.q, debug)


def with_descales(call: Call, q_descale: Any, k_descale: Any, v_descale: Any) -> Call:
    """An FP8 call with its descales, float32 [B, Hkv] (B: the call's sequences, not a cache's entries, as FA3);
    descales with 16-bit inputs raise."""
    if not call.fp8:
        check.no_descales(call.q, {"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale})
        return call
    return check.with_descales(call, q_descale, k_descale, v_descale)


def kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: Any, *, k: Any = None,
            v: Any = None, cache_batch_idx: Any = None, page_table: Any = None, cache_leftpad: Any = None,
            cu_seqlens_q: Any = None, max_seqlen_q: Any = None, causal: bool = False,
            softmax_scale: float | None = None, window_size: Any = (-1, -1), softcap: Any = 0.0,
            attention_chunk: Any = 0, num_splits: int | None = None, sm_margin: int = 0, fallback: str = "error",
            debug_checks: bool | None = None, out: torch.Tensor | None = None,
            lse: torch.Tensor | None = None, cu_seqlens_k_new: Any = None, rotary_cos: Any = None,
            rotary_sin: Any = None, rotary_seqlens: Any = None,
            rotary_interleaved: bool = True, s_aux: Any = None, q_descale: Any = None, k_descale: Any = None,
            v_descale: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A KV cache with a length (and optionally a slot) per sequence, or a paged cache (module docstring): (out,
    lse [B, Hq, Sq]). cache_seqlens: int32 [B] (or FA3's int / None: one length for all). k, v [B, Snew, Hkv, D]
    (or packed [total_new, Hkv, D] with cu_seqlens_k_new int32 [B + 1]): appended in place at each sequence's length
    first (FA3's append, flashcore/append.py), then attended to; rotary_cos, rotary_sin [seqlen_ro, rotary_dim / 2]
    (with rotary_seqlens, rotary_interleaved): FA3's rotary embedding of the new keys and of q
    (flashcore/rotary.py). cache_leftpad int32 [B]: sequence b's keys start at position cache_leftpad[b] of its
    entry or its pages (FA3's). cu_seqlens_q
    int32 [B + 1] with max_seqlen_q: q packed [total_q, Hq, D] (chunked prefill, speculative decoding), sequence b's
    queries rows [cu[b], cu[b + 1]); out [total_q, Hq, D], lse [Hq, total_q] (rows in no sequence not written).
    out / lse: optional output buffers of those shapes. FP8 (module docstring): q_descale, k_descale, v_descale
    float32 [B, Hkv]; k, v appended as they are (or rotated, on the bf16 copy: flashcore/fp8_cache.py)."""
    import torch

    if fp8_cache.wanted(q, k_cache, page_table=page_table, cache_leftpad=cache_leftpad, window_size=window_size,
                        softcap=softcap, attention_chunk=attention_chunk, fallback=fallback, s_aux=s_aux,
                        rotary_cos=rotary_cos, rotary_sin=rotary_sin):
        return fp8_cache.run(kvcache, q, k_cache, v_cache, cache_seqlens, k=k, v=v, cu_seqlens_q=cu_seqlens_q,
                             rotary_cos=rotary_cos, rotary_sin=rotary_sin, out=out, q_descale=q_descale,
                             k_descale=k_descale, v_descale=v_descale, cache_batch_idx=cache_batch_idx,
                             page_table=page_table, cache_leftpad=cache_leftpad, max_seqlen_q=max_seqlen_q,
                             causal=causal, softmax_scale=softmax_scale, window_size=window_size, softcap=softcap,
                             attention_chunk=attention_chunk, num_splits=num_splits, sm_margin=sm_margin,
                             fallback=fallback, debug_checks=debug_checks, lse=lse, cu_seqlens_k_new=cu_seqlens_k_new,
                             rotary_seqlens=rotary_seqlens, rotary_interleaved=rotary_interleaved, s_aux=s_aux)
    debug = check_serving.host_checks(debug_checks, q, page_table)
    key = None
    # FP8 repeats take the fast path too where no index value is checked on the host (a paged cache: the FP8
    # kernels check its values on the device); the descales are tensors of the key, their values device data.
    if not debug and out is None and lse is None and s_aux is None:
        per_sequence = isinstance(cache_seqlens, torch.Tensor)  # else FA3's one int (or None) for all, an argument
        tensors = (q, k_cache, v_cache, cache_seqlens if per_sequence else None, cache_batch_idx, page_table, k, v,
                   cache_leftpad, cu_seqlens_q, cu_seqlens_k_new, rotary_cos, rotary_sin, rotary_seqlens,
                   q_descale, k_descale, v_descale)
        args = (causal, softmax_scale, window_size, softcap, attention_chunk, num_splits, sm_margin, fallback,
                None if per_sequence else cache_seqlens, max_seqlen_q, rotary_interleaved)
        key = fastpath.serving_signature("kvcache", tensors, args)
        entry = fastpath.lookup(key)
        if entry is not None and fastpath.aligned(q, k_cache, v_cache):
            lengths = cache_seqlens
            if not per_sequence:  # the checked call's int, within the capacity
                capacity = check_serving.cache_capacity(k_cache, page_table)
                batch = q.shape[0] if cu_seqlens_q is None else cu_seqlens_q.shape[0] - 1
                lengths = torch.full((batch,), capacity if cache_seqlens is None else cache_seqlens,
                                     dtype=torch.int32, device=k_cache.device)
            if k is not None:  # every tensor has the layout of a checked call's
                rot = None
                if rotary_cos is not None and rotary_cos.shape[1]:
                    per_row = rotary.q_per_row(causal, check.window(window_size), check.chunk(attention_chunk),
                                               check_serving.cache_capacity(k_cache, page_table),
                                               q.shape[1] if cu_seqlens_q is None else max_seqlen_q)
                    rot = rotary.Rotary(rotary_cos, rotary_sin, rotary_seqlens, rotary_interleaved, per_row)
                kc, vc, kn, vn = append_operands(is_fp8(q), k_cache, v_cache, k, v)
                lengths, rotated = append.run(kc, vc, kn, vn, lengths, cache_batch_idx, page_table,
                                              cu_new=cu_seqlens_k_new, rotary=rot, q=q, cu_q=cu_seqlens_q)
                q = q if rotated is None else rotated
            arrays = {"cu_seqlens_q": cu_seqlens_q, "seqused_k": lengths, "kv_batch_idx": cache_batch_idx,
                      "leftpad_k": cache_leftpad, "page_table": page_table, "q_descale": q_descale,
                      "k_descale": k_descale, "v_descale": v_descale}
            packed = cu_seqlens_q is not None
            return launch.again(entry, q, k_cache, v_cache, lse_shape(q, packed), arrays,
                                -math.inf if packed else None)
    packed_new = k is not None and cu_seqlens_k_new is not None  # checked by append.packed_keys
    call = check_serving.kvcache(q, k_cache, v_cache, cache_seqlens, k_new=None if packed_new else k,
                                 v_new=None if packed_new else v,
                                 cache_batch_idx=cache_batch_idx, page_table=page_table,
                                 cache_leftpad=cache_leftpad, cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q,
                                 causal=causal,
                                 softmax_scale=softmax_scale, window_size=window_size, softcap=softcap,
                                 num_splits=num_splits, sm_margin=sm_margin, fallback=fallback, out=out, lse=lse)
    call = replace(call, attention_chunk=check.chunk(attention_chunk),
                   sinks=check.sinks(s_aux, call.q.shape[-2], call.q.device))
    call = with_descales(call, q_descale, k_descale, v_descale)  # before the append writes into the caches
    if k is not None or v is not None or rotary_cos is not None or rotary_sin is not None:
        call = appended(call, k, v, cache_seqlens, cu_seqlens_k_new if packed_new else None, rotary_cos, rotary_sin,
                        rotary_seqlens, rotary_interleaved, debug)
    if debug:
        check_serving.values(call)
    return checked(forward(call, key), call.q, debug)


def checked(result: tuple[torch.Tensor, torch.Tensor], q: torch.Tensor,
            debug: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """With debug checks, raise now for bad index data the kernel found on the device (its error word), as the host
    checks do before the launch: a call that already syncs pays the one more."""
    if debug and q.is_cuda:
        device_errors.check_errors(q.device)
    return result


def appended(call: Call, k: Any, v: Any, cache_seqlens: Any, cu_seqlens_k_new: Any, rotary_cos: Any,
             rotary_sin: Any, rotary_seqlens: Any, rotary_interleaved: Any, debug: bool) -> Call:
    """A checked cache call after its append (flashcore/append.py): the new lengths, and q rotated when the call
    has a rotary embedding (flashcore/rotary.py)."""
    assert call.cache_seqlens is not None
    cu_new = None
    if cu_seqlens_k_new is not None:
        cu_new = append.packed_keys(call.k, call.v, k, v, cu_seqlens_k_new, cache_seqlens, call.batch,
                                    call.cache_batch_idx is None and call.page_table is None)
    per_row = rotary.q_per_row(call.causal, call.window, call.attention_chunk, call.max_k, call.max_q)
    rot = rotary.checked(rotary_cos, rotary_sin, rotary_seqlens, rotary_interleaved, q=call.q,
                         appending=k is not None, batch=call.batch, head_dim=call.q.shape[-1], per_row=per_row)
    if k is None:
        return call
    # no rotary with FP8 (those calls take flashcore/fp8_cache.py)
    k_cache, v_cache, k, v = append_operands(call.fp8, call.k, call.v, k, v)
    lengths, q = append.run(k_cache, v_cache, k, v, call.cache_seqlens, call.cache_batch_idx, call.page_table,
                            cu_new=cu_new, rotary=rot, q=call.q, cu_q=call.cu_seqlens_q, debug=debug)
    return replace(call, cache_seqlens=lengths, q=call.q if q is None else q)


def append_operands(fp8: bool, k_cache: Any, v_cache: Any, k: Any, v: Any) -> tuple[Any, Any, Any, Any]:
    """The caches and new keys as the append kernel copies them: FP8 rows as 16-bit byte pairs (byte_pairs), the
    checked call and its fast-path repeats alike."""
    if not fp8:
        return k_cache, v_cache, k, v
    return (byte_pairs("k_cache", k_cache), byte_pairs("v_cache", v_cache), byte_pairs("k", k),
            byte_pairs("v", v))


def byte_pairs(name: str, t: torch.Tensor) -> torch.Tensor:
    """An FP8 tensor viewed as float16 (two E4M3 elements each) for the append kernel's 16-bit copy."""
    import torch

    try:
        return t.view(torch.float16)
    except RuntimeError:
        raise FlashCoreError(f"{name} has stride {t.stride()}: FP8 appends need a contiguous last dim and even "
                             "strides") from None


def fast_entries() -> int:
    """Signatures the repeat-call cache holds (flashcore/fastpath.py's, shared with flashcore.attention)."""
    return fastpath.size()
