"""FP8's decode points (kernel/tile_choice.h Fp8Choice<64, 128, 256>::kOneWgDecode: one consumer warpgroup, BLOCK_M 64,
V transposed in shared memory) on the H100/H200: the plan takes a head dim's point for FP8 calls whose every tile holds
at most 64 query rows (use_one_wg_point, as the 16-bit decode point), never for more rows; and its results hold FA3's
FP8 accuracy rule (tests/test_fp8_layouts_gpu.py check_sequence) on ragged caches (lengths 0 and 1 among them), GQA
8:1, 4:1 and MHA, split-KV (auto, 1, 3), short causal queries, slots and shuffled pages of 16 and 64 keys (hdim 128:
FP8 pages run natively there only). Key rows no call may read hold E4M3 NaN; out and lse are NaN first; fresh random
inputs per case."""

from __future__ import annotations

import pytest
import torch

import flashcore
from flashcore import reference, serving
from tests.test_fp8_gpu import FP8_DECODE as DECODE
from tests.test_fp8_layouts_gpu import E4M3, check_sequence, descales, fp8, poison

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASHCORE_TUNE", "0")


def cache_point(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, lengths: torch.Tensor,
                page_table: torch.Tensor | None = None, causal: bool = False) -> str:
    """The point the checked cache call itself plans (fc_plan on its Call): what the cache calls below run."""
    from flashcore import check_serving, forward, points

    call = check_serving.kvcache(q, k_cache, v_cache, lengths, k_new=None, v_new=None, cache_batch_idx=None,
                                 page_table=page_table, causal=causal, softmax_scale=None, window_size=(-1, -1),
                                 softcap=0.0, num_splits=None, sm_margin=0, fallback="error", out=None, lse=None)
    return points.Point.from_code(forward.plan(call)[0].point).name


@pytest.mark.parametrize(("sq", "hq", "hkv", "d", "decode"), [
    (1, 32, 8, 128, True), (4, 32, 8, 128, True), (16, 4, 4, 128, True), (64, 4, 4, 128, True),
    (65, 4, 4, 128, False), (16, 16, 2, 128, False), (1, 32, 8, 64, True), (16, 4, 1, 64, True),
    (17, 4, 1, 64, False), (100, 2, 2, 64, False), (1, 32, 8, 256, True), (1, 16, 16, 256, True),
    (64, 8, 8, 256, True), (65, 8, 8, 256, False),
])  # fmt: skip
def test_the_fp8_plan_takes_the_decode_point_for_tiles_of_64_rows(sq: int, hq: int, hkv: int, d: int,
                                                                   decode: bool) -> None:
    q, k, v = fp8(2, sq, hq, d), fp8(2, 3000, hkv, d), fp8(2, 3000, hkv, d)
    plan = flashcore.plan(q, k, v)
    assert (plan.point == DECODE[d]) == decode
    assert not decode or plan.block_n == 128


def test_a_named_decode_point_takes_its_own_block_n_only() -> None:
    """fc_plan (the C ABI: Python's FP8 entries name no tile) with the decode point named: its own 128 keys are
    taken; FP8 hdim 128's default 192 beside it is refused, not run at 128 with the 192 ignored."""

    from flashcore import _lib, check_serving, launch
    from flashcore.errors import FlashCoreError
    from flashcore.points import Point
    from flashcore.tuning import TileConfig

    q, k, v = fp8(2, 1, 32, 128), fp8(2, 3000, 8, 128), fp8(2, 3000, 8, 128)
    lengths = torch.full((2,), 3000, dtype=torch.int32, device="cuda")
    call = check_serving.kvcache(q, k, v, lengths, k_new=None, v_new=None, cache_batch_idx=None, page_table=None,
                                 causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0, num_splits=None,
                                 sm_margin=0, fallback="error", out=None, lse=None)
    o = torch.empty(q.shape, dtype=torch.bfloat16, device="cuda")
    lib = _lib.load()
    decode = launch.plan(lib, launch.params(call, o, None)).point  # its code (a name omits V^T's place)
    assert Point.from_code(decode).name == DECODE[128]
    named = launch.params(call, o, None, TileConfig(block_n=128))
    named.point = decode
    assert launch.plan(lib, named).block_n == 128
    named.block_n = 192
    with pytest.raises(FlashCoreError, match="block_n 192"):
        launch.plan(lib, named)


CACHE_CASES = [(32, 8, 1, False), (32, 4, 1, False), (8, 8, 1, False), (16, 4, 4, True), (4, 4, 16, True)]


@pytest.mark.parametrize("splits", [None, 1, 3])
@pytest.mark.parametrize(("hq", "hkv", "sq", "causal"), CACHE_CASES)
@pytest.mark.parametrize("d", [128])
def test_fp8_cache_decode_on_the_decode_point(hq: int, hkv: int, sq: int, causal: bool, splits: int | None,
                                              d: int) -> None:
    check_cache_decode(hq, hkv, sq, causal, splits, d)


@pytest.mark.parametrize("splits", [None, 3])
@pytest.mark.parametrize(("hq", "hkv", "sq", "causal"), [CACHE_CASES[0], CACHE_CASES[2], CACHE_CASES[3]])
@pytest.mark.parametrize("d", [64, 256])
def test_fp8_cache_decode_on_the_other_head_dims_decode_points(hq: int, hkv: int, sq: int, causal: bool,
                                                               splits: int | None, d: int) -> None:
    check_cache_decode(hq, hkv, sq, causal, splits, d)


def check_cache_decode(hq: int, hkv: int, sq: int, causal: bool, splits: int | None, d: int) -> None:
    lengths = (1, 4097, 0, 1000, 129, 7, 8191)
    batch, capacity = len(lengths), 8192
    k_cache, v_cache = fp8(batch, capacity, hkv, d), fp8(batch, capacity, hkv, d)
    for b, n in enumerate(lengths):
        poison(k_cache[b, n:])
        poison(v_cache[b, n:])
    q, ds = fp8(batch, sq, hq, d), descales(batch, hkv)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    assert cache_point(q, k_cache, v_cache, seqlens, causal=causal) == DECODE[d]
    out = torch.full((batch, sq, hq, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse = torch.full((batch, hq, sq), float("nan"), device="cuda")
    serving.kvcache(q, k_cache, v_cache, seqlens, causal=causal,
                    num_splits=splits, out=out, lse=lse, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2])
    for b, n in enumerate(lengths):
        if causal and n < sq:
            continue  # bottom-right causal with fewer keys than queries: rows see nothing (the layouts tests cover it)
        check_sequence(out[b], lse[b], q[b], k_cache[b, :n], v_cache[b, :n], [s[b:b + 1] for s in ds], causal)


@pytest.mark.parametrize("splits", [None, 3])
@pytest.mark.parametrize("page_size", [16, 64])
def test_fp8_paged_decode_on_the_decode_point(page_size: int, splits: int | None) -> None:
    batch, hq, hkv, d = 5, 32, 8, 128
    lengths = (1, 2000, 0, 333, 64)
    per = -(-max(lengths) // page_size)
    k_pages, v_pages = fp8(batch * per + 3, page_size, hkv, d), fp8(batch * per + 3, page_size, hkv, d)
    table = torch.randperm(batch * per + 3, device="cuda")[:batch * per].to(torch.int32).view(batch, per)
    for b, n in enumerate(lengths):  # the slots past each length, in its pages: NaN
        flat = torch.arange(n, per * page_size, device="cuda")
        for pages in (k_pages, v_pages):
            pages.view(torch.uint8)[table[b, flat // page_size].long(), flat % page_size] = 0x7F
    q, ds = fp8(batch, 1, hq, d), descales(batch, hkv)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    assert cache_point(q, k_pages, v_pages, seqlens, page_table=table) == DECODE[d]
    out, lse = flashcore.flash_attn_with_kvcache(
        q, k_pages, v_pages, cache_seqlens=seqlens, page_table=table,
        num_splits=splits or 0, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], return_softmax_lse=True)
    for b, n in enumerate(lengths):
        kb, vb = (t.view(E4M3) for t in reference.cached_keys(k_pages.view(torch.uint8), v_pages.view(torch.uint8), b,
                                                               n, None, table))
        check_sequence(out[b], lse[b], q[b], kb, vb, [s[b:b + 1] for s in ds], False)
