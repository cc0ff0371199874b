"""`torch.ops.flashcore.attention`: flashcore.attention as a registered custom op with a fake (meta) implementation,
so torch.compile(fullgraph=True) traces a call without a graph break and torch.library.opcheck can check it.

    import flashcore.ops  # registers the op (importing flashcore alone does not import torch)
    out, lse = torch.ops.flashcore.attention(q, k, v, causal=True)

The op allocates its outputs (no `out=`/`lse=`: a custom op's results may not alias its inputs) and takes the
arguments of flashcore.attention that change the result or the launch; tile knobs come from the tuned table.
"""

from __future__ import annotations

import torch

from flashcore import dense
from flashcore.call import new_out


@torch.library.custom_op("flashcore::attention", mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              softmax_scale: float | None = None, deterministic: bool = False, fallback: str = "error",
              num_splits: int | None = None, sm_margin: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """flashcore.attention(q, k, v, ...) -> (out [B, Sq, Hq, Dv], lse [B, Hq, Sq] float32)."""
    return dense.run(q, k, v, causal=causal, softmax_scale=softmax_scale, deterministic=deterministic,
                     fallback=fallback, num_splits=num_splits, sm_margin=sm_margin)


@attention.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, softmax_scale: float | None = None,
      deterministic: bool = False, fallback: str = "error", num_splits: int | None = None,
      sm_margin: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    # The shapes every call returns; the host checks run when the real op does.
    batch, seqlen_q, heads_q, _ = q.shape
    out = new_out(q, v)
    lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)
    return out, lse
