"""The eager path of a dense call, shared by flashcore.attention, its torch op (flashcore/ops.py) and
flashcore.serving.dense: a repeat call launches at once (flashcore/fastpath.py), any other is checked into a Call
(flashcore/check.py) and computed by flashcore.forward.forward."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flashcore import check, fastpath, launch
from flashcore.forward import forward

if TYPE_CHECKING:
    import torch

    from flashcore.tuning import TileConfig


def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
        softmax_scale: float | None = None, out: torch.Tensor | None = None, lse: torch.Tensor | None = None,
        deterministic: bool = False, fallback: str = "error", num_splits: int | None = None, sm_margin: int = 0,
        tile: TileConfig | None = None, debug_fault: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """flashcore.attention's contract, eagerly."""
    key = None
    if out is None and lse is None and tile is None and debug_fault == 0:  # a repeat call: flashcore/fastpath.py
        key = fastpath.signature(q, k, v, causal, softmax_scale, deterministic, fallback, num_splits, sm_margin)
        entry = fastpath.lookup(key)
        if entry is not None and fastpath.aligned(q, k, v):
            return launch.again(entry, q, k, v, entry.lse_shape)
    call = check.dense(q, k, v, causal=causal, softmax_scale=softmax_scale, out=out, lse=lse,
                       deterministic=deterministic, fallback=fallback, debug_fault=debug_fault,
                       num_splits=num_splits, sm_margin=sm_margin, tile=tile,
                       device_type=check.device_type(q, fallback))
    return forward(call, key)
