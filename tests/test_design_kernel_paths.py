"""docs/design.md's kernel row and its "How to add a head dim" recipe name files that exist: a moved or renamed
kernel file must move in the docs too. Also the recipe's claim that a head dim is one entry of FC_HEAD_DIM_TABLE."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DESIGN = (REPO / "docs" / "design.md").read_text()


def kernel_row() -> str:
    return next(line for line in DESIGN.splitlines() if line.startswith("| `kernel/` |"))


def head_dim_recipe() -> str:
    start = DESIGN.index("- **A head dim**:")
    return DESIGN[start:DESIGN.index("\n- **", start + 1)]


def test_every_kernel_file_the_layout_row_names_exists() -> None:
    names = re.findall(r"`([\w./]+\.(?:h|cuh|cu|py|mk))`", kernel_row())
    assert len(names) > 30
    missing = [n for n in names if not (REPO / "kernel" / n).exists() and not (REPO / "kernel" / "phase1" / n).exists()]
    assert missing == []


def test_every_kernel_source_is_in_the_layout_row() -> None:
    row = kernel_row()
    sources = [p.name for p in (REPO / "kernel").iterdir() if p.suffix in {".h", ".cuh", ".cu"}]
    assert [s for s in sorted(sources) if f"`{s}`" not in row and s != "tuned_points.inc"] == []


def test_every_path_the_head_dim_recipe_names_exists() -> None:
    paths = re.findall(r"`((?:kernel|flashcore|harness|gates|tests)/[\w./-]+)`", head_dim_recipe())
    assert len(paths) >= 8
    assert [p for p in paths if not (REPO / p).exists()] == []


def test_the_head_dim_table_is_one_entry_per_head_dim() -> None:
    header = (REPO / "kernel" / "flashcore.h").read_text()
    table = header[header.index("#define FC_HEAD_DIM_TABLE(X)"):]
    table = table[: table.index("\n\n")]
    entries = re.findall(r"X\((\d+), (\d+), ([01])\)", table)
    assert ("192", "128", "0") in entries and ("128", "128", "1") in entries and ("8", "8", "0") in entries
    assert len(entries) == table.count("X(")  # every entry a plain X(head_dim, head_dim_v, fp8_supported)
    assert len(set(entries)) == len(entries)
