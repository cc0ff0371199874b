"""The HTML report as a reviewer sees it: opened from disk in a real headless Chromium.

Needs Debian's chromium and the playwright package; `ci/pyenv.sh test` (run by `make test`) installs both.
Playwright only drives the system browser: no `playwright install`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_render_samples import not_run, one_fail

from harness.render import write_all

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SETUP_HINT = "run the test set-up first: `make test` (or `ci/pyenv.sh test`) installs it"


def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: {SETUP_HINT}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(f"the playwright package is missing: {SETUP_HINT}")

    run = one_fail()
    run_dir = tmp_path / "run"
    paths = write_all(run, run_dir)
    (run_dir / "logs").mkdir()
    (run_dir / "logs" / "correctness.txt").write_text("max_abs_err=3.1e-2 on prefill\n")
    requested: list[str] = []

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("request", lambda request: requested.append(request.url))
            page.goto(paths["html"].as_uri())

            banner = page.locator("#verdict")
            assert banner.is_visible()
            assert banner.get_attribute("data-status") == "fail"
            assert banner.locator(".word").inner_text() == "FAIL"
            box = banner.bounding_box()
            assert box is not None and box["y"] < 60, "the verdict banner must be at the top of the page"
            assert banner.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(207, 34, 46)"

            rows = page.locator("tr.gate-row")
            assert rows.count() == len(run.gates)
            assert [rows.nth(i).get_attribute("data-gate") for i in range(rows.count())] == [
                g.name for g in run.gates
            ]
            assert "<script>" in page.locator('tr[data-gate="correctness"]').inner_text()  # shown as text
            assert page.locator("script").count() == 0

            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)

            page.locator('a.log[href="logs/correctness.txt"]').click()
            assert "max_abs_err=3.1e-2" in page.locator("body").inner_text()

            page.goto(write_all(not_run(), tmp_path / "not_run")["html"].as_uri())
            assert page.locator("#verdict .word").inner_text() == "NOT RUN"
            assert page.locator("#notice").inner_text() == "no CUDA GPU: gates not run"
            page.screenshot(path=str(tmp_path / "not_run.png"))
        finally:
            browser.close()

    assert (tmp_path / "report.png").stat().st_size > 10_000
    assert requested and all(url.startswith("file://") for url in requested), requested


def _open(pw, path: Path):  # playwright objects: untyped
    browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(path.as_uri())
    return browser, page


def test_the_committed_phase7_report_fits_a_reviewers_minute(tmp_path: Path) -> None:
    """Issue 19: the phase-7 evidence at 1400 x 1000: at most 20 screens with the passing gates collapsed, nothing
    wider than the window; a failing check is listed on the first screen."""
    import json

    from playwright.sync_api import sync_playwright

    from harness.render.stored import read_run, run_from_dict
    from harness.results import Status

    evidence = Path(__file__).resolve().parent.parent / "reports" / "evidence" / "phase7.json"
    run = read_run(evidence)
    data = json.loads(evidence.read_text())
    data["gates"][-1]["checks"][-1]["status"] = "fail"  # one failing check in the last gate
    data["gates"][-1]["status"] = "fail"
    failing = run_from_dict(data)
    assert failing.status is Status.FAIL
    with sync_playwright() as pw:
        browser, page = _open(pw, write_all(run, tmp_path / "pass")["html"])
        try:
            assert page.evaluate("document.documentElement.scrollHeight") <= 20 * 1000
            assert page.evaluate("document.documentElement.scrollWidth") <= 1400
            # passing gates collapsed; only the others (determinism-gpus: not applicable on one GPU) open
            not_passed = [g for g in run.gates if g.status is not Status.PASS]
            assert page.locator("section.gate details[open]").count() == len(not_passed) <= 1
            page.goto(write_all(failing, tmp_path / "fail")["html"].as_uri())
            row = page.locator("#attention .attention-row").first
            box = row.bounding_box()
            assert box is not None and box["y"] + box["height"] <= 1000  # on the first screen
            assert data["gates"][-1]["name"] in row.inner_text()
            assert page.locator(f'section#gate-{data["gates"][-1]["name"]} > details[open]').count() == 1
            assert page.evaluate("document.documentElement.scrollWidth") <= 1400
        finally:
            browser.close()
