"""The text of a stored results file: a results.json as written, or one kept xz-compressed (a name ending in .xz, as
reports/evidence/ keeps the large ones). `python -m harness render`, `merge`, `history --import` and the ncu-stalls
gate's `baseline:` read both."""

from __future__ import annotations

import lzma
from pathlib import Path

# What reading a file that is named .xz but holds no xz data raises (besides OSError, which callers handle already).
XzError = (lzma.LZMAError, EOFError)


def stored_text(path: Path) -> str:
    if path.suffix == ".xz":
        with lzma.open(path, "rt") as f:
            return f.read()
    return path.read_text()
