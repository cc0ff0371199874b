"""The planted-fault numbers: flashcore/faults.py is kernel/common.h's FaultKind, name for name, value for value."""

from __future__ import annotations

import re
from pathlib import Path

from flashcore import api
from flashcore.faults import BY_NAME, MAX_FAULT, Fault
from harness import cli

REPO = Path(__file__).resolve().parent.parent


def test_python_and_cxx_fault_lists_agree() -> None:
    text = (REPO / "kernel" / "common.h").read_text()
    cxx = {name: int(v) for name, v in re.findall(r"\bkFault(\w+)\s*=\s*(\d+)", text)}
    assert sorted(cxx.values()) == [int(f) for f in Fault if f is not Fault.HANG]  # the hang is harness-side
    pairs = {"None": Fault.NONE, "TailMaskOffByOne": Fault.TAIL_MASK, "Nondeterministic": Fault.NONDETERMINISTIC,
             "SkipFirstRow": Fault.SKIP_ROW, "Slow": Fault.SLOW}
    assert {k: int(v) for k, v in pairs.items()} == cxx


def test_every_user_of_the_numbers_reads_them_from_one_place() -> None:
    assert api.MAX_FAULT == MAX_FAULT == 4
    assert cli.FAULTS == BY_NAME == {"tail-mask": 1, "nondeterministic": 2, "skip-row": 3, "slow": 4, "hang": 5}


def test_the_kernel_refuses_the_harness_side_hang() -> None:
    """debug_fault=5 never reaches the kernel (which has no such fault): the hang is planted by the gate worker."""
    assert Fault.HANG > MAX_FAULT and "kFaultHang" not in (REPO / "kernel" / "common.h").read_text()
