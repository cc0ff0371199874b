"""An FP8 KV cache with what the FP8 kernels do not compile (a window, softcap, chunks, sinks, rotary, pages other
than head dim 128 with pages of a multiple of 16 keys, a left-padded paged cache, a head dim without an FP8 kernel,
or fallback="sdpa" where it acts): flash_attn_with_kvcache runs such a call on the 16-bit path over a bf16 copy of
the caches, as FA3's callers make these calls (its own kvcache tests do, with E4M3 caches).

Why the copy holds the raw E4M3 values, unscaled: every E4M3 value is exact in bf16, so converting the cache needs no
factor, and a page shared by sequences with different factors is no problem. The factors go where FA3's definition
puts them in the scores and the output: sequence b's scores are (q * q_descale[b, h]) . (k * k_descale[b, h]), so q
is multiplied by both factors (one rounding to bf16, as the dequantized path's), and out = P (v * v_descale[b, h]) =
(P v) * v_descale[b, h], so the 16-bit output is multiplied by v's factor (rows in no packed sequence left as they
are). The LSE, softcap, window, chunks and sinks then see FA3's scores.

An append (k, v: E4M3, appended as they are, or rotated) is written by the 16-bit path into the copy, whose every
index value the kernel checks on the device; then each element of the copy that the append changed is stored into
the caller's caches (rotated keys clamped to E4M3's +-448 and rounded, as FA3's saturating store), every other byte
as it was: no index value is ever used by torch to address memory. The store rewrites the caches' bytes in one pass
on the call's stream, so another stream must not write them during the call. This call's attention reads the
rotated new keys at bf16 precision; the cache keeps them in E4M3 for the next call.

The cost, stated in the README: a bf16 copy of both caches per call (twice the caches' bytes of memory, three passes
over them, more with an append), then the 16-bit kernel's time, not FP8's. A serving engine's cache pool that fills
the GPU has no room for its copy: such a call raises torch.OutOfMemoryError before anything is written. No host
sync, so a CUDA graph can capture it. out is bf16, as FA3's FP8 out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flashcore import check, fp8_modifiers, head_dims
from flashcore.call import is_fp8
from flashcore.errors import FlashCoreError

if TYPE_CHECKING:
    import torch

E4M3_MAX = 448.0  # the largest finite float8_e4m3fn value: FA3 stores with satfinite


def wanted(q: Any, k_cache: Any, *, page_table: Any, cache_leftpad: Any, window_size: Any, softcap: Any,
           attention_chunk: Any, fallback: Any, s_aux: Any, rotary_cos: Any, rotary_sin: Any) -> bool:
    """Whether an FP8 cache call asks for something only the 16-bit path runs (then it runs on a bf16 copy)."""
    if not is_fp8(q):
        return False
    if fp8_modifiers.wanted(q, window_size, softcap, attention_chunk, fallback, s_aux):
        return True
    if rotary_cos is not None or rotary_sin is not None:
        return True
    head_dim = q.shape[-1]
    if head_dim not in head_dims.FP8:
        return True
    if page_table is None:
        return False
    page_size = k_cache.shape[1] if getattr(k_cache, "dim", lambda: 0)() >= 3 else 0
    # the FP8 kernels' paged loads: TMA boxes of 16-key multiples at head dim 128, no left bounds
    return head_dim != 128 or page_size % 16 != 0 or cache_leftpad is not None


def _fp8(name: str, t: Any, device: torch.device) -> torch.Tensor:
    import torch

    if not isinstance(t, torch.Tensor) or t.dtype != torch.float8_e4m3fn:
        got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
        raise FlashCoreError(f"{name} is {got}: with a float8_e4m3fn q, the caches and appended keys are "
                             "float8_e4m3fn too (FA3's FP8 cache)")
    if t.device != device:
        raise FlashCoreError(f"{name} is on {t.device} but q is on {device}: all tensors must be on one device")
    return t


def _bf16(t: Any) -> Any:
    """A floating tensor as bf16 (E4M3 exactly); anything else as it is, for the 16-bit path's checks to name."""
    import torch

    return t.to(torch.bfloat16) if isinstance(t, torch.Tensor) and t.is_floating_point() else t


def _write_back(cache: torch.Tensor, work: torch.Tensor) -> None:
    """The elements of `work` (the cache's bf16 copy after the append) whose bits differ from the cache's own bf16
    values, stored into the E4M3 cache (clamped to +-448 and rounded, as FA3's saturating store: rotated keys can
    leave the range); every other byte is stored as it was, NaN payloads included. Indexed by no index value, so a
    bad slot or page id the append skipped changes nothing here either."""
    import torch

    changed = work.view(torch.int16) != cache.to(torch.bfloat16).view(torch.int16)
    new = work.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    cache.view(torch.uint8).copy_(torch.where(changed, new, cache.view(torch.uint8)))


def run(attend: Callable[..., tuple[torch.Tensor, torch.Tensor]], q: Any, k_cache: Any, v_cache: Any,
        cache_seqlens: Any, *, k: Any, v: Any, cu_seqlens_q: Any, rotary_cos: Any, rotary_sin: Any, out: Any,
        q_descale: Any, k_descale: Any, v_descale: Any, **rest: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The FP8 cache call on `attend` (flashcore.serving.kvcache, given by the caller: no import circle) over bf16
    copies (module docstring); rest: the call's other arguments, passed as they are."""
    import torch

    if not is_fp8(q):
        raise FlashCoreError(f"q is {getattr(q, 'dtype', type(q).__name__)}: this path takes float8_e4m3fn q")
    k_cache, v_cache = _fp8("k_cache", k_cache, q.device), _fp8("v_cache", v_cache, q.device)
    if (k is None) != (v is None):
        raise FlashCoreError("k and v are appended together: pass both or neither")
    if k is not None:
        k, v = _fp8("k", k, q.device), _fp8("v", v, q.device)
    if k_cache.dim() != 4 or v_cache.dim() != 4:
        raise FlashCoreError(f"k_cache and v_cache have shapes {tuple(k_cache.shape)}, {tuple(v_cache.shape)}: "
                             "expected [B_cache, S, Hkv, D] or paged [pages, page_size, Hkv, D]")
    heads_kv = k_cache.shape[2]
    packed = cu_seqlens_q is not None
    if packed:
        if q.dim() != 3:
            raise FlashCoreError(f"q has shape {tuple(q.shape)}: with cu_seqlens_q it is packed [total_q, Hq, D]")
        rows = fp8_modifiers.sequence_of_rows(cu_seqlens_q, q.shape[0], "cu_seqlens_q", q.device)
        batch = cu_seqlens_q.shape[0] - 1
    else:
        if q.dim() != 4:
            raise FlashCoreError(f"q has shape {tuple(q.shape)}: expected [B, Sq, Hq, D]")
        rows, batch = None, q.shape[0]
    heads_q = q.shape[-2]
    if heads_kv < 1 or heads_q % heads_kv != 0:
        raise FlashCoreError(f"q has {heads_q} heads and the caches {heads_kv}: a divisor of q's (GQA/MQA)")
    qd, kd, vd = (check.descale(name, t, batch, heads_kv, q.device) for name, t in
                  (("q_descale", q_descale), ("k_descale", k_descale), ("v_descale", v_descale)))
    q16 = q.to(torch.bfloat16)
    if qd is not None or kd is not None:
        factor = (torch.ones(batch, heads_kv, device=q.device) if qd is None else qd.float()) * \
            (1.0 if kd is None else kd.float())
        q16 = fp8_modifiers.times_factor(q, factor, heads_kv, rows).to(torch.bfloat16)
    k_work, v_work = k_cache.to(torch.bfloat16), v_cache.to(torch.bfloat16)
    out16, lse = attend(q16, k_work, v_work, cache_seqlens, k=_bf16(k), v=_bf16(v), cu_seqlens_q=cu_seqlens_q,
                        rotary_cos=_bf16(rotary_cos), rotary_sin=_bf16(rotary_sin), out=out, **rest)
    if k is not None:  # the append went into the copies: its values back into the caller's caches
        _write_back(k_cache, k_work)
        _write_back(v_cache, v_work)
    if vd is not None:
        scaled = fp8_modifiers.times_factor(out16, vd, heads_kv, rows).to(out16.dtype)
        if packed:  # rows in no sequence are not written, as without a factor
            index = torch.arange(q.shape[0], device=q.device)
            inside = ((index >= cu_seqlens_q[0]) & (index < cu_seqlens_q[-1]))[:, None, None]
            scaled = torch.where(inside, scaled, out16)
        out16.copy_(scaled)
    return out16, lse
