"""Every head dim FA3 takes (multiples of 8 up to 256, and its v head dims of their own) through every public entry
without a GPU (fallback="sdpa"), against the fp32 reference with the default softmax scale 1/sqrt(real head dim);
and the head dims FA3 refuses (not a multiple of 8, above 256) refused by each entry with the rule in the message."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import pytest
import torch

import flashcore
from flashcore import _lib, head_dims, reference, serving
from flashcore.errors import FlashCoreError
from tests.conftest import REPO

pytestmark = pytest.mark.filterwarnings("ignore:flashcore.*fallback='sdpa':RuntimeWarning")
ALL = tuple(range(8, 257, 8))
RULE = r"multiples of 8 up to 256 \(as FA3\)"
B, SQ, SK, HQ, HKV = 2, 5, 7, 4, 2
TOL = {"atol": 2e-2, "rtol": 2e-2}
Pair = tuple[torch.Tensor, torch.Tensor]
Entry = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], Pair]


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.bfloat16)


def cu(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def test_the_table_holds_every_multiple_of_8_up_to_256() -> None:
    assert head_dims.SUPPORTED == ALL


# Each entry: (q, k, v) of [B, S, H, D] -> (out [B, SQ, HQ, Dv] float, the fp32 reference's out)
def via_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Pair:
    out, lse = flashcore.attention(q, k, v, causal=True, fallback="sdpa")
    want, want_lse = reference.dense(q, k, v, causal=True, scale=q.shape[-1] ** -0.5)
    torch.testing.assert_close(lse, want_lse, atol=1e-3, rtol=1e-3)
    return out.float(), want


def via_flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Pair:
    out = flashcore.flash_attn_func(q, k, v, causal=False, fallback="sdpa")
    assert isinstance(out, torch.Tensor)
    return out.float(), reference.dense(q, k, v, causal=False, scale=q.shape[-1] ** -0.5)[0]


def via_serving_dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Pair:
    out, _ = serving.dense(q, k, v, causal=True, window_size=(3, 0), softcap=5.0, fallback="sdpa")
    want = reference.dense(q, k, v, causal=True, scale=q.shape[-1] ** -0.5, window=(3, 0), softcap=5.0)[0]
    return out.float(), want


def _varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fn: Callable[..., object]) -> Pair:
    cu_q, cu_k = cu([SQ] * B), cu([SK] * B)
    res = fn(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu_q, cu_k, SQ, SK, causal=True, fallback="sdpa")
    out = res[0] if isinstance(res, tuple) else res
    assert isinstance(out, torch.Tensor)
    want = reference.varlen(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), cu_q.tolist(), cu_k.tolist(), None,
                            causal=True, scale=q.shape[-1] ** -0.5)[0]
    return out.float().unflatten(0, (B, SQ)), want.unflatten(0, (B, SQ))


def via_flash_attn_varlen_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Pair:
    return _varlen(q, k, v, flashcore.flash_attn_varlen_func)


def via_serving_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Pair:
    return _varlen(q, k, v, serving.varlen)


def via_flash_attn_with_kvcache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Pair:
    """A cache of 16 slots holding the first SK - 2 keys; the last 2 appended by the call itself."""
    k_cache, v_cache = torch.zeros(B, 16, *k.shape[2:], dtype=k.dtype), torch.zeros(B, 16, *v.shape[2:], dtype=v.dtype)
    k_cache[:, :SK - 2], v_cache[:, :SK - 2] = k[:, :SK - 2], v[:, :SK - 2]
    lengths = torch.full((B,), SK - 2, dtype=torch.int32)
    out = flashcore.flash_attn_with_kvcache(q, k_cache, v_cache, k[:, SK - 2:], v[:, SK - 2:], cache_seqlens=lengths,
                                            causal=True, fallback="sdpa")
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(k_cache[:, :SK], k)  # the append wrote the new keys at each sequence's length
    return out.float(), reference.dense(q, k, v, causal=True, scale=q.shape[-1] ** -0.5)[0]


def via_serving_kvcache(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Pair:
    """A paged cache: pages of 4 keys in reverse order."""
    pages = -(-SK // 4)
    k_pages = torch.zeros(B * pages, 4, *k.shape[2:], dtype=k.dtype)
    v_pages = torch.zeros(B * pages, 4, *v.shape[2:], dtype=v.dtype)
    table = torch.arange(B * pages, dtype=torch.int32).flip(0).reshape(B, pages)
    for b in range(B):
        for j in range(SK):
            k_pages[table[b, j // 4], j % 4], v_pages[table[b, j // 4], j % 4] = k[b, j], v[b, j]
    out, _ = serving.kvcache(q, k_pages, v_pages, torch.full((B,), SK, dtype=torch.int32), page_table=table,
                             causal=True, fallback="sdpa")
    return out.float(), reference.dense(q, k, v, causal=True, scale=q.shape[-1] ** -0.5)[0]


ENTRIES = [via_attention, via_flash_attn_func, via_serving_dense, via_flash_attn_varlen_func, via_serving_varlen,
           via_flash_attn_with_kvcache, via_serving_kvcache]


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda f: f.__name__[4:])
def test_every_multiple_of_8_runs_with_the_scale_of_its_own_head_dim(entry: Entry) -> None:
    torch.manual_seed(0)
    for d in ALL:
        got, want = entry(rand(B, SQ, HQ, d), rand(B, SK, HKV, d), rand(B, SK, HKV, d))
        assert got.shape == (B, SQ, HQ, d), d
        torch.testing.assert_close(got, want, **TOL, msg=lambda m, d=d: f"head dim {d}: {m}")


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda f: f.__name__[4:])
@pytest.mark.parametrize("dims", [(160, 112), (136, 104), (192, 128), (184, 120)])
def test_fa3s_v_head_dims_of_their_own_run(entry: Entry, dims: tuple[int, int]) -> None:
    d, dv = dims
    torch.manual_seed(1)
    got, want = entry(rand(B, SQ, HQ, d), rand(B, SK, HKV, d), rand(B, SK, HKV, dv))
    assert got.shape == (B, SQ, HQ, dv)
    torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda f: f.__name__[4:])
@pytest.mark.parametrize("d", [4, 36, 260, 12, 264])
def test_a_head_dim_fa3_refuses_is_refused_naming_the_rule(entry: Entry, d: int) -> None:
    with pytest.raises(FlashCoreError, match=rf"head dim \(q\.shape\[3\]\) is {d}: FlashCore takes head dims that "
                                             rf"are {RULE}"):
        entry(rand(B, SQ, HQ, d), rand(B, SK, HKV, d), rand(B, SK, HKV, d))


# (64, 128) is FA3's too (q's up to 64 with v's up to 512): it runs on the torch path (tests/test_mla.py)
@pytest.mark.parametrize("dims", [(128, 64), (96, 80), (200, 128), (160, 96), (160, 136), (72, 128)])
def test_a_v_head_dim_outside_fa3s_pairs_is_refused(dims: tuple[int, int]) -> None:
    d, dv = dims
    with pytest.raises(FlashCoreError, match=rf"v's head dim is {dv} with q and k's {d}: expected {d}"):
        via_flash_attn_func(rand(B, SQ, HQ, d), rand(B, SK, HKV, d), rand(B, SK, HKV, dv))


def built_library() -> ctypes.CDLL:
    """The checkout's built library, opened apart from flashcore's own (no GPU needed to call its checks)."""
    path = _lib.library_path()
    if not path.is_file():
        pytest.skip(f"needs the built library ({path}: make build)")
    return _lib.open_library(path)


def c_forward(lib: ctypes.CDLL, head_dim: int, head_dim_v: int = 0, dtype: int = _lib.FC_BF16) -> tuple[int, str]:
    """fc_attention_forward on a one-row call (pointers to a real buffer); the status and fc_last_error()."""
    buf = (ctypes.c_uint16 * 1024)()
    p = _lib.FcParams()
    p.q = p.k = p.v = p.o = (ctypes.addressof(buf) + 15) // 16 * 16
    p.batch = p.heads_q = p.heads_kv = p.seqlen_q = p.seqlen_k = 1
    p.head_dim, p.head_dim_v, p.dtype, p.softmax_scale = head_dim, head_dim_v, dtype, 0.1
    return lib.fc_attention_forward(ctypes.byref(p), None), _lib.last_error(lib)


def test_the_library_exports_the_headers_table_and_refuses_by_the_rule() -> None:
    lib = built_library()
    assert head_dims.from_library(lib) == head_dims.parse_header((REPO / "kernel" / "flashcore.h").read_text())
    for d in (4, 36, 260, 264):
        assert c_forward(lib, d) == (_lib.FC_ERR_INVALID_ARGUMENT,
                                     f"head_dim {d} is not supported: use a multiple of 8 up to 256 (as FA3)")
    status, message = c_forward(lib, 160, 96)
    assert status == _lib.FC_ERR_INVALID_ARGUMENT and message.startswith("head_dim_v 96 with head_dim 160")
    assert c_forward(lib, 72, 0, _lib.FC_E4M3) == (_lib.FC_ERR_INVALID_ARGUMENT,
                                                   "head_dim 72 with FP8 inputs: FP8 runs head dims 64, 128 or 256")
    for d, dv in ((8, 0), (72, 0), (248, 0), (160, 112)):  # past the checks of head dims: to the device's
        status, message = c_forward(lib, d, dv)
        assert "head_dim" not in message, (d, dv, message)
