"""Inputs and reference of the FP8 (E4M3) workloads (harness/schema.py dtype e4m3): what the correctness,
determinism and benchmark code runs on them, through serving.Batch (the FP8 call is flashcore.attention_fp8, FA3's
is flash_attn_func with the same descales).

Inputs: standard-normal values rounded to E4M3, and descale factors [B, Hkv] drawn from [0.25, 1.75), so the
values attended are x * descale (FA3's arguments). The accuracy rule is FA3's FP8 test: against the float32
attention of the dequantized inputs, FlashCore's error is judged against the error of a torch implementation that
rounds P to E4M3 as the kernel does (flashcore/reference.py p_dtype; 2^8 exp(s - m), rounded) and its output to
bf16 (gates/phases.yaml correctness fp8_error_factor and fp8_error_slack).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from harness.schema import Workload
from harness.support import reference
from harness.support.batch import Batch

if TYPE_CHECKING:
    import torch

BASELINE = "torch, P rounded to E4M3"  # the name the reports give the baseline of these workloads
DESCALE_RANGE = (0.25, 1.75)


def make(wl: Workload, seed: int, device: str) -> Batch:
    """Fresh E4M3 q, k, v [B, S, H, D] and descales (q, k, v), each float32 [B, Hkv]."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    e4m3 = torch.float8_e4m3fn

    def values(s: int, h: int) -> torch.Tensor:
        return torch.randn(wl.batch, s, h, wl.head_dim, generator=g, device=device).to(e4m3)

    lo, hi = DESCALE_RANGE
    q, k, v = values(wl.seqlen_q, wl.heads_q), values(wl.seqlen_k, wl.heads_kv), values(wl.seqlen_k, wl.heads_kv)
    descales = tuple(torch.rand(wl.batch, wl.heads_kv, generator=g, device=device) * (hi - lo) + lo
                     for _ in range(3))
    return Batch(wl, q, k, v, descales=descales)  # type: ignore[arg-type]


def compare(batch: Batch, out: torch.Tensor, lse: torch.Tensor) -> reference.ErrorStats:
    """Errors of ours and of the E4M3-P torch baseline (rounded to bf16) against the float32 reference of the
    dequantized inputs, batch entry by batch entry, and of our LSE."""
    import torch

    from flashcore import reference as truth

    wl = batch.wl
    assert batch.descales is not None
    q, k, v = (truth.dequantize(x, s, wl.heads_kv) for x, s in zip((batch.q, batch.k, batch.v), batch.descales,
                                                                     strict=True))
    scale = 1.0 / math.sqrt(wl.head_dim)
    acc = reference.Errors()
    with reference.true_fp32():
        for b in range(wl.batch):
            ref, lse_ref = truth.sequence(q[b], k[b], v[b], causal=wl.causal, scale=scale)
            base, _ = truth.sequence(q[b], k[b], v[b], causal=wl.causal, scale=scale, p_dtype=torch.float8_e4m3fn)
            acc.add(out[b], base.to(torch.bfloat16), ref, lse[b], lse_ref, torch.isfinite(lse_ref))
    return acc.stats()
