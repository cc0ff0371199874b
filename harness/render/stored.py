"""A stored run (results.json, schema flashcore.run/1) read back into a RunResult, for `python -m harness render`,
`merge`, the workers of a run over several GPUs and `history --import`. A stored run may be kept xz-compressed
(`.json.xz`, as reports/evidence/ keeps the large ones): harness/stored_file.py reads either; a large run's
results.json is a summary whose whole run is its sidecar (harness/render/json_out.py), read through it.

Every reader trusts a file only as far as the engine's rules allow: a status its own checks contradict is refused
(results.status_contradictions), never rendered or merged as written."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from harness.results import Check, GateResult, RunResult, Status, status_contradictions
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


def _load(path: Path) -> Any:
    try:
        return json.loads(stored_text(path))
    except OSError as e:
        raise StoredRunError(f"{path}: cannot be read: {e.strerror or e}") from None
    except XzError as e:
        raise StoredRunError(f"{path}: not xz data: {e}") from None
    except json.JSONDecodeError as e:
        raise StoredRunError(f"{path}: not JSON: {e}") from None


def _whole(path: Path, summary: dict[str, Any]) -> tuple[Any, str]:
    """The whole run a summary results.json points to (json_out.FULL_FILE beside it), and where it was read; the
    sidecar must be the one the summary names (sha256) and agree with every verdict the summary states."""
    full = summary["full"]
    if not isinstance(full, dict) or not isinstance(full.get("file"), str) or "/" in full["file"]:
        raise StoredRunError(f"{path}: `full` is {full!r}, expected the name and sha256 of the sidecar beside it")
    side = path.parent / full["file"]
    try:
        digest = hashlib.sha256(side.read_bytes()).hexdigest()
    except OSError as e:
        raise StoredRunError(f"{path}: its full data {side} cannot be read ({e.strerror or e}): keep the sidecar "
                             "beside results.json") from None
    if digest != full.get("sha256"):
        raise StoredRunError(f"{path}: {side.name} is not the file it names (sha256 {digest[:12]}, expected "
                             f"{str(full.get('sha256'))[:12]}): the file was replaced or is damaged")
    data = _load(side)
    if not isinstance(data, dict):
        raise StoredRunError(f"{side}: not a results file of make gate-phaseN")
    said = [(g.get("name"), g.get("status")) for g in summary.get("gates") or [] if isinstance(g, dict)]
    whole = [(g.get("name"), g.get("status")) for g in data.get("gates") or [] if isinstance(g, dict)]
    if said != whole or data.get("run_id") != summary.get("run_id"):
        raise StoredRunError(f"{path}: its gates or run id differ from {side.name}'s: one of the two was edited")
    return data, f"{path} (whole run: {side.name})"


def read_run_data(path: Path) -> tuple[dict[str, Any], str]:
    """A stored run's whole content (a summary's sidecar read through it) and the file it came from."""
    data = _load(path)
    if isinstance(data, dict) and "full" in data:
        return _whole(path, data)
    return data, str(path)


def read_run(path: Path) -> RunResult:
    """A stored run, trusted only as far as the engine's rules allow: every gate's status must be what its checks
    give (results.status_contradictions) and the run's what its gates give; a file that says otherwise was edited
    or is damaged, and is refused naming the file and each gate."""
    data, where = read_run_data(path)
    run = run_from_dict(data, where)
    if problems := status_contradictions(run.gates):
        shown = "; ".join(problems[:5]) + (f"; (+{len(problems) - 5} more)" if len(problems) > 5 else "")
        raise StoredRunError(f"{where}: stored statuses its checks contradict (the file was edited or is "
                             f"damaged): {shown}")
    stored = data.get("status")
    if stored is not None and stored != run.status.value:
        raise StoredRunError(f"{where}: its status {stored!r} is not what its gates give ({run.status.value!r}): "
                             "the file was edited or is damaged")
    return run
