"""Test-only planted kernel faults (flashcore.attention's debug_fault): the one Python list of kernel/common.h's
`FaultKind` (tests/test_faults.py checks the two agree). The gates' self-tests plant them to prove each gate fails."""

from __future__ import annotations

import enum


class Fault(enum.IntEnum):
    NONE = 0
    TAIL_MASK = 1  # kFaultTailMaskOffByOne: key index seqlen_k (one past the end) stays unmasked
    NONDETERMINISTIC = 2  # kFaultNondeterministic: a racy global accumulation feeds O
    SKIP_ROW = 3  # kFaultSkipFirstRow: the first row of every query tile is never written
    SLOW = 4  # kFaultSlow: correct, but the producer waits after every K/V tile
    HANG = 5  # not a kernel fault: the harness runs a kernel that never finishes first (harness/planted_hang.py)

    @property
    def cli_name(self) -> str:
        """The name `--plant-fault` takes (tail-mask, nondeterministic, skip-row, slow)."""
        return self.name.lower().replace("_", "-")


MAX_FAULT = max(f for f in Fault if f is not Fault.HANG)  # debug_fault's range: the kernel's faults
BY_NAME = {f.cli_name: int(f) for f in Fault if f is not Fault.NONE}
