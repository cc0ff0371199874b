"""The split-KV heuristic (kernel/heuristics.h), compiled for the host with the system C++ compiler."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import build_host_program

PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include "heuristics.h"
int main(int argc, char** argv) {
  for (int i = 1; i + 2 < argc; i += 3) {
    const long long tiles = std::atoll(argv[i]);
    const int blocks = std::atoi(argv[i + 1]);
    const int sms = std::atoi(argv[i + 2]);
    // a negative SM count asks for the ragged-keys rule with that many SMs
    std::printf("%d\n", sms < 0 ? flashcore::choose_ragged_splits(tiles, blocks, -sms)
                                  : flashcore::choose_num_splits(tiles, blocks, sms));
  }
  return 0;
}
"""


def _run(exe: Path, *args: object) -> list[int]:
    return [int(x) for x in subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True,
                                           check=True).stdout.split()]


@pytest.fixture(scope="module")
def choose(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    exe = build_host_program(tmp_path_factory.mktemp("split_plan"), "split_plan", PROGRAM)

    def run(*cases: tuple[int, int, int]) -> list[int]:
        return _run(exe, *(x for case in cases for x in case))

    return run


def test_full_grid_is_not_split(choose) -> None:  # type: ignore[no-untyped-def]
    # decode B64 H32: 2048 tiles; prefill B4 H16 S8192: 1024; 106 of 132 SMs is >= 80 %
    assert choose((2048, 47, 132), (1024, 47, 132), (106, 47, 132)) == [1, 1, 1]


def test_small_grid_is_split_to_fill_the_sms(choose) -> None:  # type: ignore[no-untyped-def]
    # decode-b1-gqa: 8 packed tiles, 373 K/V blocks: 16 splits = 128 CTAs (97 % of one wave); fewer SMs, fewer splits
    assert choose((8, 373, 132), (16, 373, 132)) == [16, 8]
    assert choose((8, 373, 66), (8, 373, 12)) == [8, 3]


def test_never_more_splits_than_blocks(choose) -> None:  # type: ignore[no-untyped-def]
    assert choose((1, 1, 132), (4, 2, 132), (4, 7, 132), (4, 8, 132), (4, 12, 132)) == [1, 1, 1, 2, 3]
    for tiles in (1, 2, 5, 13, 40, 100):
        for n_blocks in (1, 2, 7, 64, 1000):
            (s,) = choose((tiles, n_blocks, 132))
            assert 1 <= s <= max(1, min(n_blocks // 4, 128))  # at least 4 K/V blocks per split


def test_degenerate_sm_count(choose) -> None:  # type: ignore[no-untyped-def]
    assert choose((8, 100, 0), (8, 100, 1)) == [1, 1]


def test_small_compute_grids_split_only_into_pieces_of_4_blocks_or_more(choose) -> None:  # type: ignore[no-untyped-def]
    # odd-grid (105 tiles of 7 blocks): 7 one-block splits measured 1.8x slower, so none; B1 H4 Sq1000 Sk4000 hdim 128
    # (32 tiles, 23 blocks): 4 splits of ~6 blocks, measured 1.8x faster than none
    assert choose((105, 7, 132), (32, 23, 132)) == [1, 4]


def test_ragged_keys_split_full_grids_into_more_tiles(choose) -> None:  # type: ignore[no-untyped-def]
    # decode with per-sequence lengths, capacity 8K at 176 keys (47 blocks): B64 Hkv8 packed = 512 tiles -> 4 splits,
    # B128 -> 3, B64 Hkv32 -> 2, B256 Hkv32 -> 1 (16 tiles per SM already)
    assert choose((512, 47, -132), (1024, 47, -132), (2048, 47, -132), (8192, 47, -132)) == [4, 3, 2, 1]
    # never under 4 blocks per split; a grid under 80 % of the SMs takes the general rule
    assert choose((512, 9, -132), (512, 4, -132), (8, 373, -132)) == [2, 1, 16]


SECTIONS_PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include "heuristics.h"
int main(int argc, char** argv) {
  const flashcore::Sections s = flashcore::plan_sections(std::atoll(argv[1]), std::atoll(argv[2]),
                                                         std::atoll(argv[3]), std::atoi(argv[4]) != 0);
  std::printf("%d %d\n", s.heads, s.big);
  return 0;
}
"""


@pytest.fixture(scope="module")
def sections(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    exe = build_host_program(tmp_path_factory.mktemp("sections"), "sections", SECTIONS_PROGRAM)

    def run(bh: int, kv_bytes: int, budget: int, dynamic: bool) -> tuple[int, int]:
        heads, big = _run(exe, bh, kv_bytes, budget, int(dynamic))
        return heads, big

    return run


def test_static_order_goes_one_head_at_a_time(sections) -> None:  # type: ignore[no-untyped-def]
    assert sections(64, 30, 100, False) == (1, 0)


def test_dynamic_sections_fit_the_l2_budget_and_cover_every_head(sections) -> None:  # type: ignore[no-untyped-def]
    for bh, kv, budget in [(64, 30, 100), (64, 1, 1000), (7, 50, 100), (1000, 3, 100), (5, 500, 100)]:
        heads, big = sections(bh, kv, budget, True)
        fit = max(1, budget // kv)
        n = -(-bh // fit)  # the fewest sections whose K/V fit
        assert big * (heads + 1) + (n - big) * heads == bh, (bh, kv, budget)  # every (batch, head) pair once
        assert heads + (1 if big else 0) <= fit  # no section over the budget
        assert 0 <= big < n  # sizes differ by at most one head
    assert sections(64, 30, 100, True) == (2, 20)  # 3 fit: 22 sections, 20 of 3 and 2 of 2
