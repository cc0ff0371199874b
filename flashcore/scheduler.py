"""FA3's `get_scheduler_metadata`, and what `flash_attn_with_kvcache` does with the metadata it is given.

FA3 plans its split-KV and tile order on the device from cache_seqlens (a prepare kernel); get_scheduler_metadata runs
that step ahead of the call so that a captured CUDA graph replays it. FlashCore's plan is a function of the shapes and
arguments alone: made on the host, cached per call signature (flashcore/fastpath.py), it never reads device data, so a
call is safe to capture with or without metadata and its result is the same either way.

get_scheduler_metadata therefore returns a record, not a plan: an int32 tensor on cache_seqlens' device holding the
shapes and arguments it was made for, with the same record kept on the tensor object. A call given that tensor checks
the record against its own shapes on the host (no device read) and raises on a mismatch: metadata made
for another layer's shapes is a caller's bug that FA3 would not report. A copy (vLLM copies the metadata into a
persistent buffer before graph capture) has only the device values, which a call cannot read without a sync: it is
accepted as it is, as is FA3's own metadata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flashcore import check
from flashcore.errors import FlashCoreError

if TYPE_CHECKING:
    import torch

_ATTR = "_flashcore_schedule"
_DTYPES = ("torch.float16", "torch.bfloat16", "torch.float8_e4m3fn")
FIELDS = ("batch", "max_seqlen_q", "heads_q", "heads_kv", "head_dim", "head_dim_v", "dtype", "causal", "window_left",
          "window_right", "softcap", "page_size", "num_splits", "sm_margin")


def get_scheduler_metadata(batch_size: int, max_seqlen_q: int, max_seqlen_k: int, num_heads_q: int, num_heads_kv: int,
                           headdim: int, cache_seqlens: torch.Tensor, qkv_dtype: Any = None,
                           headdim_v: int | None = None, cu_seqlens_q: Any = None, cu_seqlens_k_new: Any = None,
                           cache_leftpad: Any = None, page_size: int | None = None, max_seqlen_k_new: int = 0,
                           causal: bool = False, window_size: Any = (-1, -1), attention_chunk: int = 0,
                           has_softcap: bool = False, num_splits: int = 0, pack_gqa: bool | None = None,
                           sm_margin: int = 0) -> torch.Tensor:
    """FA3's signature. Returns int32 [len(FIELDS)] on cache_seqlens' device: the record a later
    flash_attn_with_kvcache(scheduler_metadata=...) checks (module docstring). max_seqlen_k, cu_seqlens_q,
    cu_seqlens_k_new, cache_leftpad, max_seqlen_k_new and pack_gqa shape FA3's device plan only; FlashCore's plan
    does not read them."""
    import torch

    if not isinstance(cache_seqlens, torch.Tensor):
        raise FlashCoreError(f"cache_seqlens is {type(cache_seqlens).__name__}: expected an int32 tensor [batch]")
    check.chunk(attention_chunk)  # FA3's device plan reads it; FlashCore's plan does not, but a bad one is refused
    dtype = str(qkv_dtype if qkv_dtype is not None else torch.bfloat16)
    if dtype not in _DTYPES:
        raise FlashCoreError(f"qkv_dtype is {dtype}: expected one of {', '.join(_DTYPES)}")
    left, right = check.window(window_size)
    values = (batch_size, max_seqlen_q, num_heads_q, num_heads_kv, headdim,
              headdim if headdim_v is None else headdim_v, _DTYPES.index(dtype), int(bool(causal)), left, right,
              int(bool(has_softcap)), page_size or 0, num_splits, sm_margin)
    for name, value in zip(FIELDS, values, strict=True):
        if isinstance(value, bool) or not isinstance(value, int):
            raise FlashCoreError(f"{name} is {value!r}: expected an int")
    metadata = torch.tensor(values, dtype=torch.int32, device=cache_seqlens.device)
    setattr(metadata, _ATTR, dict(zip(FIELDS, values, strict=True)))
    return metadata


def check_metadata(metadata: Any, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   cu_seqlens_q: Any, page_table: Any) -> None:
    """Raise when `metadata` carries a record (get_scheduler_metadata's own tensor) made for other shapes or
    arguments than this call's; a tensor without one (a copy, FA3's) is accepted; anything else is refused."""
    import torch

    if metadata is None:
        return
    if not isinstance(metadata, torch.Tensor):
        raise FlashCoreError(f"scheduler_metadata is {type(metadata).__name__}: expected the tensor "
                             "get_scheduler_metadata returns")
    record = getattr(metadata, _ATTR, None)
    if record is None:
        return
    packed = cu_seqlens_q is not None
    # the shapes only: causal, window, softcap, num_splits and sm_margin tune FA3's device plan, and FlashCore's
    # result does not depend on the metadata, so a difference there is not an error
    mine = {"batch": cu_seqlens_q.shape[0] - 1 if packed else q.shape[0], "heads_q": q.shape[-2],
            "heads_kv": k_cache.shape[-2], "head_dim": q.shape[-1], "head_dim_v": v_cache.shape[-1],
            "dtype": _DTYPES.index(str(q.dtype)) if str(q.dtype) in _DTYPES else -1,
            "page_size": k_cache.shape[1] if page_table is not None else 0}
    wrong = [f"{name} {record[name]} (this call: {value})" for name, value in mine.items() if record[name] != value]
    if not packed and q.shape[1] > record["max_seqlen_q"]:
        wrong.append(f"max_seqlen_q {record['max_seqlen_q']} (this call: {q.shape[1]} query rows)")
    if wrong:
        raise FlashCoreError("scheduler_metadata was made for other shapes or arguments than this call's: "
                             + ", ".join(wrong) + " (call get_scheduler_metadata with this call's)")
