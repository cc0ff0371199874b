"""Bad index data on the GPU through FA3's names with default settings: each bad page id (TMA boxes and gathered small
pages), length, slot or offset
leaves memory alone, makes its sequence's output rows and LSE NaN while the other sequences match the fp32
reference, and is named (tensor, element, value) by flashcore.check_errors(); the GPU then runs a valid call.
With debug_checks=True the call itself raises. Fresh random inputs per case; the output memory is poisoned first
(a finite value the kernel must overwrite: NaN where the sequence is bad)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest
import torch

import flashcore
from flashcore import device_errors, reference
from flashcore.errors import FlashCoreError

pytestmark = pytest.mark.gpu
ATOL, RTOL = 2e-2, 2e-2
H_Q, H_KV, D = 4, 2, 128
POISON = 7.0


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(torch.bfloat16)


def i32(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device="cuda")


def poison_allocator(elements: int) -> None:
    """Leave finite garbage in the caching allocator's free blocks, where the call's out and lse are allocated."""
    for _ in range(4):
        torch.full((elements,), POISON, device="cuda")


@dataclass(frozen=True)
class Case:
    """run(indices, debug) -> (out, lse); per sequence: its output rows (a selector of out, and of lse's row dim) and
    its reference; the poisoned indices, the sequences they break and the message they give."""
    run: Callable[[dict[str, torch.Tensor | None], bool | None], tuple[torch.Tensor, torch.Tensor]]
    good: dict[str, torch.Tensor | None]
    bad: dict[str, torch.Tensor | None]
    rows: Sequence[Callable[..., tuple[torch.Tensor, torch.Tensor]]]
    refs: list[tuple[torch.Tensor, torch.Tensor]]
    broken: set[int]
    match: str
    nan_rows: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None  # else the broken sequences' rows


LENGTHS, CAPACITY = [100, 200, 50], 256
PAGE, GATHERED_PAGE = 16, 4  # 16-key pages load as TMA boxes, 4-key pages are gathered (kernel/paged_gather.cuh)
BAD_KEY = 48  # the key whose page id is poisoned: sequence 1's, within its 200


def poke(table: torch.Tensor, page_size: int, page: int) -> tuple[torch.Tensor, int]:
    """The table with the id of sequence 1's page holding BAD_KEY replaced by `page`, and that entry's flat index."""
    bad = table.clone()
    bad[1, BAD_KEY // page_size] = page
    return bad, table.shape[1] + BAD_KEY // page_size


def kvcache(name: str, sq: int = 2) -> Case:
    """A contiguous or paged cache of three sequences; `name` poisons one index of sequence 1."""
    batch = len(LENGTHS)
    q = rand(batch, sq, H_Q, D)
    slots = None
    table = None
    page_size = GATHERED_PAGE if name.startswith("gathered") else PAGE
    if "page" in name:
        per = CAPACITY // page_size
        pages = batch * per + 3
        k, v = rand(pages, page_size, H_KV, D), rand(pages, page_size, H_KV, D)
        table = torch.randperm(pages, device="cuda")[:batch * per].view(batch, per).to(torch.int32)
    else:
        entries = batch + 1 if name == "cache_batch_idx" else batch  # a spare slot where the call names its slots
        k, v = rand(entries, CAPACITY, H_KV, D), rand(entries, CAPACITY, H_KV, D)
        if name == "cache_batch_idx":
            slots = i32([2, 1, 0])
    good = {"cache_seqlens": i32(LENGTHS), "cache_batch_idx": slots, "page_table": table}
    bad = dict(good)
    if name.endswith("page-out-of-range"):
        assert table is not None
        bad["page_table"], entry = poke(table, page_size, k.shape[0] + 7)
        match = rf"page_table\[{entry}\] = {k.shape[0] + 7}\b"
    elif name.endswith("page-negative"):
        assert table is not None
        bad["page_table"], entry = poke(table, page_size, -3)
        match = rf"page_table\[{entry}\] = -3\b"
    elif name == "cache_seqlens-above-capacity":
        bad["cache_seqlens"], match = i32([100, CAPACITY + 9, 50]), rf"cache_seqlens\[1\] = {CAPACITY + 9}\b"
    elif name == "cache_seqlens-negative":
        bad["cache_seqlens"], match = i32([100, -5, 50]), r"cache_seqlens\[1\] = -5\b"
    else:
        bad["cache_batch_idx"], match = i32([2, 7, 0]), r"cache_batch_idx\[1\] = 7\b"

    def run(ix: dict[str, torch.Tensor | None], debug: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
        poison_allocator(q.numel() * 2)
        out, lse = flashcore.flash_attn_with_kvcache(q, k, v, cache_seqlens=ix["cache_seqlens"],
                                                     cache_batch_idx=ix["cache_batch_idx"],
                                                     page_table=ix["page_table"], return_softmax_lse=True,
                                                     debug_checks=debug)
        return out, lse

    refs = []
    for b, n in enumerate(LENGTHS):
        kb, vb = reference.cached_keys(k, v, b, n, slots, table)
        refs.append(reference.sequence(q[b], kb, vb, causal=False, scale=1 / math.sqrt(D)))
    rows = [lambda out, lse, b=b: (out[b], lse[b]) for b in range(batch)]
    return Case(run, good, bad, rows, refs, {1}, match)


Q_LENS, K_LENS = [30, 20, 40], [50, 70, 60]


def offsets(lengths: list[int]) -> list[int]:
    return [sum(lengths[:b]) for b in range(len(lengths) + 1)]


def varlen(name: str) -> Case:
    """Three packed sequences; `name` poisons one offset or used count."""
    cu_q, cu_k = offsets(Q_LENS), offsets(K_LENS)
    q, k, v = rand(cu_q[-1], H_Q, D), rand(cu_k[-1], H_KV, D), rand(cu_k[-1], H_KV, D)
    good = {"cu_seqlens_q": i32(cu_q), "cu_seqlens_k": i32(cu_k), "seqused_k": None}
    bad = dict(good)
    broken = {1, 2}
    nan_rows = None
    if name == "cu_seqlens_q-past-rows":
        bad["cu_seqlens_q"], broken = i32(cu_q[:3] + [cu_q[3] + 5]), {2}
        match = rf"cu_seqlens_q\[3\] = {cu_q[3] + 5}\b"
    elif name == "cu_seqlens_k-past-rows":
        bad["cu_seqlens_k"], broken = i32(cu_k[:3] + [cu_k[3] + 10]), {2}
        match = rf"cu_seqlens_k\[3\] = {cu_k[3] + 10}\b"
    elif name == "cu_seqlens_q-decreasing":
        # Sequence 1 has no rows left; sequence 2's start is clamped to sequence 1's: rows [30, 60), the rest of q
        # belongs to no sequence (not written).
        bad["cu_seqlens_q"], match = i32([0, 30, 20, 60]), r"cu_seqlens_q\[2\] = 20\b"
        nan_rows = lambda out, lse: (out[30:60], lse[:, 30:60])  # noqa: E731
    elif name == "cu_seqlens_k-decreasing":
        bad["cu_seqlens_k"], match = i32([0, 50, 10, 180]), r"cu_seqlens_k\[2\] = 10\b"
    else:
        good["seqused_k"] = i32(K_LENS)
        bad["seqused_k"], broken, match = i32([50, 75, 60]), {1}, r"seqused_k\[1\] = 75\b"

    def run(ix: dict[str, torch.Tensor | None], debug: bool | None) -> tuple[torch.Tensor, torch.Tensor]:
        poison_allocator(q.numel() * 2)
        cu_seqlens_q, cu_seqlens_k = ix["cu_seqlens_q"], ix["cu_seqlens_k"]
        assert cu_seqlens_q is not None and cu_seqlens_k is not None
        out, lse = flashcore.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max(Q_LENS),
                                                    max(K_LENS), seqused_k=ix["seqused_k"], return_attn_probs=True,
                                                    debug_checks=debug)
        return out, lse

    refs = []
    for b in range(len(Q_LENS)):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        refs.append(reference.sequence(q[qs], k[ks], v[ks], causal=False, scale=1 / math.sqrt(D)))
    rows = [lambda out, lse, b=b: (out[cu_q[b]:cu_q[b + 1]], lse[:, cu_q[b]:cu_q[b + 1]]) for b in range(3)]
    return Case(run, good, bad, rows, refs, broken, match, nan_rows)


CASES = {
    "page-out-of-range": kvcache, "page-negative": kvcache, "gathered-page-out-of-range": kvcache,
    "gathered-page-negative": kvcache, "cache_seqlens-above-capacity": kvcache,
    "cache_seqlens-negative": kvcache, "cache_batch_idx": kvcache, "cu_seqlens_q-past-rows": varlen,
    "cu_seqlens_k-past-rows": varlen, "cu_seqlens_q-decreasing": varlen, "cu_seqlens_k-decreasing": varlen,
    "seqused_k-above-its-length": varlen,
}


@pytest.fixture(autouse=True)
def clean_word() -> None:
    device_errors.words("cuda").zero_()


def check_rows(case: Case, out: torch.Tensor, lse: torch.Tensor, broken: set[int]) -> None:
    if broken and case.nan_rows is not None:
        o, s = case.nan_rows(out, lse)
        assert torch.isnan(o).all() and torch.isnan(s).all(), "the clamped rows are not NaN"
    for b, (ref, ref_lse) in enumerate(case.refs):
        o, s = case.rows[b](out, lse)
        if b in broken and case.nan_rows is not None:
            continue
        if b in broken:
            assert torch.isnan(o).all(), f"sequence {b}: rows not NaN"
            assert torch.isnan(s).all(), f"sequence {b}: LSE not NaN"
        else:
            torch.testing.assert_close(o.float(), ref, atol=ATOL, rtol=RTOL)
            torch.testing.assert_close(s, ref_lse, atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("name", list(CASES))
def test_bad_index_gives_nan_rows_and_a_named_error(name: str) -> None:
    case = CASES[name](name)
    out, lse = case.run(case.bad, None)
    torch.cuda.synchronize()  # the context is alive: no illegal address
    check_rows(case, out, lse, case.broken)
    with pytest.raises(FlashCoreError, match=case.match):
        flashcore.check_errors()
    flashcore.check_errors()  # read once, cleared
    out, lse = case.run(case.good, None)  # the GPU runs the next call
    check_rows(case, out, lse, set())
    flashcore.check_errors()


@pytest.mark.parametrize("name", list(CASES))
def test_bad_index_with_debug_checks_raises_at_once(name: str) -> None:
    case = CASES[name](name)
    with pytest.raises(FlashCoreError):
        case.run(case.bad, True)
    device_errors.words("cuda").zero_()
    out, lse = case.run(case.good, True)
    check_rows(case, out, lse, set())


@pytest.mark.parametrize("name", ["page-out-of-range", "gathered-page-out-of-range"])
def test_decode_splits_carry_the_nan_through_the_combine(name: str) -> None:
    """Decode of one query row splits its keys among CTAs (few tiles): a bad page in one split makes the combined
    row NaN, whether its rows load as TMA boxes or are gathered."""
    case = kvcache(name, sq=1)
    out, lse = case.run(case.bad, None)
    check_rows(case, out, lse, case.broken)
    with pytest.raises(FlashCoreError, match=case.match):
        flashcore.check_errors()
