"""Reviewed suppressions (gates/sanitizer-suppressions.yaml): match criteria plus a written justification.

A suppressed finding is still shown (marked, with its justification); it only stops failing the gate.
Reports the tool counted but did not print can never be suppressed (see verdict.py). An entry names the code it
covers, a kernel or a file pattern: without one (or with one that matches any text, like `.*`) it is a blanket that
would silence every report of its kind, a real invalid write included, so the schema refuses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from harness.sanitizer.model import TOOLS, Finding, SanitizerLog
from harness.schema import ConfigError, param, parse_dataclass, read_yaml


@dataclass(frozen=True)
class Suppression:
    tool: str = param(choices=TOOLS)
    kind: str = param()  # exactly as the parser names it, e.g. "shared-memory race"
    justification: str = param()  # why this report is not a bug (e.g. a documented false positive), for review
    kernel: str = param(default="")  # regular expression searched in the reported function ("" = any)
    file: str = param(default="")  # regular expression searched in "file:line" ("" = any); kernel or file needed

    def matches(self, f: Finding) -> bool:
        return (f.tool == self.tool and f.kind == self.kind
                and (not self.kernel or re.search(self.kernel, f.kernel or "") is not None)
                and (not self.file or re.search(self.file, f.location or "") is not None))


def load_suppressions(path: Path) -> tuple[Suppression, ...]:
    """Parse the file; any problem (missing justification, bad regex, unknown key) is a ConfigError."""
    data = read_yaml(path, ("suppressions",))
    entries = data.get("suppressions", None)
    if not isinstance(entries, list):
        raise ConfigError(path, "suppressions", entries, "must be a list of entries (`suppressions: []` for none)")
    out = []
    for i, raw in enumerate(entries):
        key = f"suppressions[{i}]"
        s = parse_dataclass(Suppression, raw, path, key)
        for name in ("kernel", "file"):
            pattern = getattr(s, name)
            try:
                blanket = pattern and re.search(pattern, "") is not None
            except re.error as e:
                raise ConfigError(path, f"{key}.{name}", pattern, f"not a regular expression: {e}") from None
            if blanket:
                raise ConfigError(path, f"{key}.{name}", pattern, "matches any text (even an empty one): name the "
                                  "kernel or file the reviewed report comes from")
        if not s.kernel and not s.file:
            raise ConfigError(path, f"{key}.kernel", s.kernel, "a suppression needs a kernel or a file pattern: "
                              "without one it silences every report of its kind (a blanket)")
        out.append(s)
    return tuple(out)


def apply(log: SanitizerLog, suppressions: tuple[Suppression, ...]) -> SanitizerLog:
    """The same log with each finding that an entry matches marked suppressed (first matching entry wins)."""
    findings = []
    for f in log.findings:
        hit = next((s for s in suppressions if s.matches(f)), None)
        findings.append(replace(f, suppressed=True, suppression=hit.justification) if hit else f)
    return replace(log, findings=tuple(findings))
