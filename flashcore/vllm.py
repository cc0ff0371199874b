"""vLLM's FlashAttention names (its vllm_flash_attn package, which vLLM's FLASH_ATTN backend imports), served by
FlashCore: `from flashcore.vllm import flash_attn_varlen_func, get_scheduler_metadata` in place of
`from vllm.vllm_flash_attn import ...`. Its signature differs from FA3's own flash_attn_varlen_func (flashcore's
top-level one keeps FA3's): max_seqlen_q comes before cu_seqlens_q, cu_seqlens_k is optional, and a paged KV cache
comes as block_table with seqused_k, the way vLLM calls it on every step:

    flash_attn_varlen_func(q=q, k=key_cache, v=value_cache, out=out, cu_seqlens_q=cu_q, max_seqlen_q=max_q,
                           seqused_k=seq_lens, max_seqlen_k=max_k, softmax_scale=scale, causal=True,
                           window_size=window, block_table=block_table, softcap=softcap,
                           scheduler_metadata=metadata, fa_version=3, q_descale=..., k_descale=..., v_descale=...,
                           num_splits=0, s_aux=sinks)

With block_table: q packed [total_q, Hq, D] (cu_seqlens_q), k and v the caches [blocks, block_size, Hkv, D]; sequence
b attends to its first seqused_k[b] keys, read through its row of block_table, causal bottom-right aligned to them
(flashcore.serving.kvcache with page_table = block_table, cache_seqlens = seqused_k). Without it: packed keys with
cu_seqlens_k (flashcore.serving.varlen). q_v is FA3's qv (flashcore/mla.py). out, when given, is written in place
and returned. What FlashCore does not compute is refused by name (UnsupportedArgument): dropout, ALiBi slopes (FA3
has neither), context parallelism (cp_world_size > 1). fa_version 2 and 3 are both served by FlashCore's kernel;
deterministic is, as in FA3, a backward-pass option (FlashCore's forward is deterministic at a fixed split count).
An FP8 pool with what the FP8 kernels lack (a window, softcap or sinks: GPT-OSS's and Gemma's layers) runs on a bf16
copy of the pool (flashcore/fp8_cache.py): a pool that fills the GPU has no room for it (torch.OutOfMemoryError).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flashcore import check, forward_only, launch, mla, scheduler, serving
from flashcore.errors import FlashCoreError

if TYPE_CHECKING:
    import torch

__all__ = ["flash_attn_varlen_func", "get_scheduler_metadata", "is_fa_version_supported",
           "fa_version_unsupported_reason"]

VERSIONS = (2, 3)  # the vllm_flash_attn versions whose calls FlashCore answers (their forward contract is one)


def fa_version_unsupported_reason(fa_version: int, device: Any = None) -> str | None:
    """None where FlashCore runs `fa_version`'s calls on `device` (an SM 9.0 GPU), else why not."""
    import torch

    if fa_version not in VERSIONS:
        return f"FlashCore answers vllm_flash_attn's FA{' and FA'.join(map(str, VERSIONS))} calls, not FA{fa_version}"
    if not torch.cuda.is_available():
        return "no CUDA GPU: FlashCore's kernel runs on SM 9.0 GPUs (H100, H200)"
    where = device if isinstance(device, torch.device) else torch.device("cuda", device)
    capability, name = launch.device_info(launch.device_index(where))
    if capability != (9, 0):
        return f"{name} is SM {capability[0]}.{capability[1]}: FlashCore's kernel runs on SM 9.0 GPUs (H100, H200)"
    return None


def is_fa_version_supported(fa_version: int, device: Any = None) -> bool:
    return fa_version_unsupported_reason(fa_version, device) is None


def get_scheduler_metadata(batch_size: int, max_seqlen_q: int, max_seqlen_k: int, num_heads_q: int,
                           num_heads_kv: int, headdim: int, cache_seqlens: torch.Tensor, qkv_dtype: Any = None,
                           headdim_v: int | None = None, cu_seqlens_q: Any = None, cu_seqlens_k_new: Any = None,
                           cache_leftpad: Any = None, page_size: int | None = None, max_seqlen_k_new: int = 0,
                           causal: bool = False, window_size: Any = (-1, -1), has_softcap: bool = False,
                           num_splits: int = 0, pack_gqa: bool | None = None, sm_margin: int = 0) -> torch.Tensor:
    """vllm_flash_attn's get_scheduler_metadata (its positional order: no attention_chunk), FlashCore's record of the
    call's shapes (flashcore.get_scheduler_metadata)."""
    return scheduler.get_scheduler_metadata(
        batch_size, max_seqlen_q, max_seqlen_k, num_heads_q, num_heads_kv, headdim, cache_seqlens, qkv_dtype=qkv_dtype,
        headdim_v=headdim_v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k_new=cu_seqlens_k_new, cache_leftpad=cache_leftpad,
        page_size=page_size, max_seqlen_k_new=max_seqlen_k_new, causal=causal, window_size=window_size,
        has_softcap=has_softcap, num_splits=num_splits, pack_gqa=pack_gqa, sm_margin=sm_margin)


def _window(window_size: Any) -> Any:
    return (-1, -1) if window_size is None else window_size


@forward_only.entry
def flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, max_seqlen_q: int,
                           cu_seqlens_q: torch.Tensor, max_seqlen_k: int, cu_seqlens_k: Any = None,
                           seqused_k: Any = None, q_v: Any = None, dropout_p: float = 0.0,
                           softmax_scale: float | None = None, causal: bool = False, window_size: Any = None,
                           softcap: float = 0.0, alibi_slopes: Any = None, deterministic: bool = False,
                           return_attn_probs: bool = False, block_table: Any = None, return_softmax_lse: bool = False,
                           out: torch.Tensor | None = None, scheduler_metadata: Any = None, q_descale: Any = None,
                           k_descale: Any = None, v_descale: Any = None, num_splits: int = 0, fa_version: int = 3,
                           s_aux: Any = None, cp_world_size: int = 1, cp_rank: int = 0, cp_tot_seqused_k: Any = None,
                           *, fallback: str = "error", debug_checks: bool | None = None,
                           ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """vllm_flash_attn's flash_attn_varlen_func (module docstring): out [total_q, Hq, Dv], or (out, softmax_lse
    [Hq, total_q]) with return_softmax_lse. Extension, keyword-only: fallback, debug_checks (flashcore.serving)."""
    check.refuse({"dropout_p": dropout_p != 0.0, "alibi_slopes": alibi_slopes is not None,
                  "cp_world_size": cp_world_size != 1})
    if fa_version not in VERSIONS:
        raise FlashCoreError(f"fa_version is {fa_version!r}: FlashCore answers vllm_flash_attn's versions {VERSIONS}")
    if (cu_seqlens_k is None) == (seqused_k is None):
        raise FlashCoreError("pass one of cu_seqlens_k (packed keys) and seqused_k (a paged cache's lengths, with "
                             "block_table), as vllm_flash_attn requires")
    if block_table is not None and seqused_k is None:
        raise FlashCoreError("block_table needs seqused_k: each sequence's keys in its cache")
    if seqused_k is not None and block_table is None:
        raise FlashCoreError("seqused_k without block_table: FlashCore takes packed keys with cu_seqlens_k, or a "
                             "paged cache with block_table and seqused_k")
    window, splits = _window(window_size), check.fa3_splits(num_splits)
    descales = {"q_descale": q_descale, "k_descale": k_descale, "v_descale": v_descale}
    if block_table is not None:
        scheduler.check_metadata(scheduler_metadata, q, k, v, cu_seqlens_q, block_table)
        if q_v is not None or mla.latent(q, v):
            result = mla.kvcache(q, k, v, q_v, seqused_k, k=None, v=None, cache_batch_idx=None,
                                 page_table=block_table, cache_leftpad=None, cu_seqlens_q=cu_seqlens_q,
                                 max_seqlen_q=max_seqlen_q, causal=causal, softmax_scale=softmax_scale,
                                 window_size=window, softcap=softcap, attention_chunk=0, s_aux=s_aux,
                                 fallback=fallback, cu_seqlens_k_new=None, rotary_cos=None, rotary_sin=None,
                                 rotary_seqlens=None, rotary_interleaved=True, descales=descales)
            return _into(out, result, cu_seqlens_q, return_softmax_lse)
        o, lse = serving.kvcache(q, k, v, seqused_k, page_table=block_table, cu_seqlens_q=cu_seqlens_q,
                                 max_seqlen_q=max_seqlen_q, causal=causal, softmax_scale=softmax_scale,
                                 window_size=window, softcap=softcap, num_splits=splits, fallback=fallback,
                                 debug_checks=debug_checks, out=out, s_aux=s_aux, **descales)
        return (o, lse) if return_softmax_lse else o
    if q_v is not None or mla.latent(q, v):
        result = mla.varlen(q, k, v, q_v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                            seqused_k=None, causal=causal, softmax_scale=softmax_scale, window_size=window,
                            softcap=softcap, attention_chunk=0, s_aux=s_aux, deterministic=False, fallback=fallback,
                            descales=descales)
        return _into(out, result, cu_seqlens_q, return_softmax_lse)
    o, lse = serving.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal,
                            softmax_scale=softmax_scale, window_size=window, softcap=softcap, fallback=fallback,
                            debug_checks=debug_checks, out=out, num_splits=splits, s_aux=s_aux, **descales)
    return (o, lse) if return_softmax_lse else o


def _into(out: torch.Tensor | None, result: tuple[torch.Tensor, torch.Tensor], cu_seqlens_q: torch.Tensor,
          with_lse: bool) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The torch path's result copied into the caller's out when one was given: the rows of its sequences only (as
    the kernel path leaves the others; that path has read the offsets on the host already)."""
    o, lse = result
    if out is not None:
        if out.shape != o.shape or out.dtype != o.dtype or out.device != o.device:
            raise FlashCoreError(f"out is {out.dtype} {tuple(out.shape)} on {out.device}: expected {o.dtype} "
                                 f"{tuple(o.shape)} on {o.device}")
        rows = slice(int(cu_seqlens_q[0]), int(cu_seqlens_q[-1]))
        out[rows] = o[rows]
        o = out
    return (o, lse) if with_lse else o
