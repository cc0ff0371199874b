"""The KV-cache append kernel (kernel/append.cu, fc_append_kv) on the H100/H200: bit-exact against the torch append
(flashcore/append.py's CPU path run on the GPU: a copy, and rotary evaluated op by op in fp32), the whole
flash_attn_with_kvcache with rotary, packed appends, pages of 1, 16 and 256 keys and slots against the float32
reference (the CPU fallback on copies of the inputs), and bad index values: nothing written outside the caches
(canary entries around them stay intact), flashcore.device_errors.check_errors() names the tensor, and the next
valid call works (the CUDA context is alive). Fresh random inputs per case; the q the kernel rotates into and the
lengths it writes are compared whole."""

from __future__ import annotations

import math

import pytest
import torch

import flashcore
from flashcore import append, device_errors, rotary
from flashcore.errors import FlashCoreError
from tests.test_serving_gpu import ATOL, RTOL

pytestmark = pytest.mark.gpu
HQ, HKV = 8, 2


def rand(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(dtype)


def ints(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device="cuda")


def offsets(counts: list[int]) -> torch.Tensor:
    return ints([0, *torch.tensor(counts).cumsum(0).tolist()])


def tables(rows: int, cols: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    angle = torch.rand(rows, cols, device="cuda") * 2 * math.pi
    return torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)


@pytest.fixture(autouse=True)
def clean_errors() -> None:
    """Each test starts with a clear device error word (a test before may have planted a bad value)."""
    try:
        device_errors.check_errors()
    except FlashCoreError:
        pass


def paged(batch: int, capacity: int, page_size: int, d: int, dtype: torch.dtype,
          spare: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """k and v caches of shuffled pages [pages, page_size, Hkv, D] and each sequence's row of them."""
    per = -(-capacity // page_size)
    pages = batch * per + spare
    order = torch.randperm(pages, device="cuda")[:batch * per].to(torch.int32).view(batch, per)
    return rand(pages, page_size, HKV, d, dtype=dtype), rand(pages, page_size, HKV, d, dtype=dtype), order


LAYOUTS = ["contiguous", "slots", "paged1", "paged16", "paged256", "packed", "packed-paged16", "unaligned"]
ROTARY = [None, ("interleaved", 1.0), ("neox", 1.0), ("neox", 0.5), ("interleaved", 0.25)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("rot", ROTARY, ids=lambda r: "plain" if r is None else f"{r[0]}{r[1]}")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("packed_q", [False, True], ids=["q", "packed_q"])
def test_kernel_append_is_the_torch_append_bit_for_bit(layout: str, rot: tuple[str, float] | None, d: int,
                                                       dtype: torch.dtype, packed_q: bool) -> None:
    batch, capacity, sq = 5, 300, 3
    counts = [7, 0, 1, 33, 2] if layout.startswith("packed") else [4] * batch
    starts = [0, 5, 299 - counts[2], 100, 250]
    slots, table = None, None
    if layout == "slots":
        k_cache, v_cache = rand(9, capacity, HKV, d, dtype=dtype), rand(9, capacity, HKV, d, dtype=dtype)
        slots = ints([8, 0, 3, 5, 1])
    elif "paged" in layout:
        k_cache, v_cache, table = paged(batch, capacity, int(layout.split("paged")[1]), d, dtype)
    else:
        k_cache, v_cache = rand(batch, capacity, HKV, d, dtype=dtype), rand(batch, capacity, HKV, d, dtype=dtype)
    if layout.startswith("packed"):
        k, v = rand(sum(counts), HKV, d, dtype=dtype), rand(sum(counts), HKV, d, dtype=dtype)
    elif layout == "unaligned":  # rows that start off 16 bytes: the kernel's 2-element path
        k = rand(batch, counts[0], HKV, d + 2, dtype=dtype)[..., 1:d + 1]
        v = rand(batch, counts[0], HKV, d + 2, dtype=dtype)[..., 1:d + 1]
    else:
        k, v = rand(batch, counts[0], HKV, d, dtype=dtype), rand(batch, counts[0], HKV, d, dtype=dtype)
    cu_new = offsets(counts) if layout.startswith("packed") else None
    rot_obj, q, cu_q = None, None, None
    if rot is not None:
        cos, sin = tables(capacity + 8, int(d * rot[1]) // 2, dtype)
        rot_obj = rotary.Rotary(cos, sin, None, rot[0] == "interleaved", q_per_row=True)
        q_counts = [3, 1, 0, 2, 3]
        q = rand(sum(q_counts) + 2, HQ, d, dtype=dtype) if packed_q else rand(batch, sq, HQ, d, dtype=dtype)
        cu_q = offsets(q_counts) if packed_q else None
    lengths = ints(starts)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    want_lengths, want_q = append._torch(want_k, want_v, k, v, lengths, slots, table, cu_new, rot_obj, q, cu_q)
    got_lengths, got_q = append.run(k_cache, v_cache, k, v, lengths, slots, table, cu_new=cu_new, rotary=rot_obj,
                                    q=q, cu_q=cu_q)
    device_errors.check_errors()
    assert torch.equal(got_lengths, want_lengths)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)
    if q is not None:
        assert got_q is not None and want_q is not None
        rows = slice(0, q.shape[0] - 2) if packed_q else slice(None)  # rows in no sequence: not written
        assert torch.equal(got_q[rows], want_q[rows])


CASES = [
    # (layout, page size, rotary (kind, fraction) or None, causal, window)
    ("contiguous", 0, ("neox", 1.0), True, (-1, -1)),
    ("contiguous", 0, ("interleaved", 0.5), False, (-1, -1)),
    ("slots", 0, ("neox", 0.5), True, (-1, -1)),
    ("paged", 1, ("interleaved", 1.0), True, (-1, -1)),
    ("paged", 16, ("neox", 1.0), False, (-1, -1)),
    ("paged", 256, ("neox", 1.0), True, (-1, -1)),
    ("paged", 16, None, True, (-1, -1)),
    ("packed", 0, ("neox", 1.0), True, (-1, -1)),
    ("packed", 0, None, False, (-1, -1)),
    ("packed-paged", 16, ("interleaved", 1.0), True, (-1, -1)),
    ("contiguous", 0, ("neox", 1.0), False, (64, 0)),
    ("leftpad", 0, ("interleaved", 1.0), True, (-1, -1)),
]


def _case_inputs(layout: str, page_size: int, d: int) -> dict[str, object]:
    batch, capacity = 4, 512
    kw: dict[str, object] = {}
    if layout == "slots":
        kw["k_cache"], kw["v_cache"] = rand(7, capacity, HKV, d), rand(7, capacity, HKV, d)
        kw["cache_batch_idx"] = ints([6, 2, 0, 4])
    elif "paged" in layout:
        kw["k_cache"], kw["v_cache"], kw["page_table"] = paged(batch, capacity, page_size, d, torch.bfloat16)
    else:
        kw["k_cache"], kw["v_cache"] = rand(batch, capacity, HKV, d), rand(batch, capacity, HKV, d)
    counts = [3, 1, 0, 3] if layout.startswith("packed") else [3] * batch
    if layout.startswith("packed"):
        kw["k"], kw["v"] = rand(sum(counts), HKV, d), rand(sum(counts), HKV, d)
        kw["cu_seqlens_k_new"] = offsets(counts)
    else:
        kw["k"], kw["v"] = rand(batch, 3, HKV, d), rand(batch, 3, HKV, d)
    kw["cache_seqlens"] = ints([0, 200, 509, 77])
    if layout == "leftpad":  # FA3 appends and rotates at cache_seqlens, the pad counted
        kw["cache_leftpad"] = ints([0, 50, 500, 10])
    kw["q"] = rand(batch, 3, HQ, d)
    return kw


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}{c[1] or ''}-{c[2]}-causal{c[3]}-w{c[4][0]}" for c in CASES])
def test_kvcache_with_rotary_and_appends_matches_the_reference(case: tuple, d: int) -> None:
    layout, page_size, rot, causal, window = case
    kw = _case_inputs(layout, page_size, d)
    if rot is not None:
        kw["rotary_cos"], kw["rotary_sin"] = tables(520, int(d * rot[1]) // 2, torch.bfloat16)
        kw["rotary_interleaved"] = rot[0] == "interleaved"
    cpu = {name: t.cpu() if isinstance(t, torch.Tensor) else t for name, t in kw.items()}
    q = kw.pop("q")
    out = flashcore.flash_attn_with_kvcache(q, causal=causal, window_size=window, **kw)  # type: ignore[arg-type]
    device_errors.check_errors()
    ref = flashcore.flash_attn_with_kvcache(cpu.pop("q"), causal=causal, window_size=window,  # type: ignore[arg-type]
                                            fallback="sdpa", **cpu)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float().cpu(), ref.float(), atol=ATOL, rtol=RTOL)
    assert torch.equal(kw["k_cache"].cpu(), cpu["k_cache"]) and torch.equal(kw["v_cache"].cpu(), cpu["v_cache"])


def _with_canaries(entries: int, rows: int, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A tensor [entries + 2, rows, Hkv, D] whose first and last entries are canaries, and the cache between them."""
    whole = rand(entries + 2, rows, HKV, d)
    return whole, whole[1:-1]


BAD = [
    # (what is wrong, the tensor the error names, the cache entry of the skipped sequence: unchanged (None: none))
    ("append past the capacity", "cache_seqlens", 1),
    ("negative length", "cache_seqlens", 1),
    ("slot past the cache", "cache_batch_idx", None),
    ("page id past the pages", "page_table", None),
    ("negative page id", "page_table", None),
    ("packed offsets past the new keys", "cu_seqlens_k_new", 2),
    ("rotary position past the table", "rotary_seqlens", 1),
]


@pytest.mark.parametrize("bad,named,skipped", BAD, ids=[b[0].replace(" ", "-") for b in BAD])
def test_a_bad_index_writes_nothing_outside_and_is_named(bad: str, named: str, skipped: int | None) -> None:
    d, batch, capacity, page_size = 128, 3, 32, 16
    paged_cache = "page" in bad
    entries = (batch * capacity // page_size) if paged_cache else batch
    k_whole, k_cache = _with_canaries(entries, page_size if paged_cache else capacity, d)
    v_whole, v_cache = _with_canaries(entries, page_size if paged_cache else capacity, d)
    before_k, before_v = k_whole.clone(), v_whole.clone()
    kw: dict[str, object] = {"cache_seqlens": ints([3, 30, 8])}
    k, v = rand(batch, 2, HKV, d), rand(batch, 2, HKV, d)
    if bad == "append past the capacity":
        kw["cache_seqlens"] = ints([3, 31, 8])
    elif bad == "negative length":
        kw["cache_seqlens"] = ints([3, -2, 8])
    elif bad == "slot past the cache":
        kw["cache_batch_idx"] = ints([0, 3, 1])
    elif paged_cache:
        table = torch.arange(entries, dtype=torch.int32, device="cuda").view(batch, capacity // page_size).clone()
        table[1, 1] = entries if bad == "page id past the pages" else -1
        kw["page_table"] = table
    elif bad == "packed offsets past the new keys":
        k, v = rand(4, HKV, d), rand(4, HKV, d)
        kw["cu_seqlens_k_new"] = ints([0, 2, 3, 6])
    else:
        # sequence 1 rotates positions 31 and 32: a table of 32 rows ends before the second
        kw["rotary_cos"], kw["rotary_sin"] = tables(32, d // 2, torch.bfloat16)
        kw["rotary_seqlens"] = ints([3, 31, 8])
    flashcore.flash_attn_with_kvcache(rand(batch, 2, HQ, d), k_cache, v_cache, k, v, causal=True, **kw)
    with pytest.raises(FlashCoreError, match=named):
        device_errors.check_errors()
    assert torch.equal(k_whole[0], before_k[0]) and torch.equal(k_whole[-1], before_k[-1])  # canaries intact
    assert torch.equal(v_whole[0], before_v[0]) and torch.equal(v_whole[-1], before_v[-1])
    if skipped is not None:  # the bad sequence wrote nothing, not even where it would have stayed inside
        assert torch.equal(k_cache[skipped], before_k[skipped + 1]) and torch.equal(v_cache[skipped],
                                                                                 before_v[skipped + 1])
    # the context is alive: a valid call right after computes and raises nothing
    q = rand(batch, 1, HQ, d)
    good_k, good_v = rand(batch, capacity, HKV, d), rand(batch, capacity, HKV, d)
    out = flashcore.flash_attn_with_kvcache(q, good_k, good_v, rand(batch, 1, HKV, d), rand(batch, 1, HKV, d),
                                            cache_seqlens=ints([0, 5, 30]), debug_checks=True)
    ref = flashcore.flash_attn_with_kvcache(q.cpu(), good_k.cpu(), good_v.cpu(), fallback="sdpa",
                                            cache_seqlens=ints([0, 5, 30]).cpu() + 1)
    torch.testing.assert_close(out.float().cpu(), ref.float(), atol=ATOL, rtol=RTOL)


def test_debug_checks_raise_a_bad_append_at_once() -> None:
    k_cache = rand(2, 8, HKV, 128)
    with pytest.raises(FlashCoreError, match=r"cache_seqlens\[1\] = 7"):
        flashcore.flash_attn_with_kvcache(rand(2, 1, HQ, 128), k_cache, k_cache.clone(), rand(2, 2, HKV, 128),
                                          rand(2, 2, HKV, 128), cache_seqlens=ints([1, 7]), debug_checks=True)
