"""Build gate: `make build`, then every kernel compiled for the configured arch, without spills, in the library.

Measures: the make exit status, the ptxas report (build/ptxas.log) and the ELF listing of the library.
Verdicts (pure, below): at least one kernel entry found (none = ERROR), each entry compiled for `arch`,
spill bytes <= `max_spill_bytes` for every function, no wgmma-serialization diagnostics (when forbidden),
and the library carries `arch` code.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.env import find_cuda_tool
from harness.gates.base import Gate, GateContext, SelfTest, margin_le
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.schema import param
from harness.support.ptxas import PtxasReport, list_elf_archs, parse_ptxas

LOG = "logs/build.log"
CUOBJDUMP_LOG = "logs/cuobjdump.log"


@dataclass(frozen=True)
class BuildParams:
    arch: str = param()  # e.g. sm_90a
    max_spill_bytes: int = param(ge=0)  # spill stores + loads allowed per function
    ptxas_log: str = param()  # relative to the repository root
    library: str = param()
    timeout_s: int = param(gt=0)  # for `make build`
    forbid_serialization_warnings: bool = param()
    serialization_codes: tuple[str, ...] = param()  # "wgmma ... serialized" ptxas codes (gates/phases.yaml)
    # "SUBSTRING=BYTES": functions whose mangled name holds SUBSTRING may spill up to BYTES (a measured, documented
    # exception, shown on its check); every other function max_spill_bytes
    spill_allowances: tuple[str, ...] = param()


def allowances(p: BuildParams) -> list[tuple[str, int]]:
    """spill_allowances as (substring, bytes); a malformed entry raises ValueError."""
    out = []
    for item in p.spill_allowances:
        sub, sep, limit = item.rpartition("=")
        if not sep or not sub or not limit.isdigit():
            raise ValueError(f"spill_allowances entry {item!r}: expected SUBSTRING=BYTES")
        out.append((sub, int(limit)))
    return out


def spill_limit(name: str, allowed: list[tuple[str, int]], default: int) -> tuple[int, str]:
    """The spill bytes `name` may have, and the allowance that grants it (empty: the default, max_spill_bytes)."""
    for sub, limit in allowed:
        if sub in name:
            return limit, f"{sub}={limit}"
    return default, ""


def _short(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


# ---- verdicts (pure) ------------------------------------------------------------------------------


def verdict_kernels(report: PtxasReport, p: BuildParams) -> list[Check]:
    """Checks over the parsed ptxas report. Zero kernel entries is an ERROR: nothing was verified."""
    entries = report.entries
    checks = [
        Check("(library)", "kernel_entries", 1, len(entries),
              Status.PASS if entries else Status.ERROR, comparison=">=",
              message=f"{len(entries)} kernel entries in the ptxas report" if entries
              else "no kernel entry found in the ptxas report (is -Xptxas -v on?)")
    ]
    for f in entries:
        ok = f.arch == p.arch
        checks.append(Check(_short(f.name), "arch", None, None, Status.PASS if ok else Status.FAIL,
                            comparison="==", message=f"compiled for {f.arch}" + ("" if ok else f", expected {p.arch}")))
    allowed = allowances(p)
    for f in report.functions:
        limit, allowance = spill_limit(f.name, allowed, p.max_spill_bytes)
        ok = f.spill_bytes <= limit
        checks.append(Check(_short(f.name), "spill_bytes", limit, f.spill_bytes,
                            Status.PASS if ok else Status.FAIL, margin=margin_le(f.spill_bytes, limit),
                            message=f"{f.spill_store_bytes} B spill stores, {f.spill_load_bytes} B spill loads"
                            + (f", {f.registers} registers" if f.registers is not None else "")
                            + (f"; allowance {allowance} (gates/phases.yaml)" if allowance else "")))
    if p.forbid_serialization_warnings:
        bad = [d for d in report.diagnostics if d.code in p.serialization_codes]
        msg = "; ".join(f"{d.code} in {_short(d.function or '?', 40)}" for d in bad[:3]) or "none"
        checks.append(Check("(library)", "serialization_warnings", 0, len(bad),
                            Status.FAIL if bad else Status.PASS, margin=margin_le(len(bad), 0),
                            message=f"wgmma serialization diagnostics ({', '.join(p.serialization_codes)}): {msg}"))
    return checks


def verdict_library(archs: Sequence[str] | None, p: BuildParams, why_unknown: str = "") -> Check:
    """The library's ELF listing must include `arch`. `archs is None`: the listing could not be made (ERROR)."""
    if archs is None:
        return Check("(library)", "library_arch", None, None, Status.ERROR, "==", message=why_unknown)
    ok = p.arch in archs
    found = ", ".join(archs) or "no cubin"
    return Check("(library)", "library_arch", None, None, Status.PASS if ok else Status.FAIL, "==",
                 message=f"library holds {found}" + ("" if ok else f"; {p.arch} missing"))


# ---- measuring ------------------------------------------------------------------------------------


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def _library_archs(ctx: GateContext, library: Path) -> tuple[list[str] | None, str]:
    tool = find_cuda_tool("cuobjdump")
    if tool is None:
        return None, "cuobjdump not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): cannot check the library"
    try:
        proc = subprocess.run([tool, "--list-elf", str(library)], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"cuobjdump --list-elf could not run: {e}"
    (ctx.run_dir / CUOBJDUMP_LOG).write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        return None, f"cuobjdump --list-elf failed (exit {proc.returncode}): {proc.stderr.strip()[:200]}"
    return list_elf_archs(proc.stdout), ""


@register("build")
class BuildGate(Gate):
    Params = BuildParams
    needs_gpu = False
    selftests = (SelfTest("spill", "spill", why="a 51-register cap makes ptxas spill"),)

    def run(self, ctx: GateContext) -> GateResult:
        p: BuildParams = ctx.params
        make = shutil.which("make")
        if make is None:
            return ctx.verdict_only(Status.ERROR, "`make` not found on PATH: cannot build")
        ctx.step("make build")
        log = ctx.run_dir / LOG
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as f:
            try:
                rc = subprocess.run([make, "build"], cwd=ctx.repo_root, stdout=f, stderr=subprocess.STDOUT,
                                    timeout=p.timeout_s).returncode
            except subprocess.TimeoutExpired:
                return ctx.result([], message=f"`make build` ran past {p.timeout_s} s", logs=(LOG,))
        if rc != 0:
            check = Check("(library)", "make_build", 0, rc, Status.FAIL, "==", message=f"exit {rc}: {_tail(log)}")
            return ctx.result([check], message=f"`make build` failed (exit {rc}): {_tail(log, 2)}", logs=(LOG,))
        ptxas_log = ctx.repo_root / p.ptxas_log
        if not ptxas_log.is_file():
            return ctx.result([], message=f"{p.ptxas_log} was not written by `make build`", logs=(LOG,))
        shutil.copyfile(ptxas_log, ctx.run_dir / "logs" / "ptxas.log")
        report = parse_ptxas(ptxas_log.read_text(errors="replace"))
        checks = verdict_kernels(report, p)
        library = ctx.repo_root / p.library
        if not library.is_file():
            checks.append(Check("(library)", "library_arch", None, None, Status.FAIL, "==",
                                message=f"{p.library} was not built"))
        else:
            ctx.step("cuobjdump --list-elf")
            archs, why = _library_archs(ctx, library)
            checks.append(verdict_library(archs, p, why))
        details = {"functions": [f.to_dict() for f in report.functions],
                   "diagnostics": [asdict(d) for d in report.diagnostics]}
        logs = [LOG, "logs/ptxas.log"] + ([CUOBJDUMP_LOG] if (ctx.run_dir / CUOBJDUMP_LOG).exists() else [])
        return ctx.result(checks, details=details, logs=logs)
