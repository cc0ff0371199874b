"""Head dims 32, 96, 160, 192 and 224 on kernels of their own (kernel/head_dims.h KernelHeadDims): 32, 96, 160 and 224
with 64-byte swizzle spans (one, three, five and seven 32-column chunks of Q, K and V; 32 at 128 keys on three
consumer warpgroups and its one-warpgroup decode point, 96 at 128 and 176 keys per tile, 160 at 128, 224 at 96), 192
with 112 keys per tile, q/k 192 with v 192 and with v 128 (DeepSeek's pair: V's tile is 192 columns, TMA zero-fills
past 128 and the store clips them), 160 with v 128 likewise, and 24, 152 and 216 padded onto 32, 160 and 224, on the
H100/H200 against the float32 reference: dense causal and not with GQA, packed varlen with and without a window, a
KV cache decode with cache_seqlens (split-KV) and with an append and soft-capping, and paged caches of 16-key and
64-key pages (paged hdim 32 and 96 run on the 128 kernel, 160 on 192, 224 on 256). Fresh random inputs per run (the
seed is in every failure message, tests/test_head_dims_gpu.py draws it); out and lse are poisoned (NaN) first, and
every checked row must be finite. Also: which kernel the library runs 8..232 on, and what it compiled."""

from __future__ import annotations

import pytest
import torch

import flashcore
from flashcore import reference, serving
from tests.test_head_dims_gpu import SEED, close, kvcache_append_with_softcap, paged_cache, poisoned, rand

pytestmark = pytest.mark.gpu
PAIRS = [(96, 96), (192, 192), (192, 128), (160, 160), (160, 128), (224, 224), (152, 152), (216, 216), (32, 32),
         (24, 24)]  # (q/k head dim, v head dim)


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(SEED)


def test_the_library_compiles_hdim_32_96_160_192_and_224() -> None:
    assert flashcore.api.block_n_options(32) == (128,)
    assert flashcore.api.block_n_options(96) == (128, 176)
    assert flashcore.api.block_n_options(160) == (128,)
    assert flashcore.api.block_n_options(192) == (112,)
    assert flashcore.api.block_n_options(224) == (96,)
    q, k = rand(1, 256, 2, 256), rand(1, 256, 2, 256)
    for d, block_n in ((136, 128), (160, 128), (168, 112), (184, 112), (192, 112), (200, 96), (224, 96), (232, 80)):
        qd, kd = q[..., :d].contiguous(), k[..., :d].contiguous()
        assert flashcore.api.plan(qd, kd, kd, causal=True).block_n == block_n, f"head dim {d}: {block_n} keys"


@pytest.mark.parametrize("dims", PAIRS)
def test_dense_causal_and_not_with_gqa(dims: tuple[int, int]) -> None:
    d, dv = dims  # 3000 keys without a mask: the long tile (hdim 96: 176 keys)
    for causal, (b, sq, sk, hq, hkv) in ((True, (2, 300, 333, 8, 2)), (False, (1, 129, 3000, 6, 1)),
                                         (True, (3, 1, 700, 8, 2)), (False, (2, 1024, 1024, 4, 4))):
        q, k, v = rand(b, sq, hq, d), rand(b, sk, hkv, d), rand(b, sk, hkv, dv)
        out, lse = poisoned(b, sq, hq, dv), poisoned(b, hq, sq, dtype=torch.float32)
        flashcore.attention(q, k, v, causal=causal, out=out, lse=lse)
        ref, ref_lse = reference.dense(q, k, v, causal=causal, scale=d ** -0.5)
        close(f"dense d{d} v{dv} causal={causal} {b}x{sq}x{sk} {hq}/{hkv}", out, ref, lse, ref_lse)


@pytest.mark.parametrize("window", [(-1, -1), (50, 0)])
@pytest.mark.parametrize("dims", PAIRS)
def test_varlen(dims: tuple[int, int], window: tuple[int, int]) -> None:
    d, dv = dims
    lq, lk, hq, hkv = [70, 1, 0, 257], [300, 9, 4, 257], 4, 2
    cu_q = torch.tensor([0, 70, 71, 71, 328], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 300, 309, 313, 570], dtype=torch.int32, device="cuda")
    q, k, v = rand(sum(lq), hq, d), rand(sum(lk), hkv, d), rand(sum(lk), hkv, dv)
    out, lse = poisoned(sum(lq), hq, dv), poisoned(hq, sum(lq), dtype=torch.float32)
    serving.varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True, window_size=window, out=out, lse=lse,
                   debug_checks=True)
    ref, ref_lse = reference.varlen(q, k, v, cu_q.tolist(), cu_k.tolist(), None, causal=True, scale=d ** -0.5,
                                    window=window)
    close(f"varlen d{d} v{dv} window {window}", out, ref, lse, ref_lse)


@pytest.mark.parametrize("dims", PAIRS)
def test_kvcache_decode_with_cache_seqlens(dims: tuple[int, int]) -> None:
    d, dv = dims
    b, hq, hkv, lengths = 4, 16, 2, [3000, 1, 0, 777]  # a sequence of no keys: out 0, lse -inf
    k_cache, v_cache, q = rand(b, 3072, hkv, d), rand(b, 3072, hkv, dv), rand(b, 1, hq, d)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out, lse = poisoned(b, 1, hq, dv), poisoned(b, hq, 1, dtype=torch.float32)
    serving.kvcache(q, k_cache, v_cache, seqlens, causal=True, out=out, lse=lse, debug_checks=True)
    for i, n in enumerate(lengths):
        ref, ref_lse = reference.sequence(q[i], k_cache[i, :n], v_cache[i, :n], causal=True, scale=d ** -0.5)
        close(f"kvcache decode d{d} v{dv}, sequence {i}", out[i], ref, lse[i], ref_lse)


@pytest.mark.parametrize("dims", PAIRS)
def test_kvcache_append_with_softcap(dims: tuple[int, int]) -> None:
    kvcache_append_with_softcap(*dims)


@pytest.mark.parametrize("page_size", [16, 64])
@pytest.mark.parametrize("dims", PAIRS)
def test_paged_cache(dims: tuple[int, int], page_size: int) -> None:
    d, dv = dims
    for b, sq, hq, hkv, lengths in ((2, 3, 8, 1, [300, 37]), (3, 1, 16, 2, [1000, 1, 129])):
        k, v, q = rand(b, max(lengths), hkv, d), rand(b, max(lengths), hkv, dv), rand(b, sq, hq, d)
        k_pages, v_pages, table = paged_cache(k, v, page_size)
        seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        out, lse = poisoned(b, sq, hq, dv), poisoned(b, hq, sq, dtype=torch.float32)
        serving.kvcache(q, k_pages, v_pages, seqlens, page_table=table, causal=True, out=out, lse=lse,
                        debug_checks=True)
        for i, n in enumerate(lengths):
            ref, ref_lse = reference.sequence(q[i], k[i, :n], v[i, :n], causal=True, scale=d ** -0.5)
            close(f"paged d{d} v{dv} pages of {page_size}, {sq} queries, sequence {i}", out[i], ref, lse[i], ref_lse)


@pytest.mark.parametrize("d, block_m", [(32, 192), (160, 128), (224, 128)])
def test_the_stream_k_tail_of_each_new_kernel(d: int, block_m: int) -> None:
    """B1 H5 of 28 query tiles each, no mask: 140 equal tiles, so on 132 SMs a last wave of 8 tiles is cut into
    stream-K pieces (kernel/stream_tail.h) and their combine kernel (combine_tail_kernel<hd, BLOCK_M>) runs; the
    result matches the float32 reference and repeats its bits."""
    s = 28 * block_m
    q, k, v = rand(1, s, 5, d), rand(1, s, 5, d), rand(1, s, 5, d)
    plan = flashcore.api.plan(q, k, v)
    if not 0 < 140 % plan.ctas <= plan.ctas // 4:
        pytest.skip(f"{plan.ctas} CTAs: a last wave of {140 % plan.ctas} tiles is not cut")
    assert 0 < plan.tail_tiles < plan.tail_pieces, f"head dim {d}: no stream-K tail planned ({plan})"
    out, lse = poisoned(1, s, 5, d), poisoned(1, 5, s, dtype=torch.float32)
    flashcore.attention(q, k, v, out=out, lse=lse)
    ref, ref_lse = reference.dense(q, k, v, causal=False, scale=d ** -0.5)
    close(f"stream-K tail d{d} S{s}", out, ref, lse, ref_lse)
    again, again_lse = flashcore.attention(q, k, v)
    assert torch.equal(out, again) and torch.equal(lse, again_lse)
