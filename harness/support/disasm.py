"""Pure parsers: which instructions each kernel of a cubin (cuobjdump SASS) or a PTX module contains."""

from __future__ import annotations

import re

_SASS_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
# "/*0a70*/   @!P0 HGMMA.64x128x16.F32.BF16 gdesc[UR4], RZ, !UPT ;" -> HGMMA
_SASS_INSTR = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")
# the same line's whole text up to its ';': "@!P0 MUFU.EX2 R3, R3"
_SASS_TEXT = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
_PTX_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$]+)")
_PTX_INSTR = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.:]*)")


def _in_order(listing: str, entry: re.Pattern[str], instr: re.Pattern[str]) -> dict[str, list[str]]:
    """Kernel name (entry's group 1) -> instr's group 1 of each line after it, in order."""
    kernels: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in listing.splitlines():
        if m := entry.match(line):
            current = kernels.setdefault(m.group(1), [])
        elif current is not None and (m := instr.match(line)):
            current.append(m.group(1))
    return kernels


def _by_kernel(listing: str, entry: re.Pattern[str], instr: re.Pattern[str]) -> dict[str, set[str]]:
    """Kernel name (entry's group 1) -> the instruction names (instr's group 1) of the lines after it."""
    return {name: set(found) for name, found in _in_order(listing, entry, instr).items()}


def sass_opcodes(listing: str) -> dict[str, set[str]]:
    """Kernel (mangled) name -> SASS opcodes (mnemonic before the first '.') in `cuobjdump --dump-sass`."""
    return _by_kernel(listing, _SASS_FUNCTION, _SASS_INSTR)


def sass_instructions(listing: str) -> dict[str, list[str]]:
    """Kernel (mangled) name -> its SASS instructions in order, each as written (predicate, opcode with its modifiers,
    operands), in `cuobjdump --dump-sass`; bench/ring_turn.py reads the order."""
    return _in_order(listing, _SASS_FUNCTION, _SASS_TEXT)


def ptx_instructions(ptx: str) -> dict[str, set[str]]:
    """Kernel (mangled) name -> PTX instruction names with their modifiers (e.g. 'wgmma.mma_async.sync...')."""
    return _by_kernel(ptx, _PTX_ENTRY, _PTX_INSTR)


def has_instruction(found: set[str], wanted: str) -> bool:
    """`wanted` is an opcode (SASS: exact mnemonic) or a PTX prefix ('cp.async.bulk.tensor')."""
    return any(name == wanted or name.startswith(wanted + ".") for name in found)
