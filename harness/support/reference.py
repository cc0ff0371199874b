"""References for the correctness gate: an fp32 attention computed in chunks (heads, or query rows of one head
when a head does not fit: S = 128K), and torch SDPA.

Layouts follow kernel/flashcore.h: q [B,Sq,Hq,D], k and v [B,Sk,Hkv,D], out [B,Sq,Hq,D], lse [B,Hq,Sq].
Causal masking is bottom-right aligned: query i sees key j iff j <= i + (Sk - Sq). A query row that sees no
key has output 0 and LSE -inf. GQA: query head h reads K/V head h // (Hq / Hkv).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def empty_rows(seqlen_q: int, seqlen_k: int, causal: bool) -> int:
    """Number of leading query rows that see no key (only causal with Sq > Sk has any)."""
    return max(0, seqlen_q - seqlen_k) if causal else 0


def visible_mask(seqlen_q: int, seqlen_k: int, device: torch.device | str) -> torch.Tensor:
    """[Sq, Sk] bool, True where key j is visible to query i under the bottom-right causal rule."""
    return visible_rows(0, seqlen_q, seqlen_q, seqlen_k, device)


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """torch SDPA on the same 16-bit inputs, returned as [B,Sq,Hq,D]; rows with no visible key are zeroed
    (SDPA gives NaN there)."""
    import torch
    import torch.nn.functional as F

    sq, hq, sk, hkv = q.shape[1], q.shape[2], k.shape[1], k.shape[2]
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if hq != hkv:
        kt, vt = kt.repeat_interleave(hq // hkv, dim=1), vt.repeat_interleave(hq // hkv, dim=1)
    if causal and sq == sk:
        out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
    elif causal:
        out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=visible_mask(sq, sk, q.device))
    else:
        out = F.scaled_dot_product_attention(qt, kt, vt)
    out = out.transpose(1, 2)
    n_empty = empty_rows(sq, sk, causal)
    if n_empty:
        out = out.clone()
        out[:, :n_empty] = torch.zeros((), dtype=out.dtype, device=out.device)
    return out


@dataclass(frozen=True)
class ErrorStats:
    """Max absolute errors against the fp32 reference, over the whole output."""

    err_ours: float  # max |ours - ref32|
    err_sdpa: float  # max |sdpa - ref32|
    diff_sdpa: float  # max |ours - sdpa|
    lse_err: float  # max |lse_ours - lse_ref| over rows that see a key (both finite)
    lse_bad_rows: int  # rows whose LSE is not finite while a key is visible, or not -inf while none is


def _amax(x: torch.Tensor) -> float:
    """Max of |x|, NaN if any element is NaN (a NaN must never look like a small error)."""
    if x.numel() == 0:
        return 0.0
    return float(x.abs().float().max())


def chunking(seqlen_q: int, seqlen_k: int, head_dim: int, budget_bytes: int) -> tuple[int, int]:
    """(heads, query rows) per chunk of the fp32 reference so its working set stays within the budget: whole
    (batch, head) rows while one fits (S [Sq,Sk] fp32, its mask, q / ref / difference rows, k and v), else one head
    in blocks of query rows (S = 128K: one head's S alone is 64 GB)."""
    per_q_row = 4 * (seqlen_k + 3 * head_dim) + seqlen_k  # S row fp32, q / ref / diff rows, mask row (bool)
    per_head_kv = 4 * 2 * seqlen_k * head_dim
    per_head = seqlen_q * per_q_row + per_head_kv
    if per_head <= budget_bytes:
        return budget_bytes // per_head, seqlen_q
    return 1, max(1, (budget_bytes - per_head_kv) // per_q_row)


def visible_rows(first: int, end: int, seqlen_q: int, seqlen_k: int, device: torch.device | str) -> torch.Tensor:
    """Rows first..end-1 of visible_mask, without building the whole [Sq, Sk] mask."""
    import torch

    i = torch.arange(first, end, device=device)[:, None]
    j = torch.arange(seqlen_k, device=device)[None, :]
    return j <= i + (seqlen_k - seqlen_q)


@contextlib.contextmanager
def true_fp32() -> Iterator[None]:
    """The fp32 references' matmuls without TF32 (torch may allow it globally), restored afterwards."""
    import torch

    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def compare(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, ours: torch.Tensor,
            ours_lse: torch.Tensor, sdpa_out: torch.Tensor, budget_bytes: int) -> ErrorStats:
    """Compute the fp32 reference chunk by chunk (chunking()) and reduce the errors of ours and SDPA."""
    import torch

    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    q_bh, k_bh, v_bh = q.permute(0, 2, 1, 3), k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3)
    ours_bh, sdpa_bh = ours.permute(0, 2, 1, 3), sdpa_out.permute(0, 2, 1, 3)
    acc = Errors()
    heads, rows = chunking(sq, sk, d, budget_bytes)
    with true_fp32():
        for start in range(0, b * hq, heads):
            idx = torch.arange(start, min(start + heads, b * hq), device=q.device)
            bi, hi = idx // hq, idx % hq
            ki = hi // (hq // hkv)
            k32, v32 = k_bh[bi, ki].float(), v_bh[bi, ki].float()  # [n, Sk, D]
            for r0 in range(0, sq, rows):
                r1 = min(sq, r0 + rows)
                rs = slice(r0, r1)
                ref, lse_ref = _attention32(q_bh[bi, hi, rs].float(), k32, v32, d,
                                            visible_rows(r0, r1, sq, sk, q.device) if causal else None)
                row_visible = torch.arange(r0, r1, device=q.device) >= empty_rows(sq, sk, causal)
                ref[:, ~row_visible] = 0.0
                acc.add(ours_bh[bi, hi, rs], sdpa_bh[bi, hi, rs], ref, ours_lse[bi, hi, rs], lse_ref, row_visible)
                del ref, lse_ref
    return acc.stats()


def _attention32(q32: torch.Tensor, k32: torch.Tensor, v32: torch.Tensor, d: int, mask: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 attention of q32 [n, r, D] over k32, v32 [n, Sk, D]: (out [n, r, D], LSE [n, r], -inf on empty rows)."""
    import torch

    s = torch.bmm(q32, k32.transpose(1, 2)).mul_(1.0 / math.sqrt(d))  # [n, r, Sk]
    if mask is not None:
        s.masked_fill_(~mask, float("-inf"))
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = s.sub_(m).exp_()
    denom = p.sum(dim=-1, keepdim=True)
    ref = torch.bmm(p, v32) / denom.clamp_min(torch.finfo(torch.float32).tiny)
    return ref, (m + denom.log()).squeeze(-1)


@dataclass
class Errors:
    """Running maxima of compare() over chunks (NaN sticks); `sdpa` is whichever baseline the caller judges by."""

    err_ours: float = 0.0
    err_sdpa: float = 0.0
    diff_sdpa: float = 0.0
    lse_err: float = 0.0
    lse_bad: int = 0

    def add(self, o: torch.Tensor, so: torch.Tensor, ref: torch.Tensor, lse: torch.Tensor, lse_ref: torch.Tensor,
            row_visible: torch.Tensor) -> None:
        import torch

        self.err_ours = nanmax(self.err_ours, _amax(o.float() - ref))
        self.err_sdpa = nanmax(self.err_sdpa, _amax(so.float() - ref))
        self.diff_sdpa = nanmax(self.diff_sdpa, _amax(o.float() - so.float()))
        bad = (row_visible & ~torch.isfinite(lse)) | (~row_visible & (lse != float("-inf")))
        self.lse_bad += int(bad.sum())
        good = row_visible & torch.isfinite(lse)
        self.lse_err = nanmax(self.lse_err, _amax((lse - lse_ref)[good]))

    def stats(self) -> ErrorStats:
        return ErrorStats(self.err_ours, self.err_sdpa, self.diff_sdpa, self.lse_err, self.lse_bad)


def nanmax(a: float, b: float) -> float:
    """max() that keeps NaN (Python's max would drop it depending on argument order)."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)
