"""results.json: RunResult.to_dict() as strict JSON (non-finite numbers become strings).

A run whose JSON outgrows RESULTS_MAX_BYTES (a phase-7 run: thousands of checks, per-gate details with plots) keeps
it whole in an xz-compressed sidecar, FULL_FILE, itself a complete results file; results.json is then the summary a
reviewer or a CI step reads: each gate's verdict, message, check counts and first failing checks, and `full`, the
sidecar's name and sha256. `harness render`, `merge` and `history --import` read the sidecar through it
(harness/render/stored.py); the summary alone is never read as a run.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import math
from collections import Counter
from typing import Any

from harness.results import GateResult, RunResult, Status

FULL_FILE = "results-full.json.xz"
# What a browser or `jq` opens at once, and what a CI artifact listing shows without a download.
RESULTS_MAX_BYTES = 1_000_000
# The summary's share per gate: enough to name the failures without the sidecar, bounded so that any number of
# checks keeps results.json under RESULTS_MAX_BYTES.
SUMMARY_CHECKS = 10
SUMMARY_MESSAGE_CHARS = 600
SUMMARY_GATE_MESSAGE_CHARS = 2000


def _strict(value: Any) -> Any:
    """NaN/inf are not JSON: write them as "nan", "inf", "-inf" so any parser reads the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def _dumps(data: dict[str, Any]) -> str:
    # default=str: gate details may hold paths or other plain objects.
    return json.dumps(_strict(data), indent=2, allow_nan=False, default=str) + "\n"


def render_json(run: RunResult) -> str:
    return _dumps(run.to_dict())


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _gate_summary(g: GateResult) -> dict[str, Any]:
    bad = [c for c in g.checks if c.status is not Status.PASS]
    return {"name": g.name, "phase": g.phase, "status": g.status.value,
            "message": _cut(g.message, SUMMARY_GATE_MESSAGE_CHARS), "elapsed_s": round(g.elapsed_s, 3),
            "check_counts": dict(Counter(c.status.value for c in g.checks)),
            "failing_checks": [{**c.to_dict(), "message": _cut(c.message, SUMMARY_MESSAGE_CHARS)}
                               for c in bad[:SUMMARY_CHECKS]],
            "failing_checks_left_out": max(0, len(bad) - SUMMARY_CHECKS)}


def results_files(run: RunResult) -> dict[str, bytes]:
    """The run's results as files: {"results.json": the whole run}, or, past RESULTS_MAX_BYTES, the summary and
    FULL_FILE (the whole run, xz)."""
    text = render_json(run)
    if len(text.encode()) <= RESULTS_MAX_BYTES:
        return {"results.json": text.encode()}
    full = lzma.compress(text.encode(), preset=6)
    summary = {k: v for k, v in run.to_dict().items() if k != "gates"}
    summary["full"] = {"file": FULL_FILE, "sha256": hashlib.sha256(full).hexdigest(),
                       "why": f"the whole run is {len(text.encode())} bytes of JSON: every check and detail is in "
                              f"{FULL_FILE} (xz), which python -m harness render/merge read through this file"}
    summary["gates"] = [_gate_summary(g) for g in run.gates]
    return {"results.json": _dumps(summary).encode(), FULL_FILE: full}
