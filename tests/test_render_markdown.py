"""summary.md: verdict first, one table row per gate, per-gate checks, environment; everything escaped."""

import pytest
from test_render_samples import SAMPLES, XSS, one_fail

from harness.render import render_markdown


@pytest.mark.parametrize(("name", "word"), [("pass", "PASS"), ("fail", "FAIL"), ("error", "ERROR"),
                                             ("not_run", "NOT RUN")])
def test_verdict_is_the_first_line(name: str, word: str) -> None:
    first = render_markdown(SAMPLES[name]()).splitlines()[0]
    assert first.startswith("## ") and word in first
    assert "PASS" not in first or word == "PASS"


@pytest.mark.parametrize("name", SAMPLES)
def test_one_gate_row_and_one_section_per_gate(name: str) -> None:
    run = SAMPLES[name]()
    lines = render_markdown(run).splitlines()
    start = lines.index("| gate | phase | status | elapsed | message |") + 2  # skip the header and |---|
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("| "))
    assert [row.split(" | ")[0].removeprefix("| ") for row in lines[start:end]] == [g.name for g in run.gates]
    assert sum(line.startswith("### ") and line != "### Environment" for line in lines) == len(run.gates)


def test_checks_environment_and_escaping() -> None:
    text = render_markdown(one_fail())
    assert "| prefill-b4-h16-s1024-d128 | max_abs_err | ≤ 2.00e-03 | 3.10e-02 | -2.90e-02 | ❌ FAIL |" in text
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "| git.commit | 0123abcd |" in text and "| git.dirty | yes |" in text
    assert "`logs/correctness.txt`" in text
    assert XSS not in text


def test_notice_is_quoted_under_the_verdict() -> None:
    lines = render_markdown(SAMPLES["not_run"]()).splitlines()
    assert lines[2] == "> no CUDA GPU: gates not run"
