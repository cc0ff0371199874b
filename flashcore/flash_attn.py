"""FlashAttention-3's entry points on FlashCore: `flash_attn_func`, `flash_attn_varlen_func` and
`flash_attn_with_kvcache`, with FA3's argument names, order, defaults and semantics
(hopper/flash_attn_interface.py). Switch with one import:

    from flashcore import flash_attn_func          # instead of: from flash_attn_interface import flash_attn_func

Sliding windows, softcap, packed variable-length batches, per-sequence cache lengths, cache_batch_idx and paged
caches run on the kernel (flashcore/serving.py). FP8 (float8_e4m3fn q, k, v with q_descale, k_descale, v_descale)
runs on dense batches (flashcore.attention_fp8), packed batches and KV caches (flashcore/serving.py; what the FP8
kernels lack: flashcore/fp8_modifiers.py, flashcore/fp8_cache.py).
flash_attn_with_kvcache appends k and v (packed too: cu_seqlens_k_new) with FA3's rotary embedding on the library's
append kernel (flashcore/append.py). FA3's MLA operand qv runs on torch (flashcore/mla.py). An argument FlashCore
does not support raises UnsupportedArgument naming it and the reason, before anything runs; FA3's pure speed hints
(pack_gqa; scheduler_metadata, checked against the call's shapes: flashcore/scheduler.py) are accepted. FlashCore is
forward-only: with inputs that need a gradient (grad mode on) these run as fa3-fwd's do, the output's backward
raising FlashCoreError (flashcore/forward_only.py). Extension, keyword-only:
`fallback="sdpa"` (plain torch) for CPU tensors and non-Hopper GPUs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flashcore import append, check, check_serving, forward_only, fp8, fp8_modifiers, mla, scheduler, serving
from flashcore.api import attention
from flashcore.call import is_fp8
from flashcore.errors import UnsupportedArgument
from flashcore.scheduler import get_scheduler_metadata
from flashcore.split_combine import flash_attn_combine

if TYPE_CHECKING:
    import torch

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "flash_attn_combine",
           "get_scheduler_metadata", "UnsupportedArgument"]


def _dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window_size: Any, softcap: Any,
           attention_chunk: Any = 0, s_aux: Any = None, **kw: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A dense call: flashcore.attention (traceable by torch.compile), or flashcore.serving.dense with a window,
    chunks, softcap or sinks (the window read once here: FA3's callers may pass it as tensors)."""
    window, chunk = check.window(window_size), check.chunk(attention_chunk)
    if window != (-1, -1) or softcap != 0.0 or chunk != 0 or s_aux is not None:
        return serving.dense(q, k, v, window_size=window, softcap=softcap, attention_chunk=chunk, s_aux=s_aux, **kw)
    return attention(q, k, v, **kw)


@forward_only.entry
def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: float | None = None,
                    causal: bool = False, qv: Any = None, q_descale: Any = None, k_descale: Any = None,
                    v_descale: Any = None, window_size: Any = (-1, -1), attention_chunk: int = 0,
                    softcap: float = 0.0, num_splits: int = 1, pack_gqa: bool | None = None,
                    deterministic: bool = False, sm_margin: int = 0, return_attn_probs: bool = False, *,
                    s_aux: Any = None, fallback: str = "error") -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FA3's flash_attn_func: q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D]; causal bottom-right aligned. Returns out, or
    (out, softmax_lse [B, Hq, Sq] fp32) with return_attn_probs=True (FA3 returns the LSE there, not probabilities).
    pack_gqa is a speed hint FlashCore decides itself; deterministic fixes the split count. FP8: float8_e4m3fn q, k, v
    (head dim 64, 128 or 256) with FA3's float32 [B, Hkv] descales (None: 1) run on flashcore.attention_fp8; out is
    bf16. FP8 with a window, softcap, chunks, sinks, fallback="sdpa" or another head dim runs on the 16-bit path over
    the inputs dequantized to bf16 (flashcore/fp8_modifiers.py). s_aux (vLLM's FA3 fork, every entry point,
    keyword-only: FA3's positions are kept): attention sinks, [Hq] raw logits (float32, or a float tensor converted);
    each row's softmax gets one value-less key of score s_aux[h]: out = sum_j e^{s_j} v_j / (sum_j e^{s_j} +
    e^{s_aux[h]}), lse includes it; a row with no key gets out = 0, lse = s_aux[h] (flashcore.serving)."""
    descales = {"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale}
    if qv is not None or mla.latent(q, v):  # MLA (flashcore/mla.py)
        out, lse = mla.dense(q, k, v, qv, causal=causal, softmax_scale=softmax_scale, window_size=window_size,
                             softcap=softcap, attention_chunk=attention_chunk, s_aux=s_aux,
                             deterministic=deterministic, fallback=fallback, descales=descales)
        return (out, lse) if return_attn_probs else out
    if is_fp8(q) and fp8_modifiers.wanted(q, window_size, softcap, attention_chunk, fallback, s_aux):
        q, k, v = fp8_modifiers.dense(q, k, v, descales)  # the 16-bit path (flashcore/fp8_modifiers.py)
        descales = dict.fromkeys(descales)
    if is_fp8(q):
        out, lse = fp8.attention_fp8(q, k, v, causal=causal, softmax_scale=softmax_scale, deterministic=deterministic,
                                 num_splits=check.fa3_splits(num_splits), sm_margin=sm_margin, **descales)
        return (out, lse) if return_attn_probs else out
    check.no_descales(q, descales)
    out, lse = _dense(q, k, v, window_size, softcap, attention_chunk, s_aux, causal=causal,
                      softmax_scale=softmax_scale, deterministic=deterministic, num_splits=check.fa3_splits(num_splits),
                      sm_margin=sm_margin, fallback=fallback)
    return (out, lse) if return_attn_probs else out


@forward_only.entry
def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, seqused_q: Any = None,
                           seqused_k: torch.Tensor | None = None, softmax_scale: float | None = None,
                           causal: bool = False, qv: Any = None, q_descale: Any = None, k_descale: Any = None,
                           v_descale: Any = None, window_size: Any = (-1, -1), attention_chunk: int = 0,
                           softcap: float = 0.0, num_splits: int = 1, pack_gqa: bool | None = None,
                           deterministic: bool = False, sm_margin: int = 0, return_attn_probs: bool = False, *,
                           s_aux: Any = None, fallback: str = "error", debug_checks: bool | None = None,
                           ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FA3's flash_attn_varlen_func: q [total_q, Hq, D], k and v [total_k, Hkv, D] packed; sequence b is rows
    [cu_seqlens[b], cu_seqlens[b + 1]) (int32 [B + 1]); seqused_q [B] and seqused_k [B] (int32) limit it to its
    first seqused_q[b] queries and seqused_k[b] keys, which are then its lengths for causal and window masking
    (bottom-right aligned per sequence, as FA3). Returns out [total_q, Hq, D], or (out, softmax_lse [Hq, total_q])
    with return_attn_probs=True; the rows of out and softmax_lse past seqused_q[b] are not written (as in FA3:
    never read them). num_splits as flash_attn_func's: packed queries split the keys too.
    debug_checks (extension): check the offsets on the host (one device sync; see flashcore.serving)."""
    if qv is not None or mla.latent(q, v):  # MLA (flashcore/mla.py)
        out, lse = mla.varlen(q, k, v, qv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                              seqused_q=seqused_q, seqused_k=seqused_k, causal=causal, softmax_scale=softmax_scale,
                              window_size=window_size, softcap=softcap, attention_chunk=attention_chunk, s_aux=s_aux,
                              deterministic=deterministic, fallback=fallback,
                              descales={"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale})
        return (out, lse) if return_attn_probs else out
    out, lse = serving.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=seqused_q,
                              seqused_k=seqused_k,
                              causal=causal, softmax_scale=softmax_scale, window_size=window_size, softcap=softcap,
                              attention_chunk=attention_chunk, deterministic=deterministic, fallback=fallback,
                              debug_checks=debug_checks, num_splits=check.fa3_splits(num_splits), sm_margin=sm_margin,
                              s_aux=s_aux, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
    return (out, lse) if return_attn_probs else out


@forward_only.entry
def flash_attn_with_kvcache(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor | None = None,
    v: torch.Tensor | None = None, qv: Any = None, rotary_cos: Any = None, rotary_sin: Any = None,
    cache_seqlens: int | torch.Tensor | None = None, cache_batch_idx: torch.Tensor | None = None,
    cache_leftpad: Any = None, page_table: Any = None, cu_seqlens_q: Any = None, cu_seqlens_k_new: Any = None,
    max_seqlen_q: Any = None, rotary_seqlens: Any = None, q_descale: Any = None, k_descale: Any = None,
    v_descale: Any = None, softmax_scale: float | None = None, causal: bool = False, window_size: Any = (-1, -1),
    attention_chunk: int = 0, softcap: float = 0.0, rotary_interleaved: bool = True, scheduler_metadata: Any = None,
    num_splits: int = 0, pack_gqa: bool | None = None, sm_margin: int = 0, return_softmax_lse: bool = False, *,
    s_aux: Any = None, fallback: str = "error", debug_checks: bool | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """FA3's flash_attn_with_kvcache on a contiguous cache [B_cache, S_cache, Hkv, D] or a paged one. cache_seqlens:
    the tokens each sequence already holds, an int (all the same) or a [B] int32 tensor (per sequence);
    Packed queries (chunked prefill, speculative decoding): q [total_q, Hq, D] with cu_seqlens_q int32 [B + 1] and
    max_seqlen_q; sequence b's queries are rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) (FA3's); out is
    [total_q, Hq, D] and softmax_lse [Hq, total_q]; max_seqlen_q without cu_seqlens_q is ignored, as FA3 ignores
    it.
    cache_batch_idx [B] int32: the cache entry of sequence b (default b). page_table [B, max_pages] int32: the
    caches are [pages, page_size, Hkv, D] (any page_size from 1 to 65536) and sequence b's token j is row
    j % page_size of page page_table[b, j // page_size]; with cache_batch_idx the table is [B_cache, max_pages]
    and sequence b reads its row cache_batch_idx[b] (as FA3). k, v [B, Snew, Hkv, D] are written into the cache in place
    at each sequence's cache_seqlens first (FA3's append), then q [B, Sq, Hq, D] attends to each sequence's first
    cache_seqlens + Snew keys (causal: bottom-right aligned to them). window_size and softcap as flash_attn_func.
    cache_leftpad [B] int32: sequence b's tokens are positions [cache_leftpad[b], cache_seqlens[b]) of its cache
    entry or its pages: it attends to cache_seqlens[b] - cache_leftpad[b] keys (plus appended ones, written at
    cache_seqlens[b]), and causal, window and chunk masks align to that count (FA3's).
    attention_chunk C > 0 (every entry point, FA3's chunked local attention): query row i sees only the keys of
    the chunk [c, c + C) that holds its bottom-right-aligned position (c a multiple of C from the sequence's first
    key), within its causal and window bounds.
    k, v may also be packed [total_new, Hkv, D] with cu_seqlens_k_new int32 [B + 1]: sequence b appends rows
    [cu_seqlens_k_new[b], cu_seqlens_k_new[b + 1]) (cu_seqlens_k_new without k is ignored, as FA3 ignores it).
    rotary_cos, rotary_sin [seqlen_ro, rotary_dim / 2] (q's dtype; rotary_dim a multiple of 16, <= D; needs k and v):
    FA3's rotary embedding, interleaved (pairs 2i, 2i + 1) or not (pairs i, i + rotary_dim / 2); the appended key j of
    sequence b is rotated at position rotary_seqlens[b] + j (default cache_seqlens[b] + j), q's row i at that base + i
    when causal or local (a window FA3 keeps), else every row at the base; q itself is not changed (the attention reads
    a rotated copy); FP8 caches rotate on their bf16 copy (flashcore/fp8_cache.py). The append is one launch of the
    library's kernel (no host sync): a slot, length, page, offset or rotary position out of range writes nothing outside
    the caches (the sequence is skipped: its rotated q rows are NaN, its length -1) and flashcore.check_errors() raises
    naming the tensor.
    debug_checks (extension): check the lengths, slots and pages on the host and raise at once for a bad index
    value found by the append (device syncs; see flashcore.serving). rotary_seqlens without rotary_cos is ignored,
    as FA3 ignores it."""
    import torch

    scheduler.check_metadata(scheduler_metadata, q, k_cache, v_cache, cu_seqlens_q, page_table)
    window_size = check.window(window_size)  # before the append writes into the caches
    if qv is not None or mla.latent(q, v_cache):  # MLA (flashcore/mla.py)
        out, lse = mla.kvcache(q, k_cache, v_cache, qv, cache_seqlens, k=k, v=v, cache_batch_idx=cache_batch_idx,
                               page_table=page_table, cache_leftpad=cache_leftpad, cu_seqlens_q=cu_seqlens_q,
                               max_seqlen_q=max_seqlen_q if cu_seqlens_q is not None else None, causal=causal,
                               softmax_scale=softmax_scale, window_size=window_size, softcap=softcap,
                               attention_chunk=attention_chunk, s_aux=s_aux, fallback=fallback,
                               cu_seqlens_k_new=cu_seqlens_k_new, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                               rotary_seqlens=rotary_seqlens, rotary_interleaved=rotary_interleaved,
                               descales={"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale})
        return (out, lse) if return_softmax_lse else out
    per_sequence = (cache_seqlens, cache_batch_idx, page_table, cache_leftpad, cu_seqlens_q, rotary_cos, rotary_sin,
                    cu_seqlens_k_new if k is not None else None)
    # FP8 takes the serving path for one length too (its descales; the dense FP8 call would slice the cache).
    if is_fp8(q) or isinstance(cache_seqlens, torch.Tensor) or any(t is not None for t in per_sequence[1:]):
        out, lse = serving.kvcache(q, k_cache, v_cache, cache_seqlens, k=k, v=v, cache_batch_idx=cache_batch_idx,
                                   page_table=page_table, cache_leftpad=cache_leftpad, cu_seqlens_q=cu_seqlens_q,
                                   max_seqlen_q=max_seqlen_q if cu_seqlens_q is not None else None, causal=causal,
                                   softmax_scale=softmax_scale, window_size=window_size, softcap=softcap,
                                   attention_chunk=attention_chunk, num_splits=check.fa3_splits(num_splits),
                                   sm_margin=sm_margin, fallback=fallback, debug_checks=debug_checks,
                                   cu_seqlens_k_new=cu_seqlens_k_new, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                                   rotary_seqlens=rotary_seqlens, rotary_interleaved=rotary_interleaved,
                                   s_aux=s_aux, q_descale=q_descale, k_descale=k_descale, v_descale=v_descale)
        return (out, lse) if return_softmax_lse else out
    # one length for every sequence: the dense kernel on a slice of the cache
    check.no_descales(q, {"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale})
    check_serving.caches(k_cache, v_cache)
    length = check_serving.cache_length(cache_seqlens, k_cache.shape[1], appending=k is not None)
    end = append.at(k_cache, v_cache, k, v, length) if k is not None or v is not None else length
    out, lse = _dense(q, k_cache[:, :end], v_cache[:, :end], window_size, softcap, attention_chunk, s_aux,
                      causal=causal, softmax_scale=softmax_scale, num_splits=check.fa3_splits(num_splits),
                      sm_margin=sm_margin, fallback=fallback)
    return (out, lse) if return_softmax_lse else out
