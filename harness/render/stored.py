"""A stored run (results.json, schema flashcore.run/1) read back into a RunResult, so `python -m harness render`
can re-render its report (the evidence files; later, runs merged from several GPUs). A stored run may be kept
xz-compressed (`.json.xz`, as reports/evidence/ keeps the large ones): harness/stored_file.py reads either."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.results import Check, GateResult, RunResult, Status
from harness.stored_file import XzError, stored_text

SCHEMA = "flashcore.run/1"


class StoredRunError(ValueError):
    """The file is not a readable flashcore.run/1 results.json: the message says where and why."""


def _need(d: Any, key: str, kind: type, where: str) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise StoredRunError(f"{where}: missing key {key!r}")
    value = d[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):  # JSON true is no phase number
        raise StoredRunError(f"{where}.{key}: {value!r} is not {kind.__name__}")
    return value


def _status(value: Any, where: str) -> Status:
    try:
        return Status(value)
    except ValueError:
        raise StoredRunError(f"{where}: status {value!r} is not one of {[s.value for s in Status]}") from None


def _number(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _check(d: Any, where: str) -> Check:
    return Check(workload=str(_need(d, "workload", str, where)), metric=str(_need(d, "metric", str, where)),
                 threshold=_number(d, "threshold"), measured=_number(d, "measured"),
                 status=_status(_need(d, "status", str, where), where), comparison=str(d.get("comparison", "<=")),
                 margin=_number(d, "margin"), message=str(d.get("message", "")))


def _gate(d: Any, where: str) -> GateResult:
    checks = _need(d, "checks", list, where)
    return GateResult(name=_need(d, "name", str, where), phase=_need(d, "phase", int, where),
                      status=_status(_need(d, "status", str, where), where),
                      checks=tuple(_check(c, f"{where}.checks[{i}]") for i, c in enumerate(checks)),
                      message=str(d.get("message", "")), elapsed_s=float(_number(d, "elapsed_s") or 0.0),
                      logs=tuple(str(x) for x in d.get("logs", [])), details=dict(d.get("details") or {}))


def run_from_dict(data: Any, where: str = "results.json") -> RunResult:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise StoredRunError(f"{where}: schema is {got!r}, expected {SCHEMA!r} (a results.json of make gate-phaseN)")
    gates = _need(data, "gates", list, where)
    names = _need(data, "phase_names", dict, where) if "phase_names" in data else {}
    return RunResult(run_id=_need(data, "run_id", str, where), phase=_need(data, "phase", int, where),
                     gates=tuple(_gate(g, f"{where}.gates[{i}]") for i, g in enumerate(gates)),
                     environment=dict(data.get("environment") or {}), started_at=str(data.get("started_at", "")),
                     elapsed_s=float(_number(data, "elapsed_s") or 0.0), notice=str(data.get("notice", "")),
                     phase_names={int(k): str(v) for k, v in names.items()})


def read_run(path: Path) -> RunResult:
    try:
        data = json.loads(stored_text(path))
    except OSError as e:
        raise StoredRunError(f"{path}: cannot be read: {e.strerror or e}") from None
    except XzError as e:
        raise StoredRunError(f"{path}: not xz data: {e}") from None
    except json.JSONDecodeError as e:
        raise StoredRunError(f"{path}: not JSON: {e}") from None
    run = run_from_dict(data, str(path))
    stored = data.get("status")
    if stored is not None and stored != run.status.value:
        raise StoredRunError(f"{path}: its status {stored!r} is not what its gates give ({run.status.value!r}): "
                             "the file was edited or is damaged")
    return run
