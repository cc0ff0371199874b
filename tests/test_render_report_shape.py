"""The HTML report's first screen names each failing cause once, and nothing in it is wider than the window: checked
on the rendered text, without a browser (tests/test_browser_report.py measures the same in chromium)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from harness.render import render_html
from harness.render.stored import read_run
from harness.results import Check, GateResult, RunResult, Status

REPO = Path(__file__).resolve().parent.parent
EVIDENCE = REPO / "reports" / "evidence" / "phase7.json"
OTHER_GPU = ("the stored run was measured on NVIDIA H100 80GB HBM3, this run is on NVIDIA H200: run make "
             "bench-baseline on this GPU")


def _attention(html: str) -> str:
    return html[html.index('<ul id="attention">'):html.index("</ul>", html.index('<ul id="attention">'))]


def test_seventeen_identical_messages_are_one_line_with_a_count() -> None:
    checks = tuple(Check(f"prefill-{i}", "slowdown_vs_stored", None, None, Status.ERROR, message=OTHER_GPU)
                   for i in range(12))
    more = tuple(Check(f"decode-{i}", "slowdown_vs_stored", None, None, Status.ERROR, message=OTHER_GPU)
                 for i in range(5))
    slow = Check("prefill-0", "speed_vs_fa3", 1.0, 0.9, Status.FAIL, ">=", message="slower than FA3")
    run = RunResult("r", 4, (GateResult("perf-fa2", 4, Status.ERROR, checks),
                             GateResult("perf-cudnn", 4, Status.ERROR, (*more, slow))), {}, "", 1.0)
    first = _attention(render_html(run))
    assert first.count(OTHER_GPU.split(":")[0]) == 1 and "×17" in first
    assert first.count('class="attention-row"') == 2  # the other GPU, and the one slow check
    assert 'href="#gate-perf-fa2"' in first and 'href="#gate-perf-cudnn"' in first
    assert "prefill-0 · slowdown_vs_stored and 16 more" in first


class _Tables(HTMLParser):
    """Each <table>'s parent element, and the inline widths set in px."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, str]] = []
        self.parents: list[tuple[str, str]] = []
        self.px_widths: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self.parents.append(self.stack[-1] if self.stack else ("", ""))
        self.px_widths += re.findall(r"(?<![-\w])width:\s*\d+px", a.get("style") or "")
        if tag not in ("br", "img", "meta", "link", "input", "hr"):
            self.stack.append((tag, a.get("class") or ""))

    def handle_endtag(self, tag: str) -> None:
        while self.stack and self.stack.pop()[0] != tag:
            pass


def test_nothing_in_the_evidence_report_is_wider_than_the_window() -> None:
    """Every table sits in its own scrolling box, long tokens wrap anywhere, pictures shrink, and the one fixed
    width (the ncu bars) has a bound under the window's."""
    html = render_html(read_run(EVIDENCE))
    tables = _Tables()
    tables.feed(html)
    assert len(tables.parents) > 20
    assert all(tag == "div" and "wide" in cls.split() for tag, cls in tables.parents), tables.parents
    style = html[html.index("<style>"):html.index("</style>")]
    assert re.search(r"body \{[^}]*overflow-wrap: anywhere", style)
    assert re.search(r"\.wide \{[^}]*overflow-x: auto", style)
    assert re.search(r"svg, img, figure \{ max-width: 100%", style)
    assert max(int(re.sub(r"\D", "", w)) for w in tables.px_widths) <= 300  # the ncu bars; bounded below
    assert ".ncu-bar { max-width: 30vw; }" in style


def test_the_terminal_groups_identical_messages_too() -> None:
    from harness.render.terminal import render

    checks = tuple(Check(f"prefill-{i}", "slowdown_vs_stored", None, None, Status.ERROR, message=OTHER_GPU)
                   for i in range(17))
    text = render(RunResult("r", 4, (GateResult("perf-fa2", 4, Status.ERROR, checks),), {}, "", 1.0), width=400)
    lines = [ln for ln in text.splitlines() if ln.startswith("    - ")]
    assert lines == [f"    - prefill-0 slowdown_vs_stored and 16 more (x17): ERROR: {OTHER_GPU}"]
