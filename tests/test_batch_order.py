"""Ragged decode's longest-first sequence order (kernel/heuristics.h orders_batches and order_rank, the device sort in
kernel/zero_words.cuh), compiled for the host with the system C++ compiler."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from tests.conftest import build_host_program

PROGRAM = r"""
#include <cstdio>
#include <string>
#include <cstdlib>
#include <vector>
#include "heuristics.h"
// argv: "rank" key... prints each key's rank; "plan" dynamic ragged m_tiles batch prints orders_batches
int main(int argc, char** argv) {
  if (std::string(argv[1]) == "plan") {
    std::printf("%d\n", flashcore::orders_batches(std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]),
                                                  std::atoll(argv[5])) ? 1 : 0);
    return 0;
  }
  std::vector<int> keys;
  for (int i = 2; i < argc; ++i) keys.push_back(std::atoi(argv[i]));
  for (int b = 0; b < static_cast<int>(keys.size()); ++b) {
    std::printf("%d\n", flashcore::order_rank(keys.data(), static_cast<int>(keys.size()), b));
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_host_program(tmp_path_factory.mktemp("batch_order"), "batch_order",
                              PROGRAM)


def _run(exe: Path, *args: object) -> list[int]:
    out = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, check=True).stdout
    return [int(x) for x in out.split()]


def _order(exe: Path, keys: list[int]) -> list[int]:
    """The sequences in the order the device writes: out[rank] = sequence."""
    ranks = _run(exe, "rank", *keys)
    order = [-1] * len(keys)
    for b, r in enumerate(ranks):
        order[r] = b
    return order


def test_longest_first_and_equal_lengths_keep_their_order(exe: Path) -> None:
    assert _order(exe, [2124, 5686, 1041, 7966, 5686]) == [3, 1, 4, 0, 2]
    keys = [random.randrange(1, 70000) for _ in range(300)]
    assert _order(exe, keys) == sorted(range(len(keys)), key=lambda b: (-keys[b], b))


def test_bad_lengths_still_give_every_sequence_one_place(exe: Path) -> None:
    # negative, huge and repeated values (bad index data the attention kernel reports): still a permutation
    keys = [-5, 2**31 - 1, 0, -5, 7, 2**31 - 1, -2**31, 0]
    order = _order(exe, keys)
    assert sorted(order) == list(range(len(keys)))
    assert order[:2] == [1, 5] and order[-1] == 6


@pytest.mark.parametrize(("dynamic", "ragged", "m_tiles", "batch", "expected"), [
    (1, 1, 1, 64, 1),      # ragged decode in a dynamic order: sorted
    (0, 1, 1, 64, 0),      # a static order (one wave): nothing to balance
    (1, 0, 1, 64, 0),      # dense lengths: every sequence costs the same
    (1, 1, 4, 64, 0),      # several query tiles per head (prefill): the causal longest-first order stays
    (1, 1, 1, 1, 0),       # one sequence
    (1, 1, 1, 2048, 1),    # the device sort's largest batch
    (1, 1, 1, 2049, 0),    # beyond it: sequence order
])
def test_which_plans_sort(exe: Path, dynamic: int, ragged: int, m_tiles: int, batch: int, expected: int) -> None:
    assert _run(exe, "plan", dynamic, ragged, m_tiles, batch) == [expected]
