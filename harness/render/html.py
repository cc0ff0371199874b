"""index.html: a self-contained report (inline CSS, no scripts, no external URLs) from a Jinja2 template."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jinja2

from harness.history.report import TrendReport
from harness.render import summary
from harness.render.format import (
    OUTPUT_FILES,
    VERDICT_WORD,
    check_numbers,
    flat_environment,
    fmt_seconds,
    is_relative_link,
    phase_scope,
    phase_summaries,
    verdict_counts,
)
from harness.results import GateResult, RunResult
from harness.run_files import SUFFIX

TEMPLATE = "report.html.j2"


@cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("harness.render", "templates"),
        autoescape=True,  # every value is escaped: gate messages may quote compiler or tool output
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def _gate_view(gate: GateResult) -> dict[str, Any]:
    checks = [
        dict(
            zip(("threshold", "measured", "margin"), check_numbers(c), strict=True),
            workload=c.workload,
            short_workload=summary.short_name(c.workload),
            metric=c.metric,
            status=c.status.value,
            word=VERDICT_WORD[c.status],
            message=c.message,
            short_message=summary.short_text(c.message),
        )
        for c in gate.checks
    ]
    return {
        "name": gate.name,
        "phase": gate.phase,
        "status": gate.status.value,
        "word": VERDICT_WORD[gate.status],
        "elapsed": fmt_seconds(gate.elapsed_s),
        "message": gate.message,
        "short_message": summary.short_text(gate.message),
        "checks": checks,
        "logs": [{"path": p, "linked": is_relative_link(p)} for p in gate.logs],
        # a raw log compressed after the run (harness/run_files.py): its name on disk, for the sections' own links
        "log_names": {p.removesuffix(SUFFIX): p for p in gate.logs},
        "details": json.dumps(gate.details, indent=2, default=str) if gate.details else "",
        "data": gate.details,
        "section": _section_template(gate.name),
        **_gpu_cell(gate.details.get("gpu") if isinstance(gate.details, dict) else None),
    }


def _gpu_cell(gpu: Any) -> dict[str, str]:
    """A run over several GPUs (harness/shard.py) names each gate's GPU: index and name in the cell, UUID, SM clock
    and power at the gate's start in its title."""
    if not isinstance(gpu, dict):
        return {"gpu": "", "gpu_title": ""}
    cell = f"{gpu.get('index', '?')}" + (f" · {gpu['name']}" if gpu.get("name") else "")
    title = ", ".join(f"{k} {gpu[k]}" for k in ("uuid", "sm_mhz", "power_w") if gpu.get(k) is not None)
    return {"gpu": cell, "gpu_title": title}


def _section_template(gate_name: str) -> str | None:
    """A gate's own report section (findings tables, charts), when templates/sections/<gate>.html.j2 exists.

    It renders inside the gate's <section> with `g.data` = GateResult.details."""
    name = f"sections/{gate_name}.html.j2"
    return name if name in _environment().list_templates() else None


def _trends_view(report: TrendReport | None) -> dict[str, Any] | None:
    """The trend section: panels as one inline SVG (or, without matplotlib, a note), the flagged series."""
    if report is None:
        return None
    svg, why = None, report.note
    if report.panels:
        from harness.bench import plots

        try:
            svg = plots.trend_lines([(p.title, p.lines) for p in report.panels], report.runs)
        except plots.PlotUnavailable as e:
            why = str(e)
    return {"path": report.path, "gpu": report.gpu, "runs": len(report.runs), "svg": svg, "note": why,
            "flags": [{"series": s, "why": w} for s, w in report.flags],
            "panels": [{"title": p.title, "lines": len(p.lines)} for p in report.panels]}


def render_html(run: RunResult, trends: TrendReport | None = None) -> str:
    """The report; `trends`: the history's view of the last runs (the gate command's, after appending this one)."""
    attention, more = summary.attention(run)
    speed, chart = summary.speed(run)
    return _environment().get_template(TEMPLATE).render(
        trends=_trends_view(trends),
        attention=attention,
        attention_more=more,
        speed=[{k: ("—" if v is None else (f"{v:.3f}" if k in ("fa3", "cudnn", "fa2") else
                                              (f"{v:.4g}" if isinstance(v, float) else v))) for k, v in r.items()}
               for r in speed],
        speed_chart=chart,
        ncu=summary.ncu_figures(run),
        run_id=run.run_id,
        scope=phase_scope(run.phase),
        status=run.status.value,
        word=VERDICT_WORD[run.status],
        counts=verdict_counts(run),
        notice=run.notice,
        started_at=run.started_at,
        elapsed=fmt_seconds(run.elapsed_s),
        exit_code=run.exit_code,
        phases=[{"number": p.number, "status": p.status.value, "word": VERDICT_WORD[p.status], "text": p.text}
                for p in phase_summaries(run)],
        gates=[_gate_view(g) for g in run.gates],
        gpu_column=any(isinstance(g.details, dict) and g.details.get("gpu") for g in run.gates),
        environment=flat_environment(run.environment),
        files=OUTPUT_FILES,
    )
