"""results.json: RunResult.to_dict() as strict JSON (non-finite numbers become strings)."""

from __future__ import annotations

import json
import math
from typing import Any

from harness.results import RunResult


def _strict(value: Any) -> Any:
    """NaN/inf are not JSON: write them as "nan", "inf", "-inf" so any parser reads the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def render_json(run: RunResult) -> str:
    # default=str: gate details may hold paths or other plain objects.
    return json.dumps(_strict(run.to_dict()), indent=2, allow_nan=False, default=str) + "\n"
