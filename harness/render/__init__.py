"""Renderers over one RunResult: JSON, Markdown (GitHub job summary) and a self-contained HTML report.

Each renderer is a pure function `RunResult -> str`; only `write_all` touches the disk. The number and
label formatting shared by the renderers lives in harness/render/format.py, so every format shows the same text.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.render.format import OUTPUT_FILES
from harness.render.html import render_html
from harness.render.json_out import FULL_FILE, render_json, results_files
from harness.render.markdown import render_markdown
from harness.results import RunResult

if TYPE_CHECKING:
    from harness.history.report import TrendReport


def write_all(run: RunResult, run_dir: Path, trends: TrendReport | None = None) -> dict[str, Path]:
    """Write index.html, results.json (and, for a large run, its sidecar: harness/render/json_out.py) and summary.md
    into run_dir; return their paths by format. `trends`: the history's trend section of the HTML report (None:
    none)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    texts = {"html": render_html(run, trends), "markdown": render_markdown(run)}
    paths: dict[str, Path] = {}
    for kind, text in texts.items():
        paths[kind] = run_dir / OUTPUT_FILES[kind]
        paths[kind].write_text(text, encoding="utf-8")
    results = results_files(run)
    (run_dir / FULL_FILE).unlink(missing_ok=True)  # a sidecar of an earlier run would no longer match
    for name, data in results.items():
        (run_dir / name).write_bytes(data)
    paths["json"] = run_dir / OUTPUT_FILES["json"]
    if FULL_FILE in results:
        paths["full"] = run_dir / FULL_FILE
    return paths


__all__ = ["render_html", "render_json", "render_markdown", "write_all"]
