"""compute-sanitizer log text -> `SanitizerLog` (pure: no I/O, no verdict).

The tool prefixes its own lines with `=========`; a report starts with an unindented line (its header) and
continues with indented ones until a bare prefix line. Anything without the prefix is the program's output.
A top-level line the parser does not recognise is kept in `unknown`, and an indented line with no report above it
in `orphans`, so the verdict can refuse to judge: neither is ever dropped. Summary lines match as whole lines: a
line that only starts like one (`ERROR SUMMARY: 0 errors, and more`) is not a summary.
Formats follow compute-sanitizer 2025.3 (tests/fixtures/sanitizer/) and the older
`at 0xPC in file:line:function` form of racecheck.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from harness.sanitizer.model import TOOLS, Finding, SanitizerLog

PREFIX = re.compile(r"^={9}(?: (.*))?$")
_N = r"([\d,]+)"

# ---- summaries and tool-level lines ----------------------------------------------------------------
BANNER = "COMPUTE-SANITIZER"
NOT_PRINTED = re.compile(rf"^ERROR SUMMARY: {_N} errors? were not printed\. Use --print-limit option to adjust the "
                         r"number of printed errors\s*$")
ERROR_SUMMARY = re.compile(rf"^ERROR SUMMARY: {_N} errors?\s*$")
RACE_SUMMARY = re.compile(rf"^RACECHECK SUMMARY: {_N} hazards? displayed \({_N} errors?, {_N} warnings?\)\s*$")
LEAK_SUMMARY = re.compile(rf"^LEAK SUMMARY: {_N} bytes? leaked in {_N} allocations?\s*$")
APP_FAILED = "Target application returned an error"
TOOL_ERROR = re.compile(r"^(Error: |Internal Sanitizer Error|.*compute-sanitizer timed-out)")

# ---- report headers --------------------------------------------------------------------------------
ACCESS = re.compile(
    rf"^(?P<what>Invalid|Misaligned|Out-of-range|Uninitialized) __(?P<space>\w+?)__ (?:memory )?"
    rf"(?P<op>read|write|atomic|access)\w* of size {_N} bytes?"
)
LEAK = re.compile(rf"^Leaked {_N} bytes? at (0x[0-9a-fA-F]+)(.*)")
API_ERROR = re.compile(r'^Program hit (\S+) \(error (\d+)\) due to "(.*)" on CUDA API call to (\w+)')
BARRIER = re.compile(r"^Barrier error detected\. ?(.*)")
RACE = re.compile(r"^(?P<sev>Error|Warning|ERROR|WARNING): Race reported between (?P<acc>\w+) access at (?P<where>.+)$")
HAZARD = re.compile(
    r"^(?P<sev>Error|Warning|ERROR|WARNING): (?:\(.*?\) )?Potential (?P<type>RAW|WAR|WAW) hazard detected at "
    r"(?P<where>__\w+__ 0x[0-9a-fA-F]+) in block \((?P<block>[\d, ]+)\)"
)
HARDWARE = re.compile(
    r"^(?:Warp |Lane |Device )?(Illegal Instruction|Illegal Address|Misaligned Address|Out-of-range Address|"
    r"Invalid PC|Invalid Address Space|Hardware Stack Overflow|Malloc/Free [Ee]rror|Cuda Barrier error|"
    r"Misaligned Shared or Local Address|Out-of-range Shared or Local Address)\b(.*)"
)

# ---- continuation lines ----------------------------------------------------------------------------
# `func(args)+0xOFF in file.cu:22` (2023+) or `0xPC in /path/file.cu:22:func(args)` (older racecheck)
_WHERE_NEW = re.compile(r"^(?P<func>.+?)(?:\+0x[0-9a-fA-F]+)?(?: in (?P<loc>\S+:\d+))?$")
_WHERE_OLD = re.compile(r"^0x[0-9a-fA-F]+ in (?P<loc>[^:\s]+:\d+):(?P<func>.+)$")
AT = re.compile(r"^at (.+)$")
THREAD = re.compile(r"by thread \(([\d, ]+)\) in block \(([\d, ]+)\)")
DEVICE_FRAME = re.compile(r"^Device Frame: ?(.+)$")
RACE_MORE = re.compile(r"^and (?P<acc>\w+) access at (?P<where>.+?)(?: \[(?P<n>[\d,]+) hazards?\])?$")
HAZARD_SIDE = re.compile(r"^(?P<acc>Read|Write) Thread \((?P<thread>[\d, ]+)\) at (?P<where>.+)$")
HAZARD_COUNT = re.compile(rf"\[{_N} hazards?\]\s*$")
SKIP = ("Saved host backtrace", "Host Frame:")
# A host frame of a leak's allocation backtrace: "Host Frame: main [0x8e09] in planted". The leak's location is the
# first frame that is not the CUDA runtime's or driver's own (cudaMalloc, its template wrapper, cuMemAlloc).
HOST_FRAME = re.compile(r"^Host Frame: ?(?P<func>.+?) \[0x[0-9a-fA-F]+\] in (?P<module>\S+)$")
CUDA_API = re.compile(r"^(?:\w+ )?(?:cuda|cu)[A-Z]\w*")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _tuple(text: str) -> str:
    return "(" + ",".join(p.strip() for p in text.split(",")) + ")"


def where(text: str) -> tuple[str | None, str | None]:
    """(function, "file:line") of a code position in either format; (text, None) when it has neither."""
    text = HAZARD_COUNT.sub("", text).strip()
    m = _WHERE_OLD.match(text) or _WHERE_NEW.match(text)
    if not text or m is None:
        return text or None, None
    return m["func"].strip(), m["loc"]


@dataclass
class _Report:
    """A report being read: its header fields, then what its continuation lines add."""

    tool: str | None
    kind: str
    severity: str = "error"
    size: int | None = None
    hazard: str | None = None
    kernel: str | None = None
    location: str | None = None
    outer_kernel: str | None = None  # outermost "Device Frame" (the __global__ function when inlined)
    thread: str | None = None
    block: str | None = None
    hazards: int | None = None
    first_access: str = ""
    other_access: dict[str, None] = field(default_factory=dict)
    others: dict[str, None] = field(default_factory=dict)  # the other side(s) of a race: "Read at mma.h:34"
    detail: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        if self.kind == "leak" and self.location is None and (m := HOST_FRAME.match(line)):
            if not CUDA_API.match(m["func"]):
                self.location = f"{m['func']} in {m['module']}"
            return
        if line.startswith(SKIP):
            return
        if (m := AT.match(line)) and self.kernel is None:
            self.kernel, self.location = where(m[1])
        elif m := DEVICE_FRAME.match(line):
            self.outer_kernel = where(m[1])[0]
        elif m := RACE_MORE.match(line):
            self._other(m["acc"], m["where"], m["n"])
        elif m := HAZARD_SIDE.match(line):
            func, loc = where(m["where"])
            if self.kernel is None:
                self.kernel, self.location, self.thread = func, loc, _tuple(m["thread"])
            else:
                self.others[f"{m['acc']} at {loc or func}"] = None
        elif m := THREAD.search(line):
            if self.thread is None:
                self.thread, self.block = _tuple(m[1]), _tuple(m[2])
        elif len(self.detail) < 2:
            self.detail.append(line)

    def _other(self, access: str, text: str, n: str | None) -> None:
        func, loc = where(text)
        self.others[f"{access} at {loc or func}"] = None
        self.other_access[access.lower()] = None
        self.hazard = f"{self.first_access.lower()} vs {'/'.join(self.other_access)}"
        if n is not None:
            self.hazards = (self.hazards or 0) + _int(n)

    def finding(self) -> Finding:
        detail = "; ".join(self.others) if self.others else "; ".join(self.detail)
        if self.outer_kernel and self.kernel:  # inlined: say where inside the kernel it happened
            detail = f"in {self.kernel}" + (f"; {detail}" if detail else "")
        return Finding(tool=self.tool or "?", kind=self.kind, severity=self.severity,
                       kernel=self.outer_kernel or self.kernel, location=self.location, thread=self.thread,
                       block=self.block, size=self.size, hazard=self.hazard, hazards=self.hazards, detail=detail)


def _header(line: str) -> _Report | None:
    """A report started by this top-level line, or None when it starts none."""
    if m := ACCESS.match(line):
        tool = "initcheck" if m["what"] == "Uninitialized" else "memcheck"
        return _Report(tool, f"{m['what'].lower()} {m['space']} {m['op']}", size=_int(m[4]))
    if m := LEAK.match(line):
        return _Report("memcheck", "leak", size=_int(m[1]), detail=[f"at {m[2]}{m[3]}"])
    if m := API_ERROR.match(line):
        return _Report("memcheck", "cuda api error", detail=[f"{m[4]}: {m[1]} ({m[3]})"])
    if m := BARRIER.match(line):
        what = m[1].rstrip(".")
        kind = ("divergent barrier" if "Divergent" in what else "missing mbarrier init" if "Missing init" in what
                else f"barrier error: {what.lower()}")
        return _Report("synccheck", kind, detail=[what] if kind.startswith("divergent") else [])
    if m := RACE.match(line):
        report = _Report("racecheck", "shared-memory race", severity=m["sev"].lower(), first_access=m["acc"])
        report.kernel, report.location = where(m["where"])
        if n := HAZARD_COUNT.search(m["where"]):
            report.hazards = _int(n[1])
        return report
    if m := HAZARD.match(line):
        return _Report("racecheck", "shared-memory race", severity=m["sev"].lower(), hazard=m["type"],
                       block=_tuple(m["block"]), detail=[m["where"]])
    if m := HARDWARE.match(line):
        return _Report(None, m[1].lower(), detail=[m[2].strip()] if m[2].strip() else [])
    return None


def _merge(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """Merge reports that differ only in thread, block or address; `count` says how many were merged."""
    merged: dict[tuple[object, ...], Finding] = {}
    for f in findings:
        race_sides = f.detail if f.kind == "shared-memory race" else ""
        key = (f.tool, f.kind, f.severity, f.kernel, f.location, f.size, f.hazard, race_sides)
        if key in merged:
            old = merged[key]
            hazards = None if old.hazards is None and f.hazards is None else (old.hazards or 0) + (f.hazards or 0)
            merged[key] = replace(old, count=old.count + 1, hazards=hazards)
        else:
            merged[key] = f
    return tuple(merged.values())


def _evidence(reports: list[_Report], race_summary: bool, leak_summary: bool) -> set[str]:
    """The tools this log can only have come from."""
    found = {r.tool for r in reports if r.tool is not None}
    if race_summary:
        found.add("racecheck")
    if leak_summary:
        found.add("memcheck")
    return {t for t in found if t in TOOLS}


def _resolve_tool(given: str | None, evidence: set[str]) -> tuple[str | None, str]:
    if len(evidence) > 1:
        return None, f"the log holds reports of several tools ({', '.join(sorted(evidence))})"
    if given is not None:
        if evidence and given not in evidence:
            return None, f"the log was written by {evidence.pop()}, not {given}"
        return given, ""
    if evidence:
        return evidence.pop(), ""
    return None, ("cannot tell which tool wrote this log (clean memcheck, synccheck and initcheck logs print the "
                  "same summary): pass --tool")


def parse(text: str, tool: str | None = None) -> SanitizerLog:
    """Parse one log. `tool` (when known) is checked against the log; otherwise it is inferred."""
    if tool is not None and tool not in TOOLS:
        raise ValueError(f"unknown sanitizer tool {tool!r}; known: {', '.join(TOOLS)}")
    banner = app_failed = False
    error_summary: int | None = None
    race: tuple[int, int] | None = None
    leak: tuple[int, int] | None = None
    not_printed = 0
    tool_errors: list[str] = []
    unknown: list[str] = []
    orphans: list[str] = []
    reports: list[_Report] = []
    current: _Report | None = None
    for raw in text.splitlines():
        m = PREFIX.match(raw.rstrip("\r"))
        if m is None:
            continue  # the program's own output
        body = (m[1] or "").rstrip()
        if not body.strip():
            current = None
            continue
        if body[0].isspace():
            if current is not None:
                current.add(body.strip())
            else:
                orphans.append(body.strip())
            continue
        current = None
        if body == BANNER:
            banner = True
        elif n := NOT_PRINTED.match(body):
            not_printed += _int(n[1])
        elif n := ERROR_SUMMARY.match(body):
            error_summary = (error_summary or 0) + _int(n[1])
        elif n := RACE_SUMMARY.match(body):
            race = (_int(n[2]) + (race or (0, 0))[0], _int(n[3]) + (race or (0, 0))[1])
        elif n := LEAK_SUMMARY.match(body):
            leak = (_int(n[1]), _int(n[2]))
        elif body == APP_FAILED:
            app_failed = True
        elif (current := _header(body)) is not None:
            reports.append(current)
        elif TOOL_ERROR.match(body):
            tool_errors.append(body)
        else:
            unknown.append(body)
    resolved, note = _resolve_tool(tool, _evidence(reports, race is not None, leak is not None))
    if resolved == "racecheck":
        errors, warnings = race if race is not None else (None, None)
    else:
        errors, warnings = error_summary, (0 if error_summary is not None else None)
    findings = [replace(r.finding(), tool=resolved or r.tool or "?") for r in reports]
    return SanitizerLog(
        tool=resolved, tool_note=note, banner=banner, errors=errors, warnings=warnings, not_printed=not_printed,
        leak_bytes=leak[0] if leak else None, leak_allocations=leak[1] if leak else None, app_failed=app_failed,
        tool_errors=tuple(tool_errors), unknown=tuple(unknown), orphans=tuple(orphans), findings=_merge(findings),
    )
