"""FlashCore as an attention implementation of HF Transformers (5.x: AttentionInterface, AttentionMaskInterface).

    import flashcore.integrations.transformers as fct
    fct.register()                      # once per process
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="fcore", dtype=torch.bfloat16)

The name is "fcore", not "flashcore": Transformers 5.x treats every attn_implementation whose name contains "flash"
as a FlashAttention kernel to import (flash_attn / the kernels hub) and fails on any other such name.

Inference only (FlashCore is forward-only: run under torch.no_grad() / torch.inference_mode(); generate() does).
Masks come from the flash-attention mask function: no mask when no token is padded, else the 2-D padding mask, with
which the batch goes through the varlen kernel (`padded`: its tokens packed, padded query rows 0). A layer's
`sliding_window` (Mistral, Qwen2/3's sliding layers, Gemma 2/3) becomes FlashCore's window (sliding_window - 1, 0)
on the causal path: Transformers' mask lets query position i see key j when i - sliding_window < j <= i, so the left
window is sliding_window - 1 keys, as its own flash path passes it; `softcap` (Gemma 2's attn_logit_softcapping) goes
through as is. Attention sinks (GPT-OSS passes its per-head `sinks` parameter as `s_aux`) go through as FlashCore's
s_aux: raw logits, as GPT-OSS's eager attention concatenates them beside the scaled scores (flashcore.serving). The
layout conversion is free: HF's [B, H, S, D] is passed to FlashCore as the strided view [B, S, H, D].
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flashcore import check
from flashcore.api import attention
from flashcore.errors import FlashCoreError, UnsupportedArgument
from flashcore.serving import dense, varlen

if TYPE_CHECKING:
    import torch

NAME = "fcore"  # no "flash" in it: see the module docstring


def register(name: str = NAME, fallback: str = "error", debug_fault: int = 0) -> None:
    """Register `name` with Transformers' attention and mask interfaces. fallback="sdpa": off Hopper (CPU
    tensors included) compute with torch SDPA, the contract flashcore.attention documents. debug_fault: test-only,
    a planted kernel fault in every call (the integrations gate's self-test)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    def forward(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
        return attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal,
                                 fallback=fallback, debug_fault=debug_fault, **kwargs)

    AttentionInterface.register(name, forward)
    AttentionMaskInterface.register(name, flash_attention_mask)


def attention_forward(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      is_causal: bool | None = None, *, fallback: str = "error", debug_fault: int = 0,
                      **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Transformers' attention-function contract: query [B, Hq, Sq, D], key and value [B, Hkv, Sk, D] -> output
    [B, Sq, Hq, D] and no attention weights. Causal masks are bottom-right aligned: queries are the last Sq
    positions of the Sk keys, which is what a decoder with a KV cache (prefill, chunked prefill, decode) needs."""
    sinks = kwargs.get("s_aux")  # GPT-OSS's name; `sinks` too, never dropped silently
    sinks = kwargs.get("sinks") if sinks is None else sinks
    if kwargs.get("output_attentions"):
        raise UnsupportedArgument("output_attentions: FlashCore never forms the attention matrix; use "
                                  "attn_implementation='eager' to get the weights")
    if dropout and getattr(module, "training", False):
        raise UnsupportedArgument(f"dropout {dropout}: FlashCore is inference-only (model.eval())")
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    cap = kwargs.get("softcap")
    win, cap = window(kwargs.get("sliding_window"), causal), check.softcap(0.0 if cap is None else cap)
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    if attention_mask is not None:
        return padded(q, k, v, attention_mask, causal, scaling, fallback, win, cap, sinks), None
    if win != (-1, -1) or cap or sinks is not None:
        out, _ = dense(q, k, v, causal=causal, softmax_scale=scaling, window_size=win, softcap=cap, fallback=fallback,
                       s_aux=sinks)
    else:
        out, _ = attention(q, k, v, causal=causal, softmax_scale=scaling, fallback=fallback, debug_fault=debug_fault)
    return out, None


def window(sliding_window: Any, causal: bool) -> tuple[int, int]:
    """FlashCore's (left, right) window for Transformers' `sliding_window` (None: no window). Its masks let query
    position i see keys i - sliding_window < j <= i: sliding_window - 1 keys to the left on the causal path; a
    non-causal layer (an encoder's) sees as many to the right too, as Transformers' flash path passes it."""
    if sliding_window is None:
        return (-1, -1)
    if isinstance(sliding_window, bool) or not isinstance(sliding_window, int) or sliding_window < 1:
        raise FlashCoreError(f"sliding_window {sliding_window!r}: expected a positive int (None: no window)")
    return (sliding_window - 1, 0 if causal else sliding_window - 1)


def padded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, causal: bool,
           scaling: float | None, fallback: str, window_size: tuple[int, int] = (-1, -1),
           softcap: float = 0.0, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """A padded batch through the varlen kernel: q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D], mask [B, Sk] (1: a
    token, 0: padding; the queries are the last Sq positions). The tokens of each sequence are packed (holes
    dropped, order kept), so a query sees exactly the tokens at or before it (causal) or all of them; padded query
    rows come out 0. Costs a device sync (the packed lengths), as unpadding does in Transformers' own flash path."""
    import torch
    import torch.nn.functional as F

    batch, seqlen_q, seqlen_k = q.shape[0], q.shape[1], k.shape[1]
    if mask.dim() != 2 or tuple(mask.shape) != (batch, seqlen_k):
        raise FlashCoreError(f"attention_mask has shape {tuple(mask.shape)}: FlashCore takes the 2-D padding mask "
                             f"[B, Sk] = [{batch}, {seqlen_k}] of the flash-attention mask function")
    keep_k = mask.to(device=q.device).bool()
    keep_q = keep_k[:, seqlen_k - seqlen_q:]
    len_k, len_q = keep_k.sum(1, dtype=torch.int32), keep_q.sum(1, dtype=torch.int32)
    cu_k = F.pad(len_k.cumsum(0, dtype=torch.int32), (1, 0))
    cu_q = F.pad(len_q.cumsum(0, dtype=torch.int32), (1, 0))
    packed, _ = varlen(q[keep_q], k[keep_k], v[keep_k], cu_q, cu_k, int(len_q.max()), int(len_k.max()),
                       causal=causal, softmax_scale=scaling, window_size=window_size, softcap=softcap,
                       fallback=fallback, s_aux=sinks)
    out = q.new_zeros(q.shape)
    out[keep_q] = packed
    return out
