"""FA3's MLA operand qv (DeepSeek's multi-head latent attention, as SGLang's FA3 backend calls it): q [.., Hq, D]
holds the rotary part and qv [.., Hq, Dv] the latent part of each query, k [.., Hkv, D] and v [.., Hkv, Dv] the
keys' rotary and latent parts; every score is (q . k + qv . v) x softmax_scale, whose default is (D + Dv)^-0.5 (FA3's),
and out = softmax(scores) v. FA3 runs it at D 64 with Dv 256 or 512, and any D up to 64 with a wider Dv up to 512
without qv too (scores q . k x D^-0.5 by default): FlashCore's head-dim table has no kernel for those pairs, so they
take this path as well.

No FlashCore kernel has the second product yet, so such a call is computed by torch in float32 on the tensors' own
device (a torch_only Call: flashcore/forward.py; flashcore/reference.py adds the product): correct on every layout
the other calls take (dense, packed, KV caches with pages, appends, rotary, windows, softcap, chunks, sinks), at
torch's speed, with one RuntimeWarning per process saying so. The index values of packed and cached
calls are checked on the host first (a device sync): torch then indexes with them.

The host checks are the other calls' (flashcore/check.py, flashcore/check_serving.py), run with v's first D columns
standing in for v, since the head-dim table pairs D with its own v head dims, not the latent ones; v's and qv's
shapes are checked here.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from flashcore import fallback as sdpa_fallback
from flashcore import head_dims
from flashcore.call import Call, is_fp8
from flashcore.errors import FlashCoreError, UnsupportedArgument

if TYPE_CHECKING:
    import torch

_warned: set[tuple[str, str]] = set()


def stand_in(v: Any, q: Any) -> Any:
    """v's first D columns (q's head dim), the v the shared checks see; v itself where it has no more columns."""
    import torch

    if isinstance(v, torch.Tensor) and isinstance(q, torch.Tensor) and v.dim() >= 1 and q.dim() >= 1 \
            and v.shape[-1] > q.shape[-1]:
        return v[..., :q.shape[-1]]
    return v


def latent(q: Any, v: Any) -> bool:
    """v's head dim is one FA3 pairs with q's only in its MLA kernels: q's up to 64 and v's above it, up to 512, a
    multiple of 8, that the head-dim table does not pair with q's."""
    import torch

    if not (isinstance(q, torch.Tensor) and isinstance(v, torch.Tensor) and q.dim() >= 1 and v.dim() >= 1):
        return False
    d, dv = q.shape[-1], v.shape[-1]
    return d <= 64 and d < dv <= 512 and dv % 8 == 0 and dv not in head_dims.HEAD_DIM_V.get(d, (d,))


def refuse_fp8(q: Any, qv: Any, v: Any, descales: Mapping[str, Any]) -> None:
    """FP8 q or qv: refused before any other check, qv by name (FA3 has no FP8 qv either); an FP8 v wider than q
    without qv (no FP8 kernel of FA3 pairs them) named too. Then descales, which scale FP8 inputs only, raise (after
    the FP8 refusals: their check's message names the inputs' dtype)."""
    if is_fp8(qv) or (is_fp8(q) and qv is not None):
        raise UnsupportedArgument("fp8 qv: MLA's qv with FP8 inputs is not supported (FA3 refuses it too); pass "
                                  "bf16 or fp16 q, qv, k and v")
    if is_fp8(q):
        raise FlashCoreError(f"v's head dim is {v.shape[-1]} with q's {q.shape[-1]}: FP8 inputs take v's head dim "
                             "equal to q's (or a pair of the head-dim table, as 192 with 128)")
    from flashcore import check

    check.no_descales(q, descales)


def _same_rows(name: str, new: Any, k_new: Any, cache: Any) -> None:
    """An appended v: k's shape with the cache's head dim (the shared checks saw its first D columns only)."""
    import torch

    want = (*k_new.shape[:-1], cache.shape[-1])
    if not isinstance(new, torch.Tensor) or tuple(new.shape) != want:
        got = tuple(new.shape) if isinstance(new, torch.Tensor) else type(new).__name__
        raise FlashCoreError(f"{name} is {got}: the appended values have k's shape with v_cache's head dim, {want}")


def check_qv(qv: Any, q: torch.Tensor, v: Any) -> torch.Tensor:
    """qv: a tensor of q's dtype and device, q's shape with v's head dim (Dv >= D); v: the stand-in's tensor with
    all its columns, the stand-in's shape but for the head dim."""
    import torch

    if not isinstance(qv, torch.Tensor):
        raise FlashCoreError(f"qv must be a torch.Tensor or None, got {type(qv).__name__}")
    if not isinstance(v, torch.Tensor) or v.dim() != q.dim():
        raise FlashCoreError(f"v has {getattr(v, 'dim', lambda: '?')()} dims: with qv it has q's rank, {q.dim()}")
    if v.shape[-1] < q.shape[-1]:
        raise FlashCoreError(f"v's head dim is {v.shape[-1]} with q's {q.shape[-1]}: with qv, v holds the latent "
                             "part, at least q's head dim (FA3: 64 with 256 or 512)")
    if tuple(qv.shape) != (*q.shape[:-1], v.shape[-1]):
        raise FlashCoreError(f"qv has shape {tuple(qv.shape)}: expected q's shape with v's head dim, "
                             f"{(*q.shape[:-1], v.shape[-1])}")
    if qv.dtype != q.dtype or qv.device != q.device:
        raise FlashCoreError(f"qv is {qv.dtype} on {qv.device}: q is {q.dtype} on {q.device}")
    return qv


def with_qv(call: Call, v: torch.Tensor, qv: Any, softmax_scale: Any) -> Call:
    """A checked call (made with the stand-in v) with v's every column and qv (or none: a latent v alone), at FA3's
    default scale, (D + Dqv)^-0.5."""
    if qv is not None:
        qv = check_qv(qv, call.q, v)
    if tuple(v.shape[:-1]) != tuple(call.v.shape[:-1]):
        raise FlashCoreError(f"v has shape {tuple(v.shape)}: expected k's shape with its own head dim")
    extra = 0 if qv is None else v.shape[-1]
    scale = call.scale if softmax_scale is not None else (call.q.shape[-1] + extra) ** -0.5
    _warn_once(str(call.q.device), "qv (FA3's MLA operand)" if qv is not None else
               f"v's head dim {v.shape[-1]} with q's {call.q.shape[-1]} (FA3's MLA head dims)")
    return replace(call, v=v, qv=qv, scale=scale, torch_only=True)


def _warn_once(device: str, what: str) -> None:
    if (device, what) in _warned:
        return
    _warned.add((device, what))
    warnings.warn(f"flashcore: {what} on {device} is computed by torch in float32, not by FlashCore's kernel",
                  RuntimeWarning, stacklevel=sdpa_fallback.caller_level())


def dense(q: Any, k: Any, v: Any, qv: Any, *, causal: Any, softmax_scale: Any, window_size: Any, softcap: Any,
          attention_chunk: Any, s_aux: Any, deterministic: Any, fallback: Any,
          descales: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """flash_attn_func with qv: (out, lse)."""
    from flashcore import check

    refuse_fp8(q, qv, v, descales)
    from flashcore.forward import forward

    fallback = check.fallback_choice(fallback)
    call = check.dense(q, k, stand_in(v, q), causal=causal, softmax_scale=softmax_scale, deterministic=deterministic,
                       fallback=fallback, device_type=check.device_type(q, fallback))
    call = replace(call, window=check.window(window_size), softcap=check.softcap(softcap),
                   attention_chunk=check.chunk(attention_chunk), sinks=check.sinks(s_aux, call.q.shape[2],
                                                                                  call.q.device))
    return forward(with_qv(call, v, qv, softmax_scale))


def varlen(q: Any, k: Any, v: Any, qv: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: Any,
           max_seqlen_k: Any, *, seqused_q: Any, seqused_k: Any, causal: Any, softmax_scale: Any, window_size: Any,
           softcap: Any, attention_chunk: Any, s_aux: Any, deterministic: Any, fallback: Any,
           descales: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """flash_attn_varlen_func with qv: (out, lse), the offsets checked on the host."""
    from flashcore import check, check_serving

    refuse_fp8(q, qv, v, descales)
    from flashcore.forward import forward

    call = check_serving.varlen(q, k, stand_in(v, q), cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                seqused_q=seqused_q, seqused_k=seqused_k, causal=causal, softmax_scale=softmax_scale,
                                window_size=window_size, softcap=softcap, deterministic=deterministic,
                                fallback=fallback, out=None, lse=None)
    call = replace(call, attention_chunk=check.chunk(attention_chunk),
                   sinks=check.sinks(s_aux, call.q.shape[1], call.q.device))
    call = with_qv(call, v, qv, softmax_scale)
    check_serving.values(call)
    return forward(call)


def kvcache(q: Any, k_cache: Any, v_cache: Any, qv: Any, cache_seqlens: Any, *, k: Any, v: Any,
            cache_batch_idx: Any, page_table: Any, cache_leftpad: Any, cu_seqlens_q: Any, max_seqlen_q: Any,
            causal: Any, softmax_scale: Any, window_size: Any, softcap: Any, attention_chunk: Any, s_aux: Any,
            fallback: Any, cu_seqlens_k_new: Any, rotary_cos: Any, rotary_sin: Any, rotary_seqlens: Any,
            rotary_interleaved: Any, descales: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """flash_attn_with_kvcache with qv: the append (v's every column), then (out, lse), the index values checked
    on the host."""
    from flashcore import check, check_serving, serving

    refuse_fp8(q, qv, v_cache, descales)
    from flashcore.forward import forward

    packed_new = k is not None and cu_seqlens_k_new is not None
    if not packed_new and k is not None and v is not None:  # the shared checks see v's first D columns only
        _same_rows("v", v, k, v_cache)
    call = check_serving.kvcache(q, k_cache, stand_in(v_cache, q), cache_seqlens,
                                 k_new=None if packed_new else k, v_new=None if packed_new else stand_in(v, q),
                                 cache_batch_idx=cache_batch_idx, page_table=page_table, cache_leftpad=cache_leftpad,
                                 cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q, causal=causal,
                                 softmax_scale=softmax_scale, window_size=window_size, softcap=softcap,
                                 num_splits=None, sm_margin=0, fallback=fallback, out=None, lse=None)
    call = replace(call, attention_chunk=check.chunk(attention_chunk),
                   sinks=check.sinks(s_aux, call.q.shape[-2], call.q.device))
    call = with_qv(call, v_cache, qv, softmax_scale)
    if k is not None or v is not None or rotary_cos is not None or rotary_sin is not None:
        call = serving.appended(call, k, v, cache_seqlens, cu_seqlens_k_new if packed_new else None, rotary_cos,
                                rotary_sin, rotary_seqlens, rotary_interleaved, True)
    check_serving.values(call)
    return forward(call)
