"""The verdict over one parsed log and how its run ended (pure). Fail closed: only a complete, clean log passes.

ERROR (no verdict): a timeout, no banner, an unknown tool, the tool's own failure, an unrecognised report, a
continuation line with no report above it, no summary line (truncated log, or the tool died), the program failing
with nothing reported (a crash the tool did not explain), an exit code a clean log cannot have, or the program's
completion line missing (`completed`: a whole line, not one that only starts like it).
FAIL: any report that is not suppressed, that the tool counted but did not print (--print-limit), or a leak the
LEAK SUMMARY counts beyond the leak reports printed, whatever the exit code: a race with exit code 0 still fails.
The log decides, not the exit code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.results import Status
from harness.sanitizer.model import Finding, SanitizerLog
from harness.sanitizer.parser import PREFIX

SUMMARY_LINE = {"racecheck": "RACECHECK SUMMARY", "memcheck": "ERROR SUMMARY", "synccheck": "ERROR SUMMARY",
                "initcheck": "ERROR SUMMARY"}


@dataclass(frozen=True)
class RunFacts:
    """How the run ended; the defaults describe a saved log judged offline (nothing known)."""

    exit_code: int | None = None
    timed_out: bool = False
    timeout_s: float | None = None
    error_exitcode: int | None = None  # what --error-exitcode was set to
    completed: bool | None = None  # the program's completion line is in the log (None: not checked)
    completion: str = ""  # that line, for the message


@dataclass(frozen=True)
class Judgement:
    status: Status
    reason: str
    failing: int | None = None  # reports that fail the run (None: no verdict)

    def to_dict(self) -> dict[str, object]:
        return {"verdict": self.status.value, "reason": self.reason, "failing": self.failing}


def completed(text: str, completion: str, times: int = 1) -> bool:
    """Whether the program printed its completion line (at least `times` times: once per workload of a batch): a
    line of its own output (not the tool's) that is `completion`, or `completion` followed by space-separated
    `key=value` fields (the driver's RESULT line). A line that only starts like it (`RESULT status=okay`), holds it
    after other text, or goes on with anything else is not: a program that died mid-print or printed the words
    elsewhere did not complete."""
    whole = re.compile(re.escape(completion) + r"(?: [\w.]+=\S*)*")
    return sum(1 for line in text.splitlines()
               if not PREFIX.match(line.rstrip("\r")) and whole.fullmatch(line.rstrip())) >= times


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _short(kernel: str | None) -> str:
    return (kernel or "?").split("(", 1)[0]


def describe(f: Finding) -> str:
    """`invalid global write in oob_write at planted.cu:22 (x3)`."""
    text = f.kind if f.severity == "error" else f"{f.kind} (warning)"
    if f.kernel:
        text += f" in {_short(f.kernel)}"
    if f.location:
        text += f" at {f.location}"
    if f.hazard:
        text += f", {f.hazard}"
    if f.kind == "leak" and f.size is not None:
        text += f", {f.size} bytes"
    return text + (f" (x{f.count})" if f.count > 1 else "")


def _no_verdict(log: SanitizerLog, run: RunFacts) -> str | None:
    """Why this log cannot be judged at all, or None."""
    if run.timed_out:
        return f"ran past its {run.timeout_s:g} s timeout and was killed: no verdict" if run.timeout_s else \
            "timed out and was killed: no verdict"
    if not log.banner:
        return "not a compute-sanitizer log (no COMPUTE-SANITIZER banner): the tool did not start or the log is empty"
    if log.tool is None:
        return log.tool_note or "unknown tool"
    if log.tool_errors:
        return f"compute-sanitizer itself failed: {log.tool_errors[0]}"
    if log.unknown:
        return f"unrecognised sanitizer line {log.unknown[0]!r}: the parser cannot judge this log"
    if log.orphans:
        return (f"continuation line {log.orphans[0]!r} with no report above it: the parser cannot tell what it "
                "belongs to")
    if log.errors is None or log.warnings is None:
        return (f"no {SUMMARY_LINE[log.tool]} line: the log is truncated or the tool died before the end"
                + (f" (exit code {run.exit_code})" if run.exit_code is not None else ""))
    if run.exit_code is not None and run.exit_code < 0:
        return f"compute-sanitizer was killed by signal {-run.exit_code}"
    return None


def judge(log: SanitizerLog, run: RunFacts | None = None, fail_on_warnings: bool = True) -> Judgement:
    run = run or RunFacts()
    why = _no_verdict(log, run)
    if why is not None:
        return Judgement(Status.ERROR, why)
    assert log.errors is not None and log.warnings is not None  # checked by _no_verdict
    counted = log.errors + log.warnings
    unprinted = max(0, counted - log.printed)
    leaked_bytes, leaked_allocations = log.leaked_unprinted
    leaked = max(leaked_allocations, 1 if leaked_bytes else 0)
    bad = [f for f in log.findings if not f.suppressed and (f.severity == "error" or fail_on_warnings)]
    failing = sum(f.count for f in bad) + unprinted + leaked
    summary = _plural(log.errors, "error")
    if log.tool == "racecheck":
        summary += f", {_plural(log.warnings, 'warning')}"
    if failing:
        shown = "; ".join(describe(f) for f in bad[:3]) + (f" (+{len(bad) - 3} more)" if len(bad) > 3 else "")
        if unprinted:
            shown += f"{'; ' if bad else ''}{unprinted} more counted but not printed (--print-limit): not suppressible"
        if leaked:
            shown += (f"{'; ' if bad or unprinted else ''}LEAK SUMMARY: {log.leak_bytes} bytes leaked in "
                      f"{log.leak_allocations} allocations, {leaked_bytes} bytes in {leaked_allocations} of them "
                      "without a printed leak report: not suppressible")
        note = " (exit code 0: the exit code alone would have passed it)" if run.exit_code == 0 else ""
        if log.printed > counted:
            note += f"; the log prints {log.printed} reports but its summary counts {counted}"
        return Judgement(Status.FAIL, f"{summary}: {shown}{note}", failing)
    suppressed = sum(f.count for f in log.findings if f.suppressed)
    if log.printed > counted:
        return Judgement(Status.ERROR, f"inconsistent log: {log.printed} reports printed, summary counts {counted}")
    if log.app_failed:
        extra = "; suppressed reports cannot make a failed run pass" if suppressed else ""
        return Judgement(Status.ERROR, "the program exited with an error and the tool reported nothing that explains "
                         f"it (a crash it does not check, e.g. an illegal instruction){extra}")
    allowed = {0} | ({run.error_exitcode} if counted and run.error_exitcode is not None else set())
    if run.exit_code is not None and run.exit_code not in allowed:
        return Judgement(Status.ERROR, f"exit code {run.exit_code} with a log that reports {summary}")
    if run.completed is False:
        return Judgement(Status.ERROR, f"the program's completion line {run.completion!r} is missing: it may not "
                         "have run (a sanitizer can print a clean summary without running anything)")
    if suppressed:
        return Judgement(Status.PASS, f"{summary}, all {suppressed} suppressed by reviewed entries", 0)
    ignored = f" ({_plural(log.warnings, 'warning')} not failing)" if log.warnings and not fail_on_warnings else ""
    return Judgement(Status.PASS, f"{summary}{ignored}", 0)
