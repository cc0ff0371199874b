"""Which committed file holds the stored run (or stored ncu baseline) of the GPU a run is on.

A stored run is comparable only on the GPU model it was measured on: an H200 has the H100's SMs but 1.4x its
bandwidth, and FlashCore's speed relative to a reference backend moves with that. So each GPU model (name and SM
count) has its own file. The files match one glob pattern (gates/bench.yaml `stored_run.files`, the ncu-stalls
gate's `baseline` in gates/phases.yaml) and each names its GPU in its `environment`: a file is found by what it
records, not by its name, so a file copied or renamed by hand cannot stand in for another GPU's. A new GPU's file is
named from the GPU (`make bench-baseline` on it: bench-h200.json).

Outcomes: one file for this GPU (found); none (the comparison does not arise here: NOT_APPLICABLE with the reason and
`make prepare`); this GPU unknown, or a file that records no GPU (not comparable: NOT_APPLICABLE, never a pass); two
files for one GPU or an unreadable one (ERROR: which is meant cannot be told).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.stored_file import XzError, stored_text

PREPARE = "run `make prepare` on this GPU (make tune, then make bench-baseline) and commit what it writes"


@dataclass(frozen=True)
class GpuModel:
    name: str
    sm_count: int | None = None  # None: not recorded (files written before the SM count was); the name decides

    def same(self, other: GpuModel) -> bool:
        if self.name != other.name:
            return False
        return self.sm_count is None or other.sm_count is None or self.sm_count == other.sm_count

    @property
    def label(self) -> str:
        return self.name + (f" ({self.sm_count} SMs)" if self.sm_count else "")

    @property
    def slug(self) -> str:
        """'NVIDIA H100 80GB HBM3' -> 'h100': the file-name part of a new GPU's file (its model word)."""
        words = re.sub(r"^nvidia\s+", "", self.name.strip(), flags=re.IGNORECASE).split()
        return re.sub(r"[^a-z0-9]+", "-", (words[0] if words else "").lower()).strip("-") or "gpu"

    @property
    def long_slug(self) -> str:
        """The whole name and SM count: for a second model of the same family (an H100 PCIe beside an SXM)."""
        short = re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")
        return short + (f"-{self.sm_count}sm" if self.sm_count else "")


def model_of(environment: Mapping[str, Any]) -> GpuModel | None:
    """The GPU model an environment (env.collect) records; None when it names no GPU."""
    name = environment.get("gpu")
    if not isinstance(name, str) or not name.strip():
        return None
    sm = environment.get("gpu_sm_count")
    return GpuModel(name.strip(), sm if isinstance(sm, int) and not isinstance(sm, bool) and sm > 0 else None)


@dataclass(frozen=True)
class Lookup:
    """The file of this GPU (`path`), or why there is none: `applicable` False is NOT_APPLICABLE, True an ERROR."""

    path: Path | None
    why: str = ""
    applicable: bool = True
    stored_gpus: tuple[str, ...] = ()  # the GPU models the pattern's files record

    @property
    def found(self) -> bool:
        return self.path is not None


def _environment(path: Path) -> Mapping[str, Any]:
    data = json.loads(stored_text(path))
    env = data.get("environment") if isinstance(data, dict) else None
    if not isinstance(env, dict):
        raise ValueError("no environment")
    return env


def find(repo_root: Path, pattern: str, here: GpuModel | None, what: str = "stored run",
         how: str = PREPARE) -> Lookup:
    """The file matching `pattern` (repository-relative glob) that records GPU model `here`; `how`: what to do
    when there is none."""
    files = sorted(repo_root.glob(pattern))
    models: dict[Path, GpuModel | None] = {}
    for f in files:
        try:
            models[f] = model_of(_environment(f))
        except (OSError, ValueError, *XzError) as e:
            return Lookup(None, f"{what} {f.relative_to(repo_root)} cannot be read ({type(e).__name__}: {e})")
    stored = tuple(m.label if m else f"{f.relative_to(repo_root)}: no GPU recorded" for f, m in models.items())
    if here is None:
        return Lookup(None, f"this run's GPU is unknown: no {what} is comparable", False, stored)
    mine = [f for f, m in models.items() if m is not None and m.same(here)]
    if len(mine) > 1:
        return Lookup(None, f"{len(mine)} {what}s record {here.label}: "
                      f"{', '.join(str(f.relative_to(repo_root)) for f in mine)}: keep one", True, stored)
    if mine:
        return Lookup(mine[0], "", True, stored)
    held = f" ({pattern} holds: {'; '.join(stored)})" if stored else f" ({pattern} matches no file)"
    return Lookup(None, f"no {what} for {here.label}: {how}{held}", False, stored)


def target(repo_root: Path, pattern: str, here: GpuModel) -> Path:
    """Where `make bench-baseline` on `here` writes: that GPU's existing file, else the pattern named from it."""
    got = find(repo_root, pattern, here)
    if got.path is not None:
        return got.path
    short = repo_root / pattern.replace("*", here.slug, 1)
    return repo_root / pattern.replace("*", here.long_slug, 1) if short.exists() else short


def check_pattern(pattern: str) -> str | None:
    """Why `pattern` cannot name per-GPU files, or None."""
    if pattern.count("*") != 1 or "/" in pattern.split("*", 1)[1] or not pattern.endswith(".json"):
        return "one `*` (the GPU) in the file name, ending .json, e.g. gates/baselines/bench-*.json"
    return None
