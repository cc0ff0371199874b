"""The judge of the random-shapes gate and tests (harness/gates/random_shapes.py, harness/support/random_calls.py):
one call's out and lse against the float32 reference and against a torch computation that rounds as the kernel does.
Its thresholds are the gate's params (gates/phases.yaml `random-shapes`).

Layout: rows first, as packed (varlen) calls return them: out, ref, pt [N, H, Dv]; lse, ref_lse, slack [H, N].
- nothing NaN (out and lse are poisoned before the call: a NaN is an element never written, or computed as NaN);
  no Inf in out;
- rows that see no key: out 0 and lse -inf;
- max |out - ref| over rows that see a key <= error_factor x max |pt - ref| + 2 x the output type's rounding of ref
  + error_slack (FA3's FP8 rule, used for every input type);
- |lse - ref_lse| <= lse_rel x (1 + |ref_lse|) + slack (FP8: fp8_score_share x the row's score magnitude, the
  FP8 tensor-core accumulation's error, which FA3's FP8 LSE shares to three digits:
  reports/evidence/random-shapes/fp8-lse-accumulation-64695f7.txt).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Judge:
    error_factor: float
    error_slack: float
    lse_rel: float
    fp8_lse_rel: float
    fp8_score_share: float  # FP8 LSE allowance per unit of a row's score magnitude (score_magnitude)


def judge(j: Judge, out: torch.Tensor, lse: torch.Tensor, ref: torch.Tensor, ref_lse: torch.Tensor, pt: torch.Tensor,
          fp8: bool = False, slack: torch.Tensor | None = None) -> str | None:
    """None when the call passes, else what failed. fp8: judge the LSE by fp8_lse_rel and `slack` [H, N]."""
    import torch

    seen_rows = torch.isfinite(ref_lse)  # [H, N]
    seen = seen_rows.t()[..., None].expand_as(ref)  # [N, H, Dv]
    if torch.isnan(out).any() or torch.isnan(lse).any():
        return "NaN left in out or lse (an element not written, or computed as NaN)"
    if not torch.isfinite(out).all():
        return "Inf in out"
    if (out[~seen] != 0).any() or (lse[~seen_rows] != -math.inf).any():
        return "a row that sees no key is not out = 0, lse = -inf"
    if not seen_rows.any():
        return None
    err = (out.float() - ref).abs()[seen].max().item()
    rounding = 2 * (ref - ref.to(out.dtype).float()).abs().max().item()
    base = (pt.to(out.dtype).float() - ref).abs()[seen].max().item()
    if err > j.error_factor * base + rounding + j.error_slack:
        return (f"max error {err:.3g} > {j.error_factor:g} x {base:.3g} (torch) + {rounding:.3g} (rounding) + "
                f"{j.error_slack:g}")
    tol = (j.fp8_lse_rel if fp8 else j.lse_rel) * (1 + ref_lse.abs()) + (0 if slack is None else slack)
    excess = ((lse - ref_lse).abs() - tol)[seen_rows]
    if excess.max().item() > 0:
        at = int(excess.argmax())
        return (f"lse error {(lse - ref_lse).abs()[seen_rows][at].item():.3g} > {tol[seen_rows][at].item():.3g} "
                f"(lse {ref_lse[seen_rows][at].item():.3g})")
    return None


def score_magnitude(q32: torch.Tensor, k32: torch.Tensor, scale: float) -> torch.Tensor:
    """q32 [B, Sq, Hq, D], k32 [B, Sk, Hkv, D] -> [B, Hq, Sq]: scale x max over keys of sum_d |q_d k_d|, what bounds
    a score's accumulation error."""
    group = q32.shape[2] // k32.shape[2]
    qa = q32.abs().transpose(1, 2)  # [B, Hq, Sq, D]
    ka = k32.abs().repeat_interleave(group, dim=2).permute(0, 2, 3, 1)  # [B, Hq, D, Sk]
    return (qa @ ka).amax(dim=-1) * scale


def out_rows(out: torch.Tensor) -> torch.Tensor:
    """A dense call's out (or reference) [B, Sq, H, Dv] in the judge's layout, [B * Sq, H, Dv]."""
    return out.flatten(0, 1)


def lse_rows(lse: torch.Tensor) -> torch.Tensor:
    """A dense call's lse (or a per-row bound) [B, H, Sq] in the judge's layout, [H, B * Sq]."""
    return lse.transpose(0, 1).flatten(1)
