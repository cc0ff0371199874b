"""The split-KV heuristic (kernel/split_plan.h), compiled for the host with the system C++ compiler."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = r"""
#include <cstdio>
#include <cstdlib>
#include "split_plan.h"
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


@pytest.fixture(scope="module")
def choose(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    d = tmp_path_factory.mktemp("split_plan")
    (d / "main.cpp").write_text(PROGRAM)
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{ROOT / 'kernel'}", str(d / "main.cpp"), "-o", str(d / "plan")],
                   check=True)

    def run(*cases: tuple[int, int, int]) -> list[int]:
        args = [str(x) for case in cases for x in case]
        return [int(x) for x in subprocess.run([str(d / "plan"), *args], capture_output=True, text=True,
                                               check=True).stdout.split()]

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
