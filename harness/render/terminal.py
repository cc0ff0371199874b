"""Terminal renderer: one line per phase (which gates did not pass), then one row per gate (name, status, elapsed,
message) with the checks that did not pass, then the verdict."""

from __future__ import annotations

from harness.render.format import phase_summaries
from harness.results import Check, GateResult, RunResult, Status

WORDS = {Status.PASS: "PASS", Status.FAIL: "FAIL", Status.ERROR: "ERROR", Status.NOT_RUN: "NOT RUN",
         Status.NOT_APPLICABLE: "N/A"}
_COLORS = {Status.PASS: "32", Status.FAIL: "31", Status.ERROR: "35", Status.NOT_RUN: "33", Status.NOT_APPLICABLE: "36"}
MAX_FAILED_CHECKS = 5  # causes per gate, under its row


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _status(s: Status, color: bool, width: int) -> str:
    word = WORDS[s].ljust(width)
    return f"\x1b[{_COLORS[s]}m{word}\x1b[0m" if color else word


def _failed_checks(g: GateResult, width: int) -> list[str]:
    """The checks that did not pass, those with one status and message as one line with their count (17 checks
    saying the stored run is of another GPU are one cause)."""
    causes: dict[tuple[Status, str], list[Check]] = {}
    for c in g.checks:
        if c.status is not Status.PASS:
            causes.setdefault((c.status, c.message or f"{c.workload} {c.metric}"), []).append(c)
    lines = []
    for (status, _), group in list(causes.items())[:MAX_FAILED_CHECKS]:
        c, n = group[0], len(group)
        subject = f"{c.workload} {c.metric}" + (f" and {n - 1} more (x{n})" if n > 1 else "")
        lines.append("    - " + _cut(f"{subject}: {WORDS[status]}: {c.message}", width - 6))
    if len(causes) > MAX_FAILED_CHECKS:
        lines.append(f"    ... {len(causes) - MAX_FAILED_CHECKS} more causes (see the report)")
    return lines


def render(run: RunResult, color: bool = False, width: int = 120) -> str:
    """The run as a plain-text table (ANSI colors only when `color`)."""
    name_w = max([len("gate"), *(len(g.name) for g in run.gates)])
    status_w = max(len(w) for w in WORDS.values())
    head = f"{'phase':<5}  {'gate':<{name_w}}  {'status':<{status_w}}  {'elapsed':>8}  message"
    lines = [f"FlashCore gates, phase {run.phase}  (run {run.run_id})"]
    lines += [f"  {_status(p.status, color, status_w)}  {_cut(p.text, width - status_w - 4)}"
              for p in phase_summaries(run)]
    lines += ["", head, "-" * min(width, len(head) + 40)]
    msg_w = max(20, width - len(head) + len("message"))
    for g in run.gates:
        lines.append(f"{g.phase:<5}  {g.name:<{name_w}}  {_status(g.status, color, status_w)}  "
                     f"{g.elapsed_s:>7.1f}s  {_cut(g.message, msg_w)}")
        lines.extend(_failed_checks(g, width))
    if not run.gates:
        lines.append("(no gates)")
    not_passed = [g for g in run.gates if g.status is not Status.PASS]
    verdict = _status(run.status, color, 0).strip()
    lines.append("")
    lines.append(f"verdict: {verdict}" + (f"  ({len(not_passed)} of {len(run.gates)} gates did not pass)"
                                          if not_passed else f"  ({len(run.gates)} gates passed)"))
    if run.notice:
        lines.append(run.notice)
    return "\n".join(lines)
