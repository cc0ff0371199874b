"""The per-phase summary near the top of every report (terminal, summary.md, index.html): one line per phase
saying how many of its gates passed and naming those that did not, so a reader sees at once which phases are red."""

from __future__ import annotations

import dataclasses
import json

from test_render_samples import gate, run_of

from harness.render import render_html, render_json, render_markdown
from harness.render.format import phase_summaries
from harness.render.terminal import render
from harness.results import RunResult, Status

NAMES = {1: "skeleton", 4: "pipeline", 5: "autotune", 7: "hardening"}


def phase7_run() -> RunResult:
    """Phase 1 green, phase 4's perf gate red, phase 5 without gates, phase 7 green."""
    run = run_of(gate("build", 1, Status.PASS), gate("sanitizer", 1, Status.PASS),
                 gate("ncu-stalls", 4, Status.PASS), gate("perf-cudnn", 4, Status.FAIL),
                 gate("phase5-gates", 5, Status.ERROR, checks=0),
                 gate("api", 7, Status.PASS), gate("determinism-strict", 7, Status.PASS),
                 gate("sanitizer-all", 7, Status.PASS))
    return dataclasses.replace(run, phase_names=NAMES)


EXPECTED = [
    (1, Status.PASS, "phase 1 (skeleton): 2/2 pass"),
    (4, Status.FAIL, "phase 4 (pipeline): 1/2 pass; perf-cudnn FAIL"),
    (5, Status.ERROR, "phase 5 (autotune): 0/1 pass; phase5-gates ERROR"),
    (7, Status.PASS, "phase 7 (hardening): 3/3 pass"),
]


def test_one_line_per_phase_from_the_results() -> None:
    assert [(p.number, p.status, p.text) for p in phase_summaries(phase7_run())] == EXPECTED


def test_every_failing_gate_is_named_with_its_status_and_names_are_optional() -> None:
    run = run_of(gate("a", 3, Status.FAIL), gate("b", 3, Status.NOT_RUN, checks=0), gate("c", 3, Status.ERROR))
    (only,) = phase_summaries(run)  # no phase names recorded (an older results.json): the number alone
    assert (only.status, only.text) == (Status.ERROR, "phase 3: 0/3 pass; a FAIL, b NOT RUN, c ERROR")
    assert phase_summaries(run_of()) == []


def test_terminal_shows_the_phases_above_the_gate_table() -> None:
    lines = render(phase7_run()).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("phase  gate"))
    top = lines[1:header]
    for _, status, text in EXPECTED:
        assert any(line.split() == [status.value.upper(), *text.split()] for line in top), text


def test_markdown_lists_the_phases_before_the_gate_table() -> None:
    md = render_markdown(phase7_run())
    table = md.index("| gate | phase |")
    assert md.index("- ❌ phase 4 (pipeline): 1/2 pass; perf-cudnn FAIL") < table
    assert md.index("- ✅ phase 7 (hardening): 3/3 pass") < table
    assert md.index("- ⚠️ phase 5 (autotune): 0/1 pass; phase5-gates ERROR") < table


def test_html_lists_the_phases_under_the_banner() -> None:
    html = render_html(phase7_run())
    start, gates = html.index('<ul id="phases">'), html.index("<h2>Gates</h2>")
    assert html.index('id="verdict"') < start < gates
    for number, status, text in EXPECTED:
        item = f'<li class="phase" data-phase="{number}" data-status="{status.value}">'
        assert start < html.index(item) < gates and text in html[start:gates]


def test_html_escapes_gate_names_in_the_phase_list() -> None:
    run = dataclasses.replace(run_of(gate("<b>x</b>", 2, Status.FAIL)), phase_names={2: "tma & co"})
    html = render_html(run)
    assert "phase 2 (tma &amp; co): 0/1 pass; &lt;b&gt;x&lt;/b&gt; FAIL" in html and "<b>x</b>" not in html


def test_json_keeps_the_phase_names() -> None:
    data = json.loads(render_json(phase7_run()))
    assert data["phase_names"] == {"1": "skeleton", "4": "pipeline", "5": "autotune", "7": "hardening"}
