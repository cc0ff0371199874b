"""The racecheck run's reduced shape (harness/sanitizer/shrink.py): it keeps the lengths, the GQA ratio and every
flag, the tile floor at 132 and 114 SMs, the split-KV and stream-K tail plans (checked against kernel/heuristics.h
and kernel/stream_tail.h compiled for the host), and leaves small, cache, decode and split workloads whole."""

from __future__ import annotations

import dataclasses
import re
import subprocess

import pytest
from conftest import REPO, workload

from harness.config import load_config
from harness.sanitizer.shrink import BLOCK_M, TAIL_MAX_FILL, describe, equal_tiles, fewest_tiles, racecheck_shape
from harness.schema import Workload
from tests.conftest import build_host_program

CONFIG = load_config(REPO / "gates")
WORKLOADS = CONFIG.workloads
SMS = (132, 114)  # H100/H200 SXM, H100 PCIe
FLOOR = 3  # gates/phases.yaml racecheck_min_tiles_per_sm
BLOCK_N = (80, 112, 128, 176, 192)  # every K/V tile of kernel/tile_choice.h (16-bit and FP8)
SHAPE_FIELDS = ("batch", "heads_q", "heads_kv")


def shapes(sms: int) -> list[tuple[Workload, Workload]]:
    return [(w, racecheck_shape(w, FLOOR, sms)) for w in WORKLOADS.values()]


def ceil(a: int, b: int) -> int:
    return -(-a // b)


def kernel_tiles(w: Workload, block_m: int) -> int:
    """make_plan's tile count: every sequence gets the longest one's query tiles (the kernel's grid)."""
    return w.batch * w.heads_q * ceil(w.seqlen_q, block_m)


@pytest.mark.parametrize("sms", SMS)
def test_only_batch_and_heads_shrink_and_the_gqa_ratio_stays(sms: int) -> None:
    reduced = 0
    for w, r in shapes(sms):
        others = {f.name for f in dataclasses.fields(Workload)} - set(SHAPE_FIELDS)
        assert all(getattr(r, f) == getattr(w, f) for f in others), w.name  # lengths, dims, dtype, flags, layout
        assert r.heads_q * w.heads_kv == w.heads_q * r.heads_kv, w.name
        assert 1 <= r.batch <= w.batch and 1 <= r.heads_kv <= w.heads_kv
        if w.layout == "varlen":
            assert r.batch == w.batch and r.seqlens_q == w.seqlens_q and r.seqlens_k == w.seqlens_k
        reduced += r != w
    assert reduced >= 20  # the big prefill shapes of sanitizer-all


@pytest.mark.parametrize("sms", SMS)
def test_a_reduced_shape_keeps_the_tile_floor_at_the_tallest_tile(sms: int) -> None:
    for w, r in shapes(sms):
        if r != w:
            assert fewest_tiles(r) >= FLOOR * sms and fewest_tiles(r, BLOCK_M[-1]) <= fewest_tiles(r, BLOCK_M[0])
            assert r.batch * r.heads_kv < w.batch * w.heads_kv


def test_examples_at_132_and_114_sms() -> None:
    causal, varlen = WORKLOADS["prefill-d128-causal"], WORKLOADS["serve-varlen-prefill"]
    # B4 H16 S8K causal: 43 tiles of 192 rows per head; 10 heads hold 430 >= 396, 9 hold 387
    assert [(r.batch, r.heads_q, r.heads_kv) for r in (racecheck_shape(causal, 3, s) for s in SMS)] == \
        [(1, 10, 10), (1, 8, 8)]
    # nine sequences of 1K-16K (344 tiles a head): the lengths stay, one K/V head of four query heads
    assert (racecheck_shape(varlen, 3, 132).batch, racecheck_shape(varlen, 3, 132).heads_q) == (9, 4)
    assert describe(racecheck_shape(causal, 3, 132), causal, 3).startswith(
        "B1 H10/10 of B4 H16/16 S8192x8192 D128 bf16 causal (racecheck's shared-memory hazards")
    assert describe(causal, causal, 3) == causal.label


@pytest.mark.parametrize("name", [*CONFIG.sets["sanitizer"], *CONFIG.sets["serving"], *CONFIG.sets["fp8"],
                                  "decode", "decode-gqa", "check-decode", "serve-decode-lengths",
                                  "serve-paged-decode", "san-split", "odd-grid", "s4097"])
@pytest.mark.parametrize("sms", SMS)
def test_small_cache_decode_and_split_workloads_stay_whole(name: str, sms: int) -> None:
    w = WORKLOADS[name]
    assert racecheck_shape(w, FLOOR, sms) is w


def test_no_floor_no_reduction_and_a_big_cache_stays_whole() -> None:
    big = WORKLOADS["prefill-d128"]
    assert racecheck_shape(big, 0, 132) is big
    paged = dataclasses.replace(WORKLOADS["serve-paged-decode"], seqlen_q=1024)  # prefill over a paged cache
    assert racecheck_shape(paged, FLOOR, 132) is paged
    # tall enough tiles but fewer than the floor: whole
    few = workload("few", b=2, hq=8, hkv=8, sq=4096, sk=4096, d=128)
    assert fewest_tiles(few) < 3 * 132 and racecheck_shape(few, 3, 132) is few


def test_block_m_and_tail_fill_are_the_kernels() -> None:
    config = (REPO / "kernel" / "hopper_config.h").read_text()
    assert "kBlockM = 64 * kConsumerWGs;" in config and "kConsumerWGs >= 1 && kConsumerWGs <= 3" in config
    assert BLOCK_M == tuple(64 * n for n in (1, 2, 3))
    tail = re.search(r"constexpr double kTailMaxFill = ([0-9.]+);", (REPO / "kernel" / "stream_tail.h").read_text())
    assert tail is not None and float(tail.group(1)) == TAIL_MAX_FILL


PROGRAM = r"""
#include <cstdio>
#include "heuristics.h"
#include "stream_tail.h"
int main() {
  long long tiles, ctas; int blocks;
  while (std::scanf("%lld %d %lld", &tiles, &blocks, &ctas) == 3) {
    std::printf("%d %d\n", flashcore::choose_num_splits(tiles, blocks, static_cast<int>(ctas)),
                flashcore::plan_tail(tiles, blocks, ctas).tiles > 0 ? 1 : 0);
  }
}
"""


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """(tiles, K/V blocks, SMs) -> (split count, stream-K tail cut?) by the kernel's own host code."""
    exe = build_host_program(tmp_path_factory.mktemp("racecheck_shrink"), "plan", PROGRAM)

    def run(cases: list[tuple[int, int, int]]) -> list[tuple[int, bool]]:
        out = subprocess.run([str(exe)], input="".join(f"{t} {b} {c}\n" for t, b, c in cases), capture_output=True,
                             text=True, check=True).stdout.split("\n")
        return [(int(line.split()[0]), line.split()[1] == "1") for line in out if line]

    return run


@pytest.mark.parametrize("sms", SMS)
def test_reduced_shapes_take_the_kernels_split_and_tail_plan(plan, sms: int) -> None:  # type: ignore[no-untyped-def]
    """At every tile height and key tile, the reduced shape is not split, as the whole one is not, and plan_tail cuts
    a stream-K tail from both or from neither."""
    points = [(w, r, m, n) for w, r in shapes(sms) if r != w for m in BLOCK_M for n in BLOCK_N]
    got = plan([(kernel_tiles(x, m), ceil(w.seqlen_k, n), sms) for w, r, m, n in points for x in (w, r)])
    for (w, _, m, n), whole, part in zip(points, got[::2], got[1::2], strict=True):
        assert whole[0] == part[0] == 1, (w.name, m, n)
        if equal_tiles(w):
            assert whole[1] == part[1], (w.name, m, n)


def test_the_tail_rule_matches_plan_tail(plan) -> None:  # type: ignore[no-untyped-def]
    """shrink.tail_cut is plan_tail's answer wherever a tile has enough blocks to be cut (8 or more); with fewer
    plan_tail cuts none, the same for both shapes (the lengths are kept)."""
    from harness.sanitizer.shrink import tail_cut

    cases = [(t, b, c) for c in SMS for t in range(1, 4 * c, 7) for b in (2, 7, 8, 9, 43, 103)]
    for (t, b, c), (_, cut) in zip(cases, plan(cases), strict=True):
        assert cut == (tail_cut(t, c) and b >= 8), (t, b, c)


def test_the_split_rule_needs_a_floor_of_at_least_one_wave(plan) -> None:  # type: ignore[no-untyped-def]
    """choose_num_splits splits grids short of 80 % of the SMs: the floor (>= 1 tile per SM) stays above it."""
    whole, whole_114, short = (s for s, _ in plan([(132, 43, 132), (114, 43, 114), (105, 43, 132)]))
    assert whole == whole_114 == 1 and short > 1
    assert (REPO / "kernel" / "heuristics.h").read_text().count("tiles >= 0.8 * sms") == 1
