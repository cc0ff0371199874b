"""Run one compute-sanitizer tool on one program, save the raw log, and judge it.

The command line always has `--error-exitcode` (else the tool returns the program's own exit code, 0 after a
race) and `--check-exit-code yes`; memcheck adds `--leak-check full --padding N` (without padding, a write past
the end of one allocation lands in the next one and is not reported: memcheck-oob-nopadding.log). The Hopper
checks the installed version offers (bulk copy / TMA, warpgroup MMA) are turned on and recorded.
A timeout kills the tool's whole process group (the program runs as its child).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.sanitizer.model import SanitizerLog
from harness.sanitizer.parser import parse
from harness.sanitizer.suppressions import Suppression, apply
from harness.sanitizer.verdict import Judgement, RunFacts, completed, judge

ERROR_EXITCODE = 86  # returned by compute-sanitizer when it reports errors; no program here exits with it
HOPPER_CHECKS = ("--check-bulk-copy", "--check-warpgroup-mma")  # general options of compute-sanitizer >= 2023.x


@dataclass(frozen=True)
class Options:
    timeout_s: float
    padding: int  # bytes after each allocation (memcheck)
    hopper: Mapping[str, bool] = field(default_factory=dict)  # option -> offered by the installed version
    fail_on_warnings: bool = True
    suppressions: tuple[Suppression, ...] = ()


@dataclass(frozen=True)
class Outcome:
    tool: str
    command: tuple[str, ...]
    log_path: Path
    exit_code: int | None  # None when killed by the timeout
    timed_out: bool
    wall_s: float
    log: SanitizerLog
    judgement: Judgement


def sanitizer_args(tool: str, opts: Options) -> list[str]:
    args = ["--tool", tool, "--error-exitcode", str(ERROR_EXITCODE), "--check-exit-code", "yes"]
    args += [a for opt, on in opts.hopper.items() if on for a in (opt, "yes")]
    if tool == "memcheck":
        args += ["--leak-check", "full", "--padding", str(opts.padding)]
    return args


def probe(sanitizer: str) -> tuple[str, dict[str, bool]]:
    """(version line, which Hopper check options `--help` lists). Raises OSError when the tool cannot run."""
    def out(flag: str) -> str:
        proc = subprocess.run([sanitizer, flag], capture_output=True, text=True, timeout=60)
        return proc.stdout + proc.stderr

    version = next((ln.strip() for ln in out("--version").splitlines() if ln.startswith("Version")), "unknown")
    help_text = out("--help")
    return version, {opt: opt in help_text for opt in HOPPER_CHECKS}


def run_logged(command: Sequence[str], log_path: Path, timeout_s: float) -> tuple[int | None, bool, float]:
    """Run with stdout+stderr into `log_path`: (exit code or None, timed out, wall seconds)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with log_path.open("wb") as f:
        proc = subprocess.Popen(list(command), stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=timeout_s), False, time.monotonic() - t0
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, True, time.monotonic() - t0


def judge_log(tool: str, text: str, opts: Options, exit_code: int | None, timed_out: bool,
              completion: str, completions: int = 1) -> tuple[SanitizerLog, Judgement]:
    """Parse, mark suppressed findings, judge (pure; the gate and the selftest share it). `completions`: how many
    times the program must print `completion` (a batch: once per workload)."""
    log = apply(parse(text, tool), opts.suppressions)
    done = completed(text, completion, completions) if completion else None
    facts = RunFacts(exit_code=exit_code, timed_out=timed_out, timeout_s=opts.timeout_s,
                     error_exitcode=ERROR_EXITCODE, completed=done, completion=completion)
    return log, judge(log, facts, opts.fail_on_warnings)


def check(sanitizer: str, tool: str, target: Sequence[str], log_path: Path, opts: Options,
          completion: str = "", completions: int = 1) -> Outcome:
    """Run `compute-sanitizer <tool args> target...`, keep its log at `log_path`, and judge it.

    `completion`: a line the program prints when it finished (fewer than `completions` of it in a clean log is an
    ERROR)."""
    command = (sanitizer, *sanitizer_args(tool, opts), *target)
    try:
        exit_code, timed_out, wall_s = run_logged(command, log_path, opts.timeout_s)
    except OSError as e:
        log_path.write_text(f"flashcore harness: cannot start {sanitizer}: {e}\n")
        exit_code, timed_out, wall_s = None, False, 0.0
    text = log_path.read_text(errors="replace")
    log, judgement = judge_log(tool, text, opts, exit_code, timed_out, completion, completions)
    return Outcome(tool, command, log_path, exit_code, timed_out, wall_s, log, judgement)
