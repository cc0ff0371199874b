"""Structure gates: the kernel that claims a phase must contain that phase's instructions.

phase 2 (structure-tma): TMA loads (SASS UTMALDG / PTX cp.async.bulk.tensor) in the attention kernel;
phase 3 (structure-wgmma): HGMMA (PTX wgmma.mma_async) present and no HMMA (PTX mma.sync) in it.
SASS from `cuobjdump --dump-sass` when the tool exists; otherwise the PTX from `make ptx`, said in each check.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.env import find_cuda_tool
from harness.gates.base import Gate, GateContext
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.schema import param
from harness.support.disasm import has_instruction, ptx_instructions, sass_opcodes

# What the gate judged, per kernel: its SASS opcodes. The whole listing is 200 MB and more at 150 kernels (it was
# written twice per run, once per structure gate); `cuobjdump --dump-sass build/libflashcore.so` prints it again.
LOG = "logs/sass-opcodes.txt"
# The same opcodes with the library's sha256, which the run's other structure gate reads instead of disassembling the
# library again: the disassembly of 152 kernels took 24 s alone and 75 s beside the sanitizer in the main job's
# stage of many workers (phase7-h200-4134405); the shard placement keeps the two structure gates in one worker.
CACHE = "logs/sass-opcodes.json"


def library_opcodes(cuobjdump: str, library: Path, run_dir: Path, timeout_s: int) -> tuple[dict[str, set[str]], str,
                                                                                              int, bool]:
    """Per kernel its SASS opcodes, cuobjdump's stderr and exit code, and whether they came from this run's cache
    (only for the same library bytes)."""
    digest = hashlib.sha256(library.read_bytes()).hexdigest()
    cache = run_dir / CACHE
    try:
        data = json.loads(cache.read_text())
        if data["library_sha256"] == digest:
            return {name: set(ops) for name, ops in data["opcodes"].items()}, "", 0, True
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # none yet, or not ours to trust: disassemble
    proc = subprocess.run([cuobjdump, "--dump-sass", str(library)], capture_output=True, text=True, timeout=timeout_s)
    opcodes = sass_opcodes(proc.stdout)
    if proc.returncode == 0:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")  # two gates of one run directory at once never share it
        tmp.write_text(json.dumps({"library_sha256": digest,
                                   "opcodes": {name: sorted(ops) for name, ops in opcodes.items()}}))
        tmp.replace(cache)
    return opcodes, proc.stderr, proc.returncode, False


def opcode_summary(opcodes: dict[str, set[str]], library: str) -> str:
    """One line per kernel (sass_opcodes of a `cuobjdump --dump-sass` listing): its mangled name, its opcodes sorted."""
    head = f"# SASS opcodes per kernel of {library} (the full listing: cuobjdump --dump-sass {library})\n"
    return head + "".join(f"{name}: {' '.join(sorted(ops))}\n" for name, ops in sorted(opcodes.items()))


@dataclass(frozen=True)
class StructureParams:
    library: str = param()  # the built library (SASS source)
    ptx: str = param()  # `make ptx` output, used when cuobjdump is absent
    kernel_pattern: str = param()  # regex over mangled kernel names: the kernels that claim the phase
    sass_required: tuple[str, ...] = param()
    ptx_required: tuple[str, ...] = param()
    timeout_s: int = param(gt=0)
    sass_forbidden: tuple[str, ...] = param(default=())
    ptx_forbidden: tuple[str, ...] = param(default=())


def verdict_structure(kernels: dict[str, set[str]], pattern: str, required: tuple[str, ...],
                      forbidden: tuple[str, ...], source: str) -> list[Check]:
    """Per matching kernel: every required instruction present (an entry "A|B": one of them, e.g. HGMMA for 16-bit
    inputs or QGMMA for FP8), every forbidden one absent. No kernel matching `pattern` is an ERROR (nothing was
    checked)."""
    matched = {name: ops for name, ops in kernels.items() if re.search(pattern, name)}
    if not matched:
        return [Check("(library)", "kernels_matched", 1, 0, Status.ERROR, ">=",
                      message=f"no kernel matches {pattern!r} in the {source} ({len(kernels)} kernels)")]
    checks = []
    for name, ops in sorted(matched.items()):
        label = kernel_label(name, pattern)
        for instr in required:
            found = [alt for alt in instr.split("|") if has_instruction(ops, alt)]
            which = ", ".join(found) + " " if "|" in instr else ""  # one of several: name the one present
            checks.append(Check(label, f"has {instr}", None, None, Status.PASS if found else Status.FAIL, "==",
                                message=f"{source}: {instr} {which + 'present' if found else 'MISSING'}"))
        for instr in forbidden:
            bad = has_instruction(ops, instr)
            checks.append(Check(label, f"no {instr}", None, None, Status.FAIL if bad else Status.PASS, "==",
                                message=f"{source}: {instr} {'FOUND' if bad else 'absent'}"))
    return checks


def kernel_label(name: str, pattern: str, width: int = 80) -> str:
    """A mangled kernel name short enough for a table, from the match of `pattern` on: the template arguments that
    tell the instantiations apart (head dim, point, element type) stay visible."""
    if len(name) <= width:
        return name
    m = re.search(pattern, name)
    start = m.start() if m else 0
    return ("..." if start else "") + name[start:start + width - 6] + "..."


class StructureGate(Gate):
    Params = StructureParams
    needs_gpu = False

    def run(self, ctx: GateContext) -> GateResult:
        p: StructureParams = ctx.params
        log = ctx.run_dir / LOG
        log.parent.mkdir(parents=True, exist_ok=True)
        cuobjdump = find_cuda_tool("cuobjdump")
        library = ctx.repo_root / p.library
        if cuobjdump is not None and library.is_file():
            ctx.step("cuobjdump --dump-sass")
            opcodes, stderr, rc, cached = library_opcodes(cuobjdump, library, ctx.run_dir, p.timeout_s)
            log.write_text(opcode_summary(opcodes, p.library) + stderr)
            if rc != 0:
                return ctx.verdict_only(Status.ERROR, f"cuobjdump --dump-sass failed (exit {rc})")
            source = "SASS (this run's earlier disassembly)" if cached else "SASS"
            checks = verdict_structure(opcodes, p.kernel_pattern, p.sass_required, p.sass_forbidden, source)
            return ctx.result(checks, logs=(LOG,))
        ctx.step("make ptx (no cuobjdump: PTX fallback)")
        proc = subprocess.run(["make", "-s", "ptx"], cwd=ctx.repo_root, capture_output=True, text=True,
                              timeout=p.timeout_s)
        ptx = Path(ctx.repo_root / p.ptx)
        if proc.returncode != 0 or not ptx.is_file():
            log.write_text(proc.stdout + proc.stderr)
            return ctx.verdict_only(Status.ERROR, f"no cuobjdump and `make ptx` failed (exit {proc.returncode})")
        text = ptx.read_text(errors="replace")
        log.write_text(text)
        checks = verdict_structure(ptx_instructions(text), p.kernel_pattern, p.ptx_required, p.ptx_forbidden,
                                   "PTX (cuobjdump not found)")
        return ctx.result(checks, logs=(LOG,))


@register("structure-tma")
class StructureTmaGate(StructureGate):
    """Phase 2: the attention kernel loads through the tensor memory accelerator."""

    selftest_none = "the phase-1 kernel's real PTX fails it: tests/test_gates_structure.py"


@register("structure-wgmma")
class StructureWgmmaGate(StructureGate):
    """Phase 3: the attention kernel's GEMMs are warpgroup MMAs, with no mma.sync left."""

    selftest_none = ("the phase-1 kernel's real PTX fails it: tests/test_gates_structure.py "
                     "test_phase1_kernel_claimed_as_phase3_fails")
