"""FLOP and byte counts of one attention forward, as the ROADMAP anchors count them (pure).

FLOPs: two GEMMs (Q·Kᵀ and P·V) of 2·Sq·Sk·D each per head: 4·B·Hq·Sq·Sk·D. Causal with Sq = Sk is
counted as half (FlashAttention's benchmark convention, which the anchors use), not the exact
S·(S+1)/2 visible pairs. Causal with Sq != Sk (bottom-right aligned) counts the visible pairs exactly.
Decode (memory-bound) is judged by the K and V bytes read: 2·B·Sk·Hkv·D·bytes per element.
"""

from __future__ import annotations

from harness.schema import Workload

ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "e4m3": 1}


def visible_pairs(seqlen_q: int, seqlen_k: int) -> int:
    """(query, key) pairs under the bottom-right causal mask: row i sees keys j <= i + Sk - Sq."""
    offset = seqlen_k - seqlen_q
    first_row = max(0, -offset)  # rows above it see no key
    rows = max(0, seqlen_q - first_row)
    # row i sees i + offset + 1 keys: an arithmetic series from first_row + offset + 1 up to Sk (the last row)
    return rows * (first_row + offset + 1 + seqlen_k) // 2 if rows else 0


def attention_flops(batch: int, heads_q: int, seqlen_q: int, seqlen_k: int, head_dim: int, causal: bool) -> float:
    """Forward FLOPs: 4·B·H·Sq·Sk·D, halved for causal when Sq == Sk."""
    if causal and seqlen_q == seqlen_k:
        return 4.0 * batch * heads_q * seqlen_q * seqlen_k * head_dim / 2
    if causal:
        return 4.0 * batch * heads_q * visible_pairs(seqlen_q, seqlen_k) * head_dim
    return 4.0 * batch * heads_q * seqlen_q * seqlen_k * head_dim


def kv_bytes(batch: int, heads_kv: int, seqlen_k: int, head_dim: int, dtype: str) -> int:
    """Bytes of K and V that one forward must read at least once."""
    return 2 * batch * seqlen_k * heads_kv * head_dim * ELEMENT_BYTES[dtype]


def workload_flops(wl: Workload) -> float:
    """attention_flops of the workload; a serving layout's sequences each with their own lengths (a window's
    masked pairs are counted like any other: FLOPs of the unwindowed call), P V at v's head dim."""
    if wl.dense and not wl.head_dim_v:
        return attention_flops(wl.batch, wl.heads_q, wl.seqlen_q, wl.seqlen_k, wl.head_dim, wl.causal)
    per_dim = sum(attention_flops(1, wl.heads_q, sq, sk, 1, wl.causal) for sq, sk in wl.sequences)
    return per_dim * (wl.head_dim + wl.dim_v) / 2


def workload_kv_bytes(wl: Workload) -> int:
    """K and V bytes: every sequence's keys (a cache's used rows, not its capacity)."""
    if wl.dense and not wl.head_dim_v:
        return kv_bytes(wl.batch, wl.heads_kv, wl.seqlen_k, wl.head_dim, wl.dtype)
    keys = sum(sk for _, sk in wl.sequences)
    return keys * wl.heads_kv * (wl.head_dim + wl.dim_v) * ELEMENT_BYTES[wl.dtype]


def tflops(flops: float, time_ms: float) -> float:
    """Throughput in TFLOP/s (10^12 FLOP per second)."""
    return flops / (time_ms * 1e-3) / 1e12


def tbps(nbytes: float, time_ms: float) -> float:
    """Bandwidth in TB/s (10^12 bytes per second), as the decode anchors are given."""
    return nbytes / (time_ms * 1e-3) / 1e12
