"""Head dims on and between the compiled kernels' (8..248 on the 32, 64, 96, 128, 160, 192, 224 and 256 kernels, TMA
zero-filling the missing columns and clipping the store) on the H100/H200 against the float32 reference: dense
causal and not, GQA, packed varlen with a window, a KV cache with an append and soft-capping, paged caches of 16-key
and 1-key pages, and FA3's v head dims of their own. Fresh random inputs per run (the seed is in every failure
message); out and lse are poisoned (NaN) first, and every checked row must be finite. The table the loaded library
exports (fc_head_dims) is the header's."""

from __future__ import annotations

import os

import pytest
import torch

import flashcore
from flashcore import _lib, head_dims, reference, serving
from tests.conftest import REPO

pytestmark = pytest.mark.gpu
DIMS = (8, 16, 32, 40, 72, 80, 112, 136, 160, 200, 224, 248)
ATOL, RTOL = 2e-2, 2e-2  # bf16 output (8 mantissa bits) of softmax-weighted sums of N(0, 1) values
SEED = int.from_bytes(os.urandom(4), "little")


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(torch.bfloat16)


def poisoned(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def close(what: str, out: torch.Tensor, ref: torch.Tensor, lse: torch.Tensor, ref_lse: torch.Tensor) -> None:
    msg = f"{what} (seed {SEED})"
    assert torch.isfinite(out).all(), msg
    torch.testing.assert_close(out.float(), ref, atol=ATOL, rtol=RTOL, msg=lambda m: f"{msg}: {m}")
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), seen), msg
    torch.testing.assert_close(lse[seen], ref_lse[seen], atol=1e-3, rtol=1e-3, msg=lambda m: f"{msg}: {m}")


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(SEED)


def test_the_library_exports_the_headers_table() -> None:
    header = (REPO / "kernel" / "flashcore.h").read_text()
    assert head_dims.from_library(_lib.load()) == head_dims.parse_header(header)


@pytest.mark.parametrize("d", DIMS)
def test_dense_causal_and_not_with_gqa(d: int) -> None:
    for causal, (b, sq, sk, hq, hkv) in ((True, (2, 200, 333, 4, 2)), (False, (1, 129, 65, 6, 1)),
                                         (True, (3, 1, 700, 8, 2))):  # the last: decode against 700 keys
        q, k, v = rand(b, sq, hq, d), rand(b, sk, hkv, d), rand(b, sk, hkv, d)
        out, lse = poisoned(b, sq, hq, d), poisoned(b, hq, sq, dtype=torch.float32)
        flashcore.attention(q, k, v, causal=causal, out=out, lse=lse)
        ref, ref_lse = reference.dense(q, k, v, causal=causal, scale=d ** -0.5)
        close(f"dense d{d} causal={causal} {b}x{sq}x{sk} {hq}/{hkv}", out, ref, lse, ref_lse)


@pytest.mark.parametrize("d", DIMS)
def test_varlen_with_a_window(d: int) -> None:
    lq, lk, hq, hkv = [70, 1, 0, 257], [300, 9, 4, 257], 4, 2
    cu_q = torch.tensor([0, 70, 71, 71, 328], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 300, 309, 313, 570], dtype=torch.int32, device="cuda")
    q, k, v = rand(sum(lq), hq, d), rand(sum(lk), hkv, d), rand(sum(lk), hkv, d)
    out, lse = poisoned(sum(lq), hq, d), poisoned(hq, sum(lq), dtype=torch.float32)
    serving.varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True, window_size=(50, 0), out=out, lse=lse,
                   debug_checks=True)
    ref, ref_lse = reference.varlen(q, k, v, cu_q.tolist(), cu_k.tolist(), None, causal=True, scale=d ** -0.5,
                                    window=(50, 0))
    close(f"varlen d{d} window (50, 0)", out, ref, lse, ref_lse)


@pytest.mark.parametrize("d", DIMS)
def test_kvcache_append_with_softcap(d: int) -> None:
    kvcache_append_with_softcap(d, d)


def kvcache_append_with_softcap(d: int, dv: int) -> None:
    """Appends 5 keys to caches of 40, 0 and 250 and attends with soft-capping; q/k head dim d, v's dv."""
    b, hq, hkv, cap, new = 3, 8, 2, 20.0, 5
    lengths = [40, 0, 250]
    k_cache, v_cache = rand(b, 320, hkv, d), rand(b, 320, hkv, dv)
    k_new, v_new, q = rand(b, new, hkv, d), rand(b, new, hkv, dv), rand(b, new, hq, d)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out, lse = poisoned(b, new, hq, dv), poisoned(b, hq, new, dtype=torch.float32)
    serving.kvcache(q, k_cache, v_cache, seqlens, k=k_new, v=v_new, causal=True, softcap=cap, out=out, lse=lse,
                    debug_checks=True)
    for i, n in enumerate(lengths):
        torch.testing.assert_close(k_cache[i, n:n + new], k_new[i], atol=0, rtol=0)
        torch.testing.assert_close(v_cache[i, n:n + new], v_new[i], atol=0, rtol=0)
        ref, ref_lse = reference.sequence(q[i], k_cache[i, :n + new], v_cache[i, :n + new], causal=True,
                                          scale=d ** -0.5, softcap=cap)
        close(f"kvcache d{d} v{dv} append, softcap, sequence {i}", out[i], ref, lse[i], ref_lse)


def paged_cache(k: torch.Tensor, v: torch.Tensor, page_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """k and v [B, S, H, D] as pages of page_size keys in a shuffled order, with 3 spare pages; and the table."""
    b, s = k.shape[:2]
    per = -(-s // page_size)
    order = torch.randperm(b * per + 3, device="cuda")[:b * per].reshape(b, per).to(torch.int32)
    k_pages, v_pages = rand(b * per + 3, page_size, *k.shape[2:]), rand(b * per + 3, page_size, *v.shape[2:])
    pad = per * page_size - s
    kp = torch.nn.functional.pad(k, (0, 0, 0, 0, 0, pad)).reshape(b, per, page_size, *k.shape[2:])
    vp = torch.nn.functional.pad(v, (0, 0, 0, 0, 0, pad)).reshape(b, per, page_size, *v.shape[2:])
    k_pages[order.long()], v_pages[order.long()] = kp, vp
    return k_pages, v_pages, order


@pytest.mark.parametrize("page_size", [16, 1])
@pytest.mark.parametrize("d", DIMS)
def test_paged_cache(d: int, page_size: int) -> None:
    b, sq, hq, hkv, lengths = 2, 3, 8, 1, [300, 37]
    k, v, q = rand(b, max(lengths), hkv, d), rand(b, max(lengths), hkv, d), rand(b, sq, hq, d)
    k_pages, v_pages, table = paged_cache(k, v, page_size)
    seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    out, lse = poisoned(b, sq, hq, d), poisoned(b, hq, sq, dtype=torch.float32)
    serving.kvcache(q, k_pages, v_pages, seqlens, page_table=table, causal=True, out=out, lse=lse, debug_checks=True)
    for i, n in enumerate(lengths):
        ref, ref_lse = reference.sequence(q[i], k[i, :n], v[i, :n], causal=True, scale=d ** -0.5)
        close(f"paged d{d} pages of {page_size}, sequence {i}", out[i], ref, lse[i], ref_lse)


@pytest.mark.parametrize("dims", [(160, 112), (136, 104), (192, 120)])
def test_fa3s_v_head_dims_of_their_own(dims: tuple[int, int]) -> None:
    d, dv = dims
    q, k, v = rand(2, 150, 4, d), rand(2, 260, 2, d), rand(2, 260, 2, dv)
    out, lse = poisoned(2, 150, 4, dv), poisoned(2, 4, 150, dtype=torch.float32)
    flashcore.attention(q, k, v, causal=True, out=out, lse=lse)
    ref, ref_lse = reference.dense(q, k, v, causal=True, scale=d ** -0.5)
    close(f"dense d{d} v{dv}", out, ref, lse, ref_lse)
    k_pages, v_pages, table = paged_cache(k, v, 16)
    seqlens = torch.tensor([260, 100], dtype=torch.int32, device="cuda")
    out2, lse2 = serving.kvcache(q[:, :1], k_pages, v_pages, seqlens, page_table=table, causal=True)
    for i, n in enumerate((260, 100)):
        ref, ref_lse = reference.sequence(q[i, :1], k[i, :n], v[i, :n], causal=True, scale=d ** -0.5)
        close(f"paged decode d{d} v{dv}, sequence {i}", out2[i], ref, lse2[i], ref_lse)
