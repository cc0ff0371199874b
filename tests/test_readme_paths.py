"""README's claims that can be checked offline: every repository path it names exists (docs/ROADMAP.md included)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Named in README but not repository paths: a schema id, and run-directory paths that exist inside a report.
NOT_PATHS = {"flashcore.run/1", "logs/...", "logs/sanitizer-all/"}
BUILT = ("build/", "reports/ci", "reports/history.sqlite")  # outputs of make build / a run: absent from a clone


def test_every_path_readme_names_exists() -> None:
    text = (REPO / "README.md").read_text()
    named = {m for m in re.findall(r"`([\w.-]+/[\w./-]+)`", text)
             if "<" not in m and "*" not in m and not m.startswith(BUILT)} - NOT_PATHS
    assert len(named) > 30  # the pattern still finds README's paths
    assert sorted(p for p in named if not (REPO / p).exists()) == []


def test_the_roadmap_is_in_the_repository() -> None:
    text = (REPO / "README.md").read_text()
    assert "`docs/ROADMAP.md`" in text and (REPO / "docs" / "ROADMAP.md").read_text().startswith("# FlashCore roadmap")
