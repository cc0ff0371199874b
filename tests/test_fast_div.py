"""kernel/fast_div.h: the producer's multiply-shift division, compiled for the host with the system C++ compiler.

The kernel decodes every tile index with it (kernel/tile_scheduler.h tile_coord), so one wrong quotient sends a tile
to the wrong (batch, head, query block): it must equal `/` for every divisor and dividend the launcher can pass.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import build_host_program

# argv: mode, then divisors. Mode "check": for each divisor, n / d over edge dividends (0, d - 1, d, d + 1, around
# each multiple near 2^31, 2^31 - 1) and 20,000 pseudo-random ones; prints the count of wrong quotients.
# Mode "bump": the same, with each divisor's multiplier off by one (a planted fault the check must see).
PROGRAM = r"""
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include "fast_div.h"
int main(int argc, char** argv) {
  const bool bump = std::strcmp(argv[1], "bump") == 0;
  uint64_t state = 88172645463325252ull;
  auto next = [&] { state ^= state << 13; state ^= state >> 7; state ^= state << 17; return state; };
  long wrong = 0, checked = 0;
  for (int i = 2; i < argc; ++i) {
    const int d = std::atoi(argv[i]);
    flashcore::FastDiv f = flashcore::make_fast_div(d);
    if (bump) f.mul -= 1;
    auto check = [&](int64_t n) {
      if (n < 0 || n > INT32_MAX) return;
      ++checked;
      if (f(static_cast<int>(n)) != static_cast<int>(n / d)) ++wrong;
    };
    const int64_t top = INT32_MAX - INT32_MAX % d;
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{d} - 1, int64_t{d}, int64_t{d} + 1, int64_t{2} * d - 1,
                      int64_t{2} * d, top - 1, top, int64_t{INT32_MAX} - 1, int64_t{INT32_MAX}}) {
      check(n);
    }
    for (int k = 0; k < 20000; ++k) check(static_cast<int64_t>(next() % (uint64_t{1} << 31)));
  }
  std::printf("%ld %ld\n", wrong, checked);
  return 0;
}
"""


@pytest.fixture(scope="module")
def fast_div(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    exe = build_host_program(tmp_path_factory.mktemp("fast_div"), "fast_div", PROGRAM)

    def run(mode: str, divisors: list[int]) -> tuple[int, int]:
        out = subprocess.run([str(exe), mode, *map(str, divisors)], capture_output=True, text=True, check=True)
        wrong, checked = out.stdout.split()
        return int(wrong), int(checked)

    return run


def _divisors() -> list[int]:
    small = list(range(1, 300))  # head counts, split counts, group sizes, query tiles per head
    powers = [v for k in range(9, 31) for v in ((1 << k) - 1, 1 << k, (1 << k) + 1)]
    odd = [641, 3000, 6700417, 99991, 123456789, 1 << 30 | 12345, 2**31 - 1]  # large primes and near the top
    return small + [v for v in powers + odd if v < 2**31]


def test_equals_integer_division_for_every_divisor_class(fast_div) -> None:  # type: ignore[no-untyped-def]
    wrong, checked = fast_div("check", _divisors())
    assert checked > 7_000_000
    assert wrong == 0


def test_a_multiplier_off_by_one_is_caught(fast_div) -> None:  # type: ignore[no-untyped-def]
    # The check above can fail: the same dividends catch a multiplier one too small (divisor 1's is 1, and 0 still
    # gives n back, so it is left out).
    wrong, _ = fast_div("bump", [3, 7, 132, 641, 3000, 123456789])
    assert wrong > 0
