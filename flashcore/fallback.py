"""torch SDPA fallback for GPUs that are not SM 9.0 and for CPU tensors (`flashcore.attention(..., fallback="sdpa")`).

Same contract as the kernel: q [B,Sq,Hq,D], k and v [B,Sk,Hkv,D], out like q, lse [B,Hq,Sq] float32; causal is
bottom-right aligned (row i sees key j iff j <= i + Sk - Sq); GQA: query head h reads K/V head h // (Hq // Hkv);
a row that sees no key gets out = 0 and lse = -inf. SDPA computes out; lse (which SDPA does not return) is a
float32 log-sum-exp over query-row chunks. With deterministic=True SDPA runs its math backend (matmuls and a
softmax, no atomics). Works on any torch device, so it is tested on the CPU.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from types import FrameType
from typing import TYPE_CHECKING

from flashcore import reference

if TYPE_CHECKING:
    import torch

LSE_CHUNK_BYTES = 256 << 20  # float32 scores per chunk of query rows (all batches and heads at once)
_warned: set[str] = set()


def warn_once(device: str) -> bool:
    """One RuntimeWarning per device and process; True when this call warned."""
    if device in _warned:
        return False
    _warned.add(device)
    warnings.warn(f"flashcore: {device} is not an SM 9.0 GPU; fallback='sdpa' computes attention with torch SDPA, "
                  "not FlashCore's kernel", RuntimeWarning, stacklevel=caller_level())
    return True


def caller_level() -> int:
    """warnings.warn's stacklevel of the first frame outside the flashcore package and torch's autograd Function
    (the FA3 names' grad wrapper runs them inside one: flashcore/forward_only.py): the user's call, however many of
    those frames lie between it and here."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and _inside(os.path.abspath(frame.f_code.co_filename), package):
        frame, level = frame.f_back, level + 1
    return level


def _inside(path: str, package: str) -> bool:
    return path.startswith(package + os.sep) or path.endswith(os.sep + os.path.join("torch", "autograd", "function.py"))


def visible(seqlen_q: int, seqlen_k: int, rows: slice, device: torch.device) -> torch.Tensor:
    """[rows, Sk] bool: True where key j is visible to query i (bottom-right causal): flashcore/reference.py's rule."""
    return reference.visible(seqlen_q, seqlen_k, rows, True, (-1, -1), device)


def log_sum_exp(q: torch.Tensor, k: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    """[B,Hq,Sq] float32 log-sum-exp of scale * q k^T over the visible keys (-inf where none is)."""
    import torch

    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    group = hq // hkv
    k32 = k.permute(0, 2, 3, 1).float()  # [B, Hkv, D, Sk]
    lse = torch.empty(b, hq, sq, dtype=torch.float32, device=q.device)
    step = max(1, LSE_CHUNK_BYTES // max(1, 4 * b * hq * sk))
    for start in range(0, sq, step):
        rows = slice(start, min(start + step, sq))
        n = rows.stop - rows.start
        q32 = q[:, rows].float().permute(0, 2, 1, 3).reshape(b, hkv, group * n, d)  # heads of one group together
        s = torch.matmul(q32, k32).mul_(scale).view(b, hq, n, sk)
        if causal:
            s.masked_fill_(~visible(sq, sk, rows, q.device), float("-inf"))
        lse[:, :, rows] = torch.logsumexp(s, dim=-1)
    return lse


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
              causal: bool, scale: float, deterministic: bool) -> None:
    """Write FlashCore's result for non-empty, validated inputs into `out` and `lse`."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sq, hq, sk, hkv = q.shape[1], q.shape[2], k.shape[1], k.shape[2]
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if hq != hkv:
        kt, vt = kt.repeat_interleave(hq // hkv, dim=1), vt.repeat_interleave(hq // hkv, dim=1)
    mask = visible(sq, sk, slice(None), q.device) if causal and sq != sk else None
    with sdpa_kernel([SDPBackend.MATH]) if deterministic else contextlib.nullcontext():
        o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, is_causal=causal and sq == sk, scale=scale)
    o = o.transpose(1, 2)
    lse.copy_(log_sum_exp(q, k, causal, scale))
    if causal and sq > sk:  # rows without a visible key: SDPA gives NaN there, the contract says 0
        o[:, : sq - sk] = 0
    out.copy_(o)
