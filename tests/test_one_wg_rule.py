"""kernel/tile_choice.h use_one_wg_point, the host rule that sends a call whose every tile holds at most 64 query rows
(packed GQA decode, short queries) to the one-consumer-warpgroup decode point, compiled as it is (a host-only
function) and asked about decode, GQA, MHA and prefill shapes at both default tile heights (BLOCK_M 128 at hdim 128,
192 at hdim 64). Needs a C++ compiler, no GPU."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import build_host_program

PROGRAM = """
#include <cstdio>
#include "tile_choice.h"
int main() {
  long long sq, group, block_m;
  while (std::scanf("%lld %lld %lld", &sq, &group, &block_m) == 3) {
    std::printf("%d\\n", flashcore::use_one_wg_point(sq, group, block_m) ? 1 : 0);
  }
}
"""

# (seqlen_q, group, default BLOCK_M) -> one warpgroup?
CASES = {
    (1, 4, 128): True,     # packed GQA decode: 4 rows (serve-decode-lengths)
    (1, 8, 128): True,     # 8 rows
    (16, 4, 128): True,    # packed, 64 rows: FA3's bound, inclusive
    (8, 8, 128): True,
    (16, 8, 128): False,   # packed 128 rows: both warpgroups hold rows
    (1, 1, 128): True,     # MHA decode: one row per tile
    (64, 1, 128): True,    # MHA, 64-row tiles
    (65, 1, 128): False,
    (40, 4, 128): True,    # too tall to pack at 128: 40-row tiles per query head
    (2048, 1, 128): False,  # prefill
    (1, 64, 128): True,    # 64 heads per K/V head, one row each
    (3, 32, 128): False,   # 96 rows packed
    (16, 8, 192): False,   # hdim 64: packed 128 rows in its 192-row tiles
    (16, 4, 192): True,
    (48, 4, 192): False,   # packed 192 rows
    (60, 4, 192): True,    # not packed at 192 (240 rows): 60-row tiles per query head
}


@pytest.fixture(scope="module")
def rule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_host_program(tmp_path_factory.mktemp("one_wg"), "rule", PROGRAM)


def test_tiles_of_at_most_64_rows_take_the_one_warpgroup_point(rule: Path) -> None:
    stdin = "".join(f"{sq} {g} {bm}\n" for sq, g, bm in CASES)
    out = subprocess.run([str(rule)], input=stdin, capture_output=True, text=True, check=True).stdout.split()
    got = {case: bit == "1" for case, bit in zip(CASES, out, strict=True)}
    assert got == CASES
