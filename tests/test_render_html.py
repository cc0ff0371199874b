"""index.html: verdict banner first, one row per gate, per-gate checks, environment, logs; all escaped."""

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from test_render_samples import SAMPLES, XSS, one_fail

from harness.render import render_html, write_all


class Elements(HTMLParser):
    """Start tags in document order as (tag, attrs)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def body_tags(text: str) -> list[tuple[str, dict[str, str | None]]]:
    tags = Elements(text).tags
    return tags[[t for t, _ in tags].index("body") + 1:]


@pytest.mark.parametrize(("name", "word"), [("pass", "PASS"), ("fail", "FAIL"), ("error", "ERROR"),
                                             ("not_run", "NOT RUN")])
def test_verdict_banner_comes_first(name: str, word: str) -> None:
    run = SAMPLES[name]()
    text = render_html(run)
    tag, attrs = body_tags(text)[0]
    assert (tag, attrs.get("id"), attrs.get("data-status")) == ("div", "verdict", run.status.value)
    assert re.search(rf'<span class="word">{word}</span>', text)


@pytest.mark.parametrize("name", SAMPLES)
def test_one_summary_row_per_gate(name: str) -> None:
    run = SAMPLES[name]()
    rows = [a for t, a in body_tags(render_html(run)) if t == "tr" and a.get("class") == "gate-row"]
    assert [(r["data-gate"], r["data-status"]) for r in rows] == [(g.name, g.status.value) for g in run.gates]


def test_checks_environment_and_logs() -> None:
    text = render_html(one_fail())
    assert "≤ 2.00e-03" in text and ">3.10e-02<" in text and ">-2.90e-02<" in text
    assert "<th>git.commit</th><td>0123abcd</td>" in text and "<th>git.dirty</th><td>yes</td>" in text
    assert '<a class="log" href="logs/correctness.txt">' in text
    assert text.count('class="check-row"') == sum(len(g.checks) for g in one_fail().gates)


def test_message_is_escaped_and_page_is_self_contained() -> None:
    text = render_html(one_fail())
    assert XSS not in text and "<script" not in text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; friends" in text
    assert not re.search(r"(src|href)=\"(https?:)?//", text) and "@import" not in text and "<link" not in text


def test_notice_sits_under_the_banner() -> None:
    tags = body_tags(render_html(SAMPLES["not_run"]()))
    assert tags[3] == ("p", {"id": "notice"})  # after the banner div and its two spans
    assert "no CUDA GPU: gates not run" in render_html(SAMPLES["not_run"]())


def test_write_all_writes_the_three_files(tmp_path: Path) -> None:
    paths = write_all(one_fail(), tmp_path / "run")
    assert {p.name for p in paths.values()} == {"index.html", "results.json", "summary.md"}
    assert all(p.parent == tmp_path / "run" and p.stat().st_size > 0 for p in paths.values())
    assert paths["html"].read_text(encoding="utf-8") == render_html(one_fail())
