"""bench/ring_turn.py's count of exponentials inside each consumer turn, on a synthetic cuobjdump listing whose
turns are known. CPU only: real listings come from cuobjdump on a built library (docs/perf-notes.md 8.43)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import load_bench

rt = load_bench("ring_turn")


def listing(name: str, body: list[str]) -> list[str]:
    lines = [f"\t\tFunction : {name}", "\t.headerflags\t@\"EF_CUDA_SM90\""]
    for i, text in enumerate(body):
        lines.append(f"        /*{16 * i:04x}*/                   {text} ;                /* 0x000fe20000000f00 */")
        lines.append("                                                                  /* 0x000fe20000000f00 */")
    return lines


# Two turns: the first holds 2 of its step's 4 exponentials (a predicated one counts), the second none.
KERNEL = [
    "MUFU.EX2 R1, R1",
    "BAR.SYNC.DEFER_BLOCKING R6, 0x100",
    "MUFU.EX2 R2, R2",
    "@!P0 MUFU.EX2 R3, R3",
    "BAR.ARV R9, 0x100",
    "MUFU.EX2 R4, R4",
    "MUFU.EX2 R5, R5",
    "BAR.SYNC.DEFER_BLOCKING R6, 0x100",
    "BAR.ARV R9, 0x100",
    "MUFU.EX2 R4, R4",
    "EXIT",
]


def test_turns_count_inside_and_after() -> None:
    code = rt.sass_instructions("\n".join(listing("k_fp8", KERNEL)))["k_fp8"]
    assert code[3] == "@!P0 MUFU.EX2 R3, R3"
    assert rt.turns(code) == [(1, 2, 2), (7, 0, 1)]


def test_a_turn_without_arrival_runs_to_the_next_sync() -> None:
    assert rt.turns(["BAR.SYNC R1, 0x100", "MUFU.EX2 R2, R2", "MUFU.RCP R3, R3"]) == [(0, 1, 0)]


def test_main_filters_kernels_and_refuses_no_match(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.sass"
    path.write_text("\n".join(listing("k_fp8_d128", KERNEL) + listing("k_bf16_d64", ["EXIT"])) + "\n")
    monkeypatch.setattr(sys, "argv", ["ring_turn.py", str(path), "--kernel", "fp8"])
    assert rt.main() == 0
    out = capsys.readouterr().out
    assert "k_fp8_d128: 11 instructions, 2 turns" in out and "k_bf16_d64" not in out
    assert "BAR.SYNC at     1:   2 MUFU.EX2 in the turn,   2 after it" in out
    monkeypatch.setattr(sys, "argv", ["ring_turn.py", str(path), "--kernel", "fp16"])
    assert rt.main() == 1
    assert "no kernel matches" in capsys.readouterr().err
