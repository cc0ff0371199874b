"""Parsers for the build gate: the `-Xptxas -v` report and the `cuobjdump --list-elf` listing. Pure text in, data out.

A ptxas report looks like (one block per kernel entry, CUDA 12):

    ptxas info    : Compiling entry function '_Z13flash_fwd_...' for 'sm_90a'
    ptxas info    : Function properties for _Z13flash_fwd_...
        0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 168 registers, used 1 barriers, 32768 bytes smem, 400 bytes cmem[0]

and diagnostics such as `ptxas info : (C7515) Potential Performance Loss: wgmma.mma_async instructions are
serialized due to ... in the function '_Z...'` (reported as `info` or `warning` depending on the CUDA version).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>[^']+)'")
_PROPS = re.compile(r"Function properties for (?P<name>\S+)")
_STACK = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<store>\d+) bytes spill stores, (?P<load>\d+) bytes spill loads"
)
_USED = re.compile(r"Used (?P<regs>\d+) registers")
_BARRIERS = re.compile(r"used (?P<n>\d+) barriers")
_SMEM = re.compile(r"(?P<n>\d+) bytes smem")
_CODE = re.compile(r"\((?P<code>C\d{4})\)")
_IN_FUNCTION = re.compile(r"in (?:the )?function '(?P<name>[^']+)'")
_ARCH = re.compile(r"\bsm_\d+[a-z]?\b")


@dataclass
class FunctionInfo:
    """Resources of one compiled function. `entry` is False for a non-inlined device function."""

    name: str
    arch: str | None
    entry: bool = True
    registers: int | None = None
    barriers: int | None = None
    smem_bytes: int | None = None
    stack_bytes: int | None = None
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"spill_bytes": self.spill_bytes}


@dataclass(frozen=True)
class Diagnostic:
    """A ptxas message with a code, e.g. C7515 (wgmma serialized)."""

    code: str
    function: str | None
    text: str


@dataclass
class PtxasReport:
    functions: list[FunctionInfo] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def entries(self) -> list[FunctionInfo]:
        return [f for f in self.functions if f.entry]


def parse_ptxas(text: str) -> PtxasReport:
    """Parse ptxas verbose output (possibly mixed with other build output) into per-function records."""
    report = PtxasReport()
    current: FunctionInfo | None = None  # the entry being compiled
    props_for: FunctionInfo | None = None  # the function the next "bytes stack frame" line belongs to
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = FunctionInfo(name=m["name"], arch=m["arch"])
            report.functions.append(current)
            props_for = None
        elif m := _PROPS.search(line):
            name = m["name"]
            if current is not None and name == current.name:
                props_for = current
            else:
                props_for = FunctionInfo(name=name, arch=current.arch if current else None, entry=False)
                report.functions.append(props_for)
        elif (m := _STACK.search(line)) and props_for is not None:
            props_for.stack_bytes = int(m["stack"])
            props_for.spill_store_bytes = int(m["store"])
            props_for.spill_load_bytes = int(m["load"])
        elif (m := _USED.search(line)) and current is not None:
            current.registers = int(m["regs"])
            if b := _BARRIERS.search(line):
                current.barriers = int(b["n"])
            if s := _SMEM.search(line):
                current.smem_bytes = int(s["n"])
        if m := _CODE.search(line):
            fn = _IN_FUNCTION.search(line)
            report.diagnostics.append(Diagnostic(m["code"], fn["name"] if fn else None, line.strip()))
    return report


def list_elf_archs(listing: str) -> list[str]:
    """SM architectures in `cuobjdump --list-elf` output (`ELF file 1: libflashcore.1.sm_90a.cubin`)."""
    archs: dict[str, None] = {}
    for line in listing.splitlines():
        if "ELF file" in line or ".cubin" in line:
            archs.update(dict.fromkeys(_ARCH.findall(line)))
    return list(archs)
