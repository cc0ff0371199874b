"""bench/sass_stalls.py's summary of Nsight Compute's per-instruction stall samples, on a synthetic source-page CSV
whose loop, barriers and samples are known. CPU only: real CSVs come from ncu on an H100 (docs/perf-notes.md 8.27)."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest
from conftest import load_bench

REPO = Path(__file__).resolve().parent.parent
ss = load_bench("sass_stalls")

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed", "stall_wait",
          "stall_barrier", "stall_wait (Not Issued)"]
# (source, samples, executed): a prologue, then a loop of 10 whose turn (BAR.SYNC .. BAR.ARV) holds 2 of its 3 MUFUs.
PROGRAM = [
    ("LDC R1, c[0x0][0x28]", 5, 1),
    ("WARPGROUP.DEPBAR.LE gsb0, 0x1", 40, 10),
    ("FMNMX R2, R3, R4, !PT", 10, 10),
    ("MUFU.EX2 R5, R5", 10, 10),
    ("BAR.SYNC.DEFER_BLOCKING R6, 0x100", 20, 10),
    ("MUFU.EX2 R7, R7", 15, 10),
    ("@!P0 MUFU.EX2 R8, R8", 15, 10),
    ("BAR.ARV R9, 0x100", 5, 10),
    ("FADD R10, R10, R11", 5, 10),
    ("EXIT", 1, 1),
]


def write_csv(path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "void k()"])
        w.writerow(HEADER)
        for i, (src, samples, executed) in enumerate(PROGRAM):
            barrier = samples if src.startswith("BAR.SYNC") else 0
            w.writerow([f"0x{0x1000 + 16 * i:x}", f"      {src}", samples, executed, samples - barrier, barrier, 99])


def test_summary_finds_the_loop_and_the_turn(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sass.csv"
    write_csv(path)
    monkeypatch.setattr(sys, "argv", ["sass_stalls.py", str(path)])
    assert ss.main() == 0
    out = capsys.readouterr().out
    assert "10 instructions, 126 samples" in out
    assert "stall_wait" in out and "stall_wait (Not Issued)" not in out  # issued reasons only
    assert "hottest loop: instructions 1-8, executed 10 times each, 95.2 % of samples" in out
    assert "BAR.SYNC at 4 -> BAR.ARV at 7: 2 MUFU between (of 3 in the loop)" in out  # a predicated MUFU counts


def test_opcode_skips_the_predicate() -> None:
    assert ss.opcode("@!P0  BRA 0x7f") == "BRA"
    assert ss.opcode("  MUFU.EX2 R1, R1") == "MUFU.EX2"
    assert ss.opcode("") == ""


def test_csv_without_the_source_header_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "details.csv"
    path.write_text('"ID","Kernel Name"\n"0","k"\n')
    with pytest.raises(SystemExit, match="no 'Address' header row"):
        ss.load(str(path))
