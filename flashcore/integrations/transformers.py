"""FlashCore as an attention implementation of HF Transformers (5.x: AttentionInterface, AttentionMaskInterface).

    import flashcore.integrations.transformers as fct
    fct.register()                      # once per process
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="fcore", dtype=torch.bfloat16)

The name is "fcore", not "flashcore": Transformers 5.x treats every attn_implementation whose name contains "flash"
as a FlashAttention kernel to import (flash_attn / the kernels hub) and fails on any other such name.

Inference only (FlashCore is forward-only: run under torch.no_grad() / torch.inference_mode(); generate() does).
Masks come from the flash-attention mask function: no mask when no token is padded, else the 2-D padding mask,
which FlashCore refuses with a clear error until its varlen path exists (issue 15): a padded batch is never
silently computed as if it were unpadded. Sliding windows and softcap are refused the same way. The layout
conversion is free: HF's [B, H, S, D] is passed to FlashCore as the strided view [B, S, H, D].
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flashcore.api import attention
from flashcore.errors import FlashCoreError

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
    if kwargs.get("softcap") is not None:
        raise FlashCoreError("softcap: score soft-capping is not implemented yet (issue 15); use "
                             "attn_implementation='sdpa' or 'eager' for this model")
    if kwargs.get("sliding_window") is not None:
        raise FlashCoreError("sliding_window: sliding-window attention is not implemented yet (issue 15); use "
                             "attn_implementation='sdpa' or 'eager' for this model")
    if kwargs.get("output_attentions"):
        raise FlashCoreError("output_attentions: FlashCore never forms the attention matrix; use "
                             "attn_implementation='eager' to get the weights")
    if dropout and getattr(module, "training", False):
        raise FlashCoreError(f"dropout {dropout}: FlashCore is inference-only (model.eval())")
    if attention_mask is not None:
        raise FlashCoreError(
            f"attention_mask of shape {tuple(attention_mask.shape)}: the batch has padding (or a static cache "
            "longer than its tokens), and FlashCore cannot serve padded batches until its varlen path exists "
            "(issue 15). Pass unpadded batches (one sequence, or sequences of one length with a dynamic cache), or "
            "use attn_implementation='sdpa'.")
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    out, _ = attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), causal=causal,
                       softmax_scale=scaling, fallback=fallback, debug_fault=debug_fault)
    return out, None
