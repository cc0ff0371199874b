"""FlashCore's contract in plain torch, float32: the ground truth of the serving tests and the fallback of the
serving features (torch SDPA has no soft-capping and no per-sequence lengths).

One sequence: q [Sq, Hq, D], k and v [Sk, Hkv, D]. Query row i sees key j iff
    j <= i + d + right   (causal: right = 0; window right bound; else no bound)
    j >= i + d - left    (window left bound; -1: none),        d = Sk - Sq (bottom-right alignment);
    c <= j < c + C       (chunks of C > 0 keys: c = the start of the chunk of i + d, FA3's attention_chunk);
scores are softmax_scale * q.k, soft-capped to softcap * tanh(score / softcap) when softcap > 0; GQA: query head h
reads K/V head h // (Hq // Hkv). A row that sees no key gets out = 0 and lse = -inf. Works on any torch device.
Attention sinks (sinks [Hq] float32, raw logits): one more key of score sinks[h] and no value in every row's
softmax, never masked: out = sum_j e^{s_j} v_j / (sum_j e^{s_j} + e^{sink}), lse = log(sum_j e^{s_j} + e^{sink});
a row that sees no key gets out = 0 and lse = sinks[h].
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

CHUNK_BYTES = 256 << 20  # float32 scores per chunk of query rows
P_OFFSET = 256.0  # the FP8 kernel's P scale (kernel/softmax.h kOffset = 8)


def dequantize(x: torch.Tensor, descale: torch.Tensor | None, heads_kv: int) -> torch.Tensor:
    """FP8 x [B, S, H, D] as float32 times its descale factor [B, Hkv] (head h takes factor h // (H // Hkv))."""
    x32 = x.float()
    if descale is None:
        return x32
    per_head = descale.float().repeat_interleave(x.shape[2] // heads_kv, dim=1)  # [B, H]
    return x32 * per_head[:, None, :, None]


def visible(seqlen_q: int, seqlen_k: int, rows: slice, causal: bool, window: tuple[int, int],
            device: torch.device, chunk: int = 0) -> torch.Tensor:
    """[rows, Sk] bool: True where key j is visible to query row i."""
    import torch

    i = torch.arange(seqlen_q, device=device)[rows, None]
    j = torch.arange(seqlen_k, device=device)[None, :]
    diag = i + (seqlen_k - seqlen_q)
    left, right = window
    if causal:
        right = 0
    keep = torch.ones(i.shape[0], seqlen_k, dtype=torch.bool, device=device)
    if right >= 0:
        keep &= j <= diag + right
    if left >= 0:
        keep &= j >= diag - left
    if chunk > 0:
        start = diag - diag % chunk  # torch's % follows the divisor's sign: a floor division, as FA3's reference
        keep &= (j >= start) & (j < start + chunk)
    return keep


def sink_lse(sinks: torch.Tensor, shape: tuple[int, ...] | torch.Size, packed: bool) -> torch.Tensor:
    """The LSE of rows that see no key, shaped as an lse tensor: [Hq, total_q] (packed) or [B, Hq, Sq]."""
    per_head = sinks.float()[:, None] if packed else sinks.float()[None, :, None]
    return per_head.expand(shape)


def sequence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: float,
             window: tuple[int, int] = (-1, -1), softcap: float = 0.0, chunk: int = 0,
             p_dtype: torch.dtype | None = None,
             sinks: torch.Tensor | None = None,
             qv: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence: out [Sq, Hq, D] float32 and lse [Hq, Sq] float32. p_dtype: P is rounded to it before P V, as
    the FP8 kernel does (2^8 exp(s - row max), rounded, over the unrounded sum): the "same rounding" reference of
    FA3's FP8 tests. qv [Sq, Hq, Dv] (FA3's MLA operand): each score is (q . k + qv . v) x scale."""
    import torch

    sq, hq, d = q.shape
    sk, hkv = k.shape[0], k.shape[1]
    out = torch.zeros(sq, hq, v.shape[2], dtype=torch.float32, device=q.device)
    lse = torch.full((hq, sq), -math.inf, dtype=torch.float32, device=q.device)
    if sinks is not None:
        lse.copy_(sink_lse(sinks, lse.shape, True))
    if sq == 0 or sk == 0:
        return out, lse
    group = hq // hkv
    # Per K/V head, its group's query rows side by side: no copy of K or V per query head (an MLA decode's 16-128
    # query heads share one K/V head); head h reads K/V head h // group, as repeat_interleave would give it.
    k32 = k.float().permute(1, 2, 0)  # [Hkv, D, Sk]
    v32 = v.float().permute(1, 0, 2)  # [Hkv, Sk, Dv]

    def by_kv_head(x: torch.Tensor) -> torch.Tensor:  # [n, Hq, E] -> [Hkv, group * n, E]
        return x.float().permute(1, 0, 2).reshape(hkv, group * x.shape[0], x.shape[2])

    step = max(1, CHUNK_BYTES // max(1, 4 * hq * sk))
    for start in range(0, sq, step):
        rows = slice(start, min(start + step, sq))
        n = rows.stop - rows.start
        s = torch.matmul(by_kv_head(q[rows]), k32)  # [Hkv, group * n, Sk]
        if qv is not None:
            s = s + torch.matmul(by_kv_head(qv[rows]), v32.transpose(1, 2))
        s = s.view(hq, n, sk) * scale
        if softcap > 0:
            s = torch.tanh(s / softcap) * softcap
        s = s.masked_fill(~visible(sq, sk, rows, causal, window, q.device, chunk), -math.inf)
        row_lse = torch.logsumexp(s, dim=-1)  # [Hq, n]
        if sinks is not None:  # the sink's e^{sink} joins the denominator: P over the keys sums to less than 1
            row_lse = torch.logaddexp(row_lse, sinks.float()[:, None])
        seen = torch.isfinite(row_lse)
        if p_dtype is None:
            p = torch.exp(s - torch.where(seen, row_lse, 0.0)[..., None])
        else:
            row_max = torch.where(seen, s.amax(dim=-1), 0.0)[..., None]
            p_un = torch.exp(s - row_max) * P_OFFSET
            p = p_un.to(p_dtype).float() / p_un.sum(dim=-1, keepdim=True).clamp_min(1e-30)
        out[rows] = torch.matmul(p.reshape(hkv, group * n, sk), v32).view(hq, n, -1).permute(1, 0, 2)
        lse[:, rows] = row_lse
    return out, lse


def dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: float,
          window: tuple[int, int] = (-1, -1), softcap: float = 0.0, chunk: int = 0,
          p_dtype: torch.dtype | None = None,
          sinks: torch.Tensor | None = None,
          qv: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D]: out [B, Sq, Hq, D] float32, lse [B, Hq, Sq] float32."""
    import torch

    pairs = [sequence(q[b], k[b], v[b], causal=causal, scale=scale, window=window, softcap=softcap, chunk=chunk,
                      p_dtype=p_dtype, sinks=sinks, qv=None if qv is None else qv[b])
             for b in range(q.shape[0])]
    if not pairs:
        return (torch.zeros(q.shape, dtype=torch.float32, device=q.device),
                torch.zeros(0, q.shape[2], q.shape[1], dtype=torch.float32, device=q.device))
    return torch.stack([o for o, _ in pairs]), torch.stack([s for _, s in pairs])


def varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: list[int], cu_k: list[int],
           used_k: list[int] | None, *, causal: bool, scale: float, window: tuple[int, int] = (-1, -1),
           softcap: float = 0.0, chunk: int = 0, used_q: list[int] | None = None,
           sinks: torch.Tensor | None = None, qv: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed q [total_q, Hq, D], k and v [total_k, Hkv, D] with host lists of offsets (and of used keys and
    queries: a sequence's lengths are then its used counts): out [total_q, Hq, D] float32 (rows outside every
    sequence's used queries 0), lse [Hq, total_q] float32 (-inf there)."""
    import torch

    out = torch.zeros(q.shape[0], q.shape[1], v.shape[2], dtype=torch.float32, device=q.device)
    lse = torch.full((q.shape[1], q.shape[0]), -math.inf, dtype=torch.float32, device=q.device)
    for b, qs in enumerate(query_rows(cu_q, used_q)):
        k_end = cu_k[b + 1] if used_k is None else cu_k[b] + used_k[b]
        ks = slice(cu_k[b], k_end)
        o, s = sequence(q[qs], k[ks], v[ks], causal=causal, scale=scale, window=window, softcap=softcap, chunk=chunk,
                        sinks=sinks, qv=None if qv is None else qv[qs])
        out[qs], lse[:, qs] = o, s
    return out, lse


def query_rows(cu_q: list[int], used_q: list[int] | None) -> list[slice]:
    """Each packed sequence's rows of q that it uses: [cu_q[b], cu_q[b + 1]), or its first used_q[b] of them."""
    return [slice(cu_q[b], cu_q[b + 1] if used_q is None else cu_q[b] + used_q[b]) for b in range(len(cu_q) - 1)]


def cached_keys(k_cache: torch.Tensor, v_cache: torch.Tensor, b: int, n: int, slots: torch.Tensor | None,
                table: torch.Tensor | None, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence b's keys and values [n - start, Hkv, D]: positions [start, n) (start > 0: a left-padded cache) of a
    cache [B_cache, S, Hkv, D] (its slot slots[b], default b) or of a paged cache [pages, page_size, Hkv, D] (its
    row of the page table: row slots[b], default b)."""
    entry = int(slots[b]) if slots is not None else b
    if table is None:
        return k_cache[entry, start:n], v_cache[entry, start:n]
    page_size = k_cache.shape[1]
    pages = table[entry, :-(-n // page_size)].long()
    return k_cache[pages].flatten(0, 1)[start:n], v_cache[pages].flatten(0, 1)[start:n]
