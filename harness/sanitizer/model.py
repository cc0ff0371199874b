"""What a compute-sanitizer log says, as pure data: one `SanitizerLog` with its `Finding`s (no I/O, no verdict).

The verdict over these facts lives in `verdict.py`; the text -> facts step in `parser.py`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")


@dataclass(frozen=True)
class Finding:
    """One reported problem, or several identical reports merged (`count` of them, differing only in thread).

    `kind` is a short phrase: "invalid global write", "shared-memory race", "divergent barrier",
    "missing mbarrier init", "uninitialized global read", "leak", "cuda api error", ...
    """

    tool: str
    kind: str
    severity: str = "error"  # "error" or "warning" (racecheck reports both)
    kernel: str | None = None  # the function named in the report (an inlined device function where there is one)
    location: str | None = None  # "file:line" (needs -lineinfo)
    thread: str | None = None  # "(x,y,z)" of the first report
    block: str | None = None
    size: int | None = None  # bytes accessed, or leaked
    count: int = 1  # reports merged into this finding (what the tool's summary counts)
    hazard: str | None = None  # racecheck: "RAW"/"WAR"/"WAW" in hazard reports, "write vs read" in analysis reports
    hazards: int | None = None  # racecheck: hazards summed over the merged reports ("[N hazards]")
    detail: str = ""  # the rest: address, the other side of a race, the API error text
    suppressed: bool = False
    suppression: str | None = None  # the justification of the entry that suppressed it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SanitizerLog:
    """The facts of one log. `errors`/`warnings` are the tool's own summary numbers (None: no summary line)."""

    tool: str | None
    tool_note: str = ""  # why `tool` is None (not inferable, or the log contradicts --tool)
    banner: bool = False  # "========= COMPUTE-SANITIZER" seen
    errors: int | None = None
    warnings: int | None = None
    not_printed: int = 0  # "N errors were not printed" (--print-limit)
    leak_bytes: int | None = None  # LEAK SUMMARY (memcheck --leak-check full)
    leak_allocations: int | None = None
    app_failed: bool = False  # "Target application returned an error": the program exited non-zero
    tool_errors: tuple[str, ...] = ()  # the tool's own failures ("Error: Target application terminated ...")
    unknown: tuple[str, ...] = ()  # top-level sanitizer lines the parser does not recognise
    orphans: tuple[str, ...] = ()  # indented (continuation) lines with no report above them
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def leaked_unprinted(self) -> tuple[int, int]:
        """(bytes, allocations) the LEAK SUMMARY counts beyond the leak reports printed above it."""
        leaks = [f for f in self.findings if f.kind == "leak"]
        printed_bytes = sum((f.size or 0) * f.count for f in leaks)
        return (max(0, (self.leak_bytes or 0) - printed_bytes),
                max(0, (self.leak_allocations or 0) - sum(f.count for f in leaks)))

    @property
    def printed(self) -> int:
        """Reports printed in the log (before merging): comparable with errors + warnings."""
        return sum(f.count for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["findings"] = [f.to_dict() for f in self.findings]
        d["tool_errors"], d["unknown"], d["orphans"] = list(self.tool_errors), list(self.unknown), list(self.orphans)
        return d
