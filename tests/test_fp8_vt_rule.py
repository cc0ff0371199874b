"""kernel/tile_choice.h use_fp8_vt_smem, the host rule that picks where FP8 V is transposed, compiled as it is (a
host-only inline function) and asked about every shape of the H100 sweep of bench/fp8_v_transpose.py
(fp8-vt-copy-sweep.txt; reports/evidence/ab-index.txt names its archive): it must take the way that was faster
there. Needs a C++ compiler, no GPU."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO, build_host_program

EVIDENCE = REPO / "reports" / "evidence"
SWEEP_NAME = "fp8-vt-copy-sweep.txt"


def sweep_text() -> str:
    """The sweep's file from the archive reports/evidence/ab-index.txt names for it."""
    import tarfile

    index = dict(line.split() for line in (EVIDENCE / "ab-index.txt").read_text().splitlines()
                 if line.strip() and not line.startswith("#"))
    with tarfile.open(EVIDENCE / index[SWEEP_NAME]) as tar:
        member = tar.extractfile(f"reports/evidence/ab/{SWEEP_NAME}")
        assert member is not None
        return member.read().decode()
ROW = re.compile(r"^D(\d+) B\d+ H(\d+)/(\d+) Sq(\d+) Sk(\d+)( causal)?\s.*\bfaster (pass|smem)\b", re.M)

PROGRAM = """
#include <cstdio>
#include "tile_choice.h"
int main() {
  int d; long long sq, sk, group; int causal;
  while (std::scanf("%d %lld %lld %lld %d", &d, &sq, &sk, &group, &causal) == 5) {
    const bool c = causal != 0;
    const bool smem = d == 64    ? flashcore::use_fp8_vt_smem<64>(sq, sk, group, c)
                      : d == 128 ? flashcore::use_fp8_vt_smem<128>(sq, sk, group, c)
                                 : flashcore::use_fp8_vt_smem<256>(sq, sk, group, c);
    std::printf("%s\\n", smem ? "smem" : "pass");
  }
}
"""


@pytest.fixture(scope="module")
def rule(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_host_program(tmp_path_factory.mktemp("rule"), "rule", PROGRAM)


def ask(rule: Path, shapes: list[tuple[int, int, int, int, bool]]) -> list[str]:
    text = "".join(f"{d} {sq} {sk} {g} {int(c)}\n" for d, sq, sk, g, c in shapes)
    return subprocess.run([str(rule)], input=text, capture_output=True, text=True, check=True).stdout.split()


def test_the_rule_takes_the_way_measured_faster_on_every_swept_shape(rule: Path) -> None:
    rows = ROW.findall(sweep_text())
    assert len(rows) == 30  # 3 head dims x (4 row counts x causal or not + 2 decode shapes)
    shapes = [(int(d), int(sq), int(sk), int(hq) // int(hkv), bool(c)) for d, hq, hkv, sq, sk, c, _ in rows]
    assert ask(rule, shapes) == [faster for *_, faster in rows]


def test_causal_counts_the_keys_a_row_sees(rule: Path) -> None:
    """hdim 128, limit 512 rows: 1024 causal rows over as many keys see half of them (smem), over 64K keys nearly
    all (pass); more query rows than keys (bottom-right) see Sk / 2Sq of them."""
    assert ask(rule, [(128, 1024, 1024, 1, True), (128, 1024, 65536, 1, True), (128, 1024, 1024, 1, False),
                      (128, 2048, 512, 1, True), (128, 4096, 512, 1, True)]) == \
        ["smem", "pass", "pass", "smem", "smem"]
