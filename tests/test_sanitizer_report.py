"""The sanitizer section of index.html: a findings table per tool and workload (suppressed findings marked, with
their justification), each raw log collapsed in <details><pre>, everything escaped; checked in headless Chromium."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from test_browser_report import CHROMIUM, CHROMIUM_ARGS, SETUP_HINT
from test_render_samples import gate, one_error, run_of
from test_sanitizer_gate import install_fake, replay, run_gate

from harness.render import render_html, write_all
from harness.results import GateResult, RunResult, Status
from harness.sanitizer.model import TOOLS

XSS_LINE = "<script>alert('log')</script>\n"


def sanitizer_run(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[RunResult, GateResult]:
    """A real gate run (stand-in tool): racecheck finds the planted race (a suppression entry that does not match
    it), memcheck is clean but its log holds a hostile program-output line, initcheck replays a racecheck log."""
    root.mkdir(exist_ok=True)
    install_fake(root, monkeypatch)
    replay(root, "racecheck", "racecheck-race", 86)
    (root / "fake" / "memcheck.log").write_text(XSS_LINE + (root / "fake" / "memcheck.log").read_text())
    replay(root, "initcheck", "kernel-racecheck-hazard-mode", 0)  # a racecheck log under initcheck: ERROR
    (root / "gates" / "sanitizer-suppressions.yaml").write_text(yaml.safe_dump({"suppressions": [{
        "tool": "racecheck", "kind": "shared-memory race", "file": "planted.cu:28",
        "kernel": "no-such-kernel", "justification": "never matches"}]}))
    result = run_gate(root)
    return run_of(gate("build", 1, Status.PASS), result), result


def section(text: str) -> str:
    start = text.index('<section class="gate" id="gate-sanitizer"')
    return text[start:text.index("</section>", start)]


def test_findings_tables_and_collapsed_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, result = sanitizer_run(tmp_path, monkeypatch)
    assert result.status is Status.ERROR  # the initcheck runs could not be judged
    html = section(render_html(run))
    assert re.findall(r'<table class="sanitizer-findings" data-tool="(\w+)"', html) == list(TOOLS)
    racecheck = html[html.index('data-tool="racecheck"'):html.index('data-tool="synccheck"')]
    rows = re.findall(r'<tr class="finding" data-workload="(w\d)" data-status="fail"\s+data-suppressed="no">',
                      racecheck)
    assert rows == ["w1", "w2"]
    assert "shared-memory race (write vs read)" in html and "planted.cu:28" in html and "1024 hazards" in html
    assert html.count('<details class="sanitizer-log"') == len(result.details["runs"]) == 8
    assert "&lt;script&gt;alert(&#39;log&#39;)&lt;/script&gt;" in html and "<script>" not in html
    assert "the log was written by racecheck, not initcheck" in html
    assert "--check-bulk-copy on" in html and "padding 32 B" in html


def test_suppressed_findings_are_marked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake(tmp_path, monkeypatch)
    replay(tmp_path, "racecheck", "kernel-racecheck-old-race", 86)
    (tmp_path / "gates" / "sanitizer-suppressions.yaml").write_text(yaml.safe_dump({"suppressions": [{
        "tool": "racecheck", "kind": "shared-memory race", "file": r"^loader\.h:",
        "justification": "reviewed <b>false</b> positive"}]}))
    result = run_gate(tmp_path)
    html = section(render_html(run_of(result)))
    assert result.status is Status.PASS
    assert html.count('data-suppressed="yes"') == 4 and 'data-suppressed="no"' not in html
    assert "SUPPRESSED" in html and "suppressed: reviewed &lt;b&gt;false&lt;/b&gt; positive" in html


def test_a_gate_that_could_not_run_renders_without_the_tables() -> None:
    html = section(render_html(one_error()))
    assert "compute-sanitizer not found" in html and "sanitizer-findings" not in html


def test_section_in_headless_chromium(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: {SETUP_HINT}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(f"the playwright package is missing: {SETUP_HINT}")
    run, _ = sanitizer_run(tmp_path / "root", monkeypatch)
    paths = write_all(run, tmp_path / "report")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(paths["html"].as_uri())
            assert page.locator("table.sanitizer-findings").count() == 4
            race = page.locator('table[data-tool="racecheck"] tr.finding').first
            assert race.is_visible() and "planted.cu:28" in race.inner_text()
            log = page.locator('details.sanitizer-log[data-tool="memcheck"][data-workload="w1"]')
            assert not log.locator("pre").is_visible()  # collapsed until opened
            log.locator("summary").click()
            assert log.locator("pre").is_visible()
            assert "<script>alert('log')</script>" in log.locator("pre").inner_text()  # shown as text
            assert page.locator("script").count() == 0
            page.screenshot(path=str(tmp_path / "sanitizer.png"), full_page=True)
        finally:
            browser.close()
    assert (tmp_path / "sanitizer.png").stat().st_size > 10_000
