"""The one-consumer-warpgroup decode point (kernel/hopper_config.h HeadDimTraits::decode_point, BLOCK_M 64) on the
H100 against the float32 reference (flashcore/reference.py): the calls whose every tile holds at most 64 query rows
(kernel/tile_choice.h use_one_wg_point) run it, and every serving feature they may carry stays right there: ragged
cache lengths (1 and 0 included), GQA 4:1 and 8:1 and MHA, hdim 64, 128 and the padded 96 and 40, paged caches of
16 and 64 keys (TMA boxes) and of 1 key (the gathered pages), split-KV (auto and 3), packed queries of 1..16 rows,
a window and soft-capping (which run the short default point), sinks, appends. Fresh random inputs per case; the
outputs are poisoned (NaN) first and every checked row must be finite."""

from __future__ import annotations

import math

import pytest
import torch

import flashcore
from flashcore import reference, serving
from tests.test_paged_gpu import paged
from tests.test_serving_gpu import ATOL, RTOL, close, rand
from tests.test_serving_index_gpu import poisoned

pytestmark = pytest.mark.gpu
DECODE_POINT = {64: "n128-s4-w1-pp0-re0-r56", 128: "n128-s3-w1-pp0-re0-r56"}  # per kernel head dim
KERNEL = {40: 64, 64: 64, 96: 128, 128: 128}


@pytest.fixture(autouse=True)
def _defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default choice is under test: no tuned table's block_n or point."""
    monkeypatch.setenv("FLASHCORE_TUNE", "0")


def decode_outputs(batch: int, hq: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """out [B, 1, Hq, D] and lse [B, Hq, 1], NaN."""
    return poisoned(batch, 1, hq, d, dtype=torch.bfloat16), poisoned(batch, hq, 1, dtype=torch.float32)


@pytest.mark.parametrize("sq,hq,hkv,d,one_wg", [
    (1, 32, 8, 128, True), (1, 32, 4, 128, True), (1, 16, 16, 128, True), (1, 8, 2, 64, True),
    (1, 32, 8, 96, True), (1, 16, 4, 40, True), (16, 16, 4, 128, True), (64, 4, 4, 128, True),
    (16, 16, 2, 128, False), (65, 4, 4, 128, False), (2048, 8, 2, 128, False), (16, 16, 2, 64, False),
])  # fmt: skip
def test_the_plan_takes_the_one_warpgroup_point_for_tiles_of_64_rows(sq: int, hq: int, hkv: int, d: int,
                                                                     one_wg: bool) -> None:
    q, k, v = rand(2, sq, hq, d), rand(2, 3000, hkv, d), rand(2, 3000, hkv, d)
    point = flashcore.plan(q, k, v).point
    assert (point == DECODE_POINT[KERNEL[d]]) == one_wg, point
    assert point in {p.name for p in flashcore.compiled_points(KERNEL[d], defaults_only=True)}


@pytest.mark.parametrize("hq,hkv", [(32, 8), (32, 4), (8, 8)], ids=["gqa4", "gqa8", "mha"])
@pytest.mark.parametrize("d", [64, 128, 96, 40])
@pytest.mark.parametrize("splits", [None, 1, 3])
def test_decode_with_ragged_cache_lengths(hq: int, hkv: int, d: int, splits: int | None) -> None:
    lengths = [1, 8191, 0, 1000, 129, 4097, 2]
    k_cache, v_cache = rand(len(lengths), 8192, hkv, d), rand(len(lengths), 8192, hkv, d)
    q = rand(len(lengths), 1, hq, d)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out, lse = decode_outputs(len(lengths), hq, d)
    serving.kvcache(q, k_cache, v_cache, seqlens, num_splits=splits, out=out, lse=lse, debug_checks=True)
    for b, n in enumerate(lengths):
        ref, ref_lse = reference.sequence(q[b], k_cache[b, :n], v_cache[b, :n], causal=False, scale=1 / math.sqrt(d))
        close(out[b], ref, lse[b], ref_lse)


@pytest.mark.parametrize("page", [16, 64, 1])
@pytest.mark.parametrize("d,hq,hkv", [(128, 32, 8), (64, 16, 4), (128, 8, 8)])
@pytest.mark.parametrize("splits", [None, 3])
def test_paged_decode(page: int, d: int, hq: int, hkv: int, splits: int | None) -> None:
    paged_decode_matches([1, 3000, 129, 0, 700], page, hq, hkv, d, causal=False, splits=splits, debug_checks=False)


def paged_decode_matches(lengths: list[int], page: int, hq: int, hkv: int, d: int, *, causal: bool,
                         splits: int | None, debug_checks: bool) -> None:
    """One query row per sequence over a paged cache of these lengths: every row against the float32 reference."""
    k, v, table = paged(lengths, page, hkv, d, d)
    q = rand(len(lengths), 1, hq, d)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out, lse = decode_outputs(len(lengths), hq, d)
    serving.kvcache(q, k, v, seqlens, page_table=table, causal=causal, num_splits=splits, out=out, lse=lse,
                    debug_checks=debug_checks)
    for b, n in enumerate(lengths):
        kb, vb = reference.cached_keys(k, v, b, n, None, table)
        ref, ref_lse = reference.sequence(q[b], kb, vb, causal=causal, scale=1 / math.sqrt(d))
        close(out[b], ref, lse[b], ref_lse)


@pytest.mark.parametrize("max_q", [1, 4, 16])
@pytest.mark.parametrize("causal", [False, True])
def test_packed_queries_of_up_to_16_rows(max_q: int, causal: bool) -> None:
    """Packed queries (speculative decoding, chunked prefill's last steps) of 1..max_q rows, GQA 4:1: at most 64 rows
    a tile, so the decode point."""
    hq, hkv, d = 16, 4, 128
    rows = [max_q, 1, max(1, max_q // 2), max_q]
    lengths = [max_q + 5, 1 + 2000, 300, 3 * max_q]
    k_cache, v_cache = rand(len(rows), 2100, hkv, d), rand(len(rows), 2100, hkv, d)
    q = rand(sum(rows), hq, d)
    cu = torch.tensor([0, *torch.tensor(rows).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out, lse = serving.kvcache(q, k_cache, v_cache, seqlens, cu_seqlens_q=cu, max_seqlen_q=max_q, causal=causal,
                               debug_checks=True)
    start = 0
    for b, (m, n) in enumerate(zip(rows, lengths, strict=True)):
        ref, ref_lse = reference.sequence(q[start:start + m], k_cache[b, :n], v_cache[b, :n], causal=causal,
                                          scale=1 / math.sqrt(d))
        close(out[start:start + m], ref, lse[:, start:start + m], ref_lse)
        start += m


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("feature", ["window", "softcap", "sinks"])
def test_decode_with_a_window_softcap_or_sinks(d: int, feature: str) -> None:
    lengths = [1, 3000, 200, 1500]
    hq, hkv = 32, 8
    k_cache, v_cache = rand(len(lengths), 3000, hkv, d), rand(len(lengths), 3000, hkv, d)
    q = rand(len(lengths), 1, hq, d) * (4 if feature == "softcap" else 1)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    window, cap = ((256, 0) if feature == "window" else (-1, -1)), (20.0 if feature == "softcap" else 0.0)
    sinks = torch.randn(hq, device="cuda") * 3 if feature == "sinks" else None
    out, lse = decode_outputs(len(lengths), hq, d)
    serving.kvcache(q, k_cache, v_cache, seqlens, causal=True, window_size=window, softcap=cap, s_aux=sinks, out=out,
                    lse=lse, debug_checks=True)
    for b, n in enumerate(lengths):
        ref, ref_lse = reference.sequence(q[b], k_cache[b, :n], v_cache[b, :n], causal=True, scale=1 / math.sqrt(d),
                                          window=window, softcap=cap, sinks=sinks)
        close(out[b], ref, lse[b], ref_lse)


@pytest.mark.parametrize("new", [1, 4])
def test_append_then_decode(new: int) -> None:
    batch, capacity, hq, hkv, d = 4, 1200, 32, 8, 128
    k_cache, v_cache = rand(batch, capacity, hkv, d), rand(batch, capacity, hkv, d)
    lengths = torch.tensor([0, 1, 700, capacity - new], dtype=torch.int32, device="cuda")
    q, k, v = rand(batch, new, hq, d), rand(batch, new, hkv, d), rand(batch, new, hkv, d)
    out = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lengths, causal=True,
                                            debug_checks=True)
    assert isinstance(out, torch.Tensor) and torch.isfinite(out).all()
    for b, n in enumerate(lengths.tolist()):
        assert torch.equal(k_cache[b, n:n + new], k[b]) and torch.equal(v_cache[b, n:n + new], v[b])
        ref, _ = reference.sequence(q[b], k_cache[b, :n + new], v_cache[b, :n + new], causal=True,
                                    scale=1 / math.sqrt(d))
        torch.testing.assert_close(out[b].float(), ref, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("d", [64, 128])
def test_dense_decode_on_the_decode_point_and_on_the_short_point(d: int) -> None:
    """The same call on the decode point and on the short default point (named through a tile, the same keys per
    tile): both close to the reference."""
    q, k, v = rand(3, 1, 32, d), rand(3, 5000, 8, d), rand(3, 5000, 8, d)
    assert flashcore.plan(q, k, v).point == DECODE_POINT[d]
    short = next(p for p in flashcore.compiled_points(d, defaults_only=True) if p.consumer_wgs > 1 and p.block_n == 128)
    o1, lse1 = flashcore.attention(q, k, v, num_splits=1)
    o2, lse2 = flashcore.attention(q, k, v, num_splits=1, tile=flashcore.TileConfig(point=short.name))
    ref, ref_lse = reference.dense(q, k, v, causal=False, scale=1 / math.sqrt(d))
    close(o1, ref, lse1, ref_lse)
    close(o2, ref, lse2, ref_lse)
