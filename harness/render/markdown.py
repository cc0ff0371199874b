"""summary.md: the run as GitHub-flavoured Markdown, for a GitHub Actions job summary."""

from __future__ import annotations

from harness.render.format import (
    VERDICT_WORD,
    check_numbers,
    flat_environment,
    fmt_seconds,
    phase_scope,
    phase_summaries,
    verdict_counts,
)
from harness.results import GateResult, RunResult, Status

ICON = {Status.PASS: "✅", Status.FAIL: "❌", Status.ERROR: "⚠️", Status.NOT_RUN: "⏭️", Status.NOT_APPLICABLE: "➖"}


def cell(text: str) -> str:
    """Text safe inside a table cell: HTML escaped, pipes escaped, line breaks kept as <br>."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
    return "<br>".join(line.strip() for line in text.strip().splitlines()) or " "


def verdict(status: Status) -> str:
    return f"{ICON[status]} {VERDICT_WORD[status]}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def gate_section(gate: GateResult) -> list[str]:
    lines = ["", f"### {cell(gate.name)}: {verdict(gate.status)}", ""]
    if gate.message:
        lines += [cell(gate.message), ""]
    if gate.checks:
        header = ["workload", "metric", "threshold", "measured", "margin", "verdict", "note"]
        rows = [
            [c.workload, c.metric, *check_numbers(c), verdict(c.status), c.message]
            for c in gate.checks
        ]
        lines += table(header, rows)
    else:
        lines.append("_no checks recorded_")
    if gate.logs:
        lines += ["", "raw logs (in the run directory): " + ", ".join(f"`{cell(p)}`" for p in gate.logs)]
    return lines


def render_markdown(run: RunResult) -> str:
    lines = [f"## {verdict(run.status)}: FlashCore gates, {phase_scope(run.phase)}", ""]
    if run.notice:
        lines += [f"> {cell(run.notice)}", ""]
    lines += [
        f"{verdict_counts(run)} · run `{cell(run.run_id)}` · started {cell(run.started_at)}"
        f" · {fmt_seconds(run.elapsed_s)} · exit code {run.exit_code}",
        "",
    ]
    phases = phase_summaries(run)
    lines += [f"- {ICON[p.status]} {cell(p.text)}" for p in phases] + ([""] if phases else [])
    rows = [[g.name, str(g.phase), verdict(g.status), fmt_seconds(g.elapsed_s), g.message] for g in run.gates]
    lines += table(["gate", "phase", "status", "elapsed", "message"], rows)
    for gate in run.gates:
        lines += gate_section(gate)
    lines += ["", "### Environment", ""]
    lines += table(["key", "value"], [[k, v] for k, v in flat_environment(run.environment)])
    return "\n".join(lines) + "\n"
