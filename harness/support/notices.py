"""Run-level notices raised by gates: said once on the report's first screen, not once per check.

A gate that finds something about the host rather than the kernel (no stored run for this GPU model: run
`make prepare`) puts one line in its details under NOTICE_KEY; the run's notice (RunResult.notice) gathers those
lines, each once however many gates or checks raised it. The checks themselves keep their own status and reason.
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.results import GateResult

NOTICE_KEY = "run_notice"


def gate_notices(gates: Iterable[GateResult]) -> list[str]:
    """Each distinct notice the gates raised, in gate order."""
    found = ((g.details or {}).get(NOTICE_KEY) for g in gates)
    return list(dict.fromkeys(n.strip() for n in found if isinstance(n, str) and n.strip()))


def run_notice(notice: str, gates: Iterable[GateResult]) -> str:
    """The run's own notice followed by the gates' distinct notices, none repeated."""
    extra = [n for n in gate_notices(gates) if n not in notice]
    if not extra:
        return notice
    parts = [notice.strip()] if notice.strip() else []
    return " ".join(p if p.endswith((".", "!")) else p + "." for p in [*parts, *extra])
