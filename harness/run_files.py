"""The raw files of a run directory kept small: each raw log a gate lists (compute-sanitizer logs, Nsight Compute
reports and their CSV, a gate's own log) above RAW_PLAIN_BYTES is xz-compressed in place once the run is over, and
the gate's `logs` name the compressed file, so the report links what is on disk and nothing is stored twice.

Done after the gates, not where the tools write: a tool and its parser read the plain file while the gate runs;
afterwards only a reviewer opens it (`xz -d`, or harness/stored_file.py, which reads .xz as is).
"""

from __future__ import annotations

import dataclasses
import lzma
import shutil
from pathlib import Path

from harness.results import GateResult, RunResult

SUFFIX = ".xz"
# A log this small opens in the browser as it is; above it the bytes add up (hundreds of sanitizer logs per run).
RAW_PLAIN_BYTES = 64 * 1024
# xz's fastest preset: sanitizer logs are repetitive text and shrink tenfold at it, in seconds rather than minutes.
PRESET = 0


def compress_file(path: Path) -> Path:
    """`path` replaced by `path.xz` (the plain file removed only once the compressed one is complete)."""
    packed = path.with_name(path.name + SUFFIX)
    partial = packed.with_name(packed.name + ".partial")
    with path.open("rb") as src, lzma.open(partial, "wb", preset=PRESET) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    partial.replace(packed)
    path.unlink()
    return packed


def _gate(gate: GateResult, run_dir: Path) -> GateResult:
    logs = []
    for rel in gate.logs:
        path = run_dir / rel
        if not path.is_file() and (run_dir / (rel + SUFFIX)).is_file():  # listed by another gate too: done there
            logs.append(rel + SUFFIX)
            continue
        if rel.endswith(SUFFIX) or not path.is_file() or path.stat().st_size <= RAW_PLAIN_BYTES:
            logs.append(rel)
            continue
        try:
            compress_file(path)
        except OSError:  # a log that cannot be compressed stays as it is: the report still links it
            logs.append(rel)
            continue
        logs.append(rel + SUFFIX)
    if tuple(logs) == gate.logs:
        return gate
    # A detail naming a log (a perf gate's measurements_file, the report's link to it) follows it to the .xz name.
    renamed = {rel: new for rel, new in zip(gate.logs, logs, strict=True) if rel != new}
    details = {k: renamed.get(v, v) if isinstance(v, str) else v for k, v in gate.details.items()}
    return dataclasses.replace(gate, logs=tuple(logs), details=details)


def compress_logs(run: RunResult, run_dir: Path) -> RunResult:
    """The run with each large raw log compressed (see the module); its other files and small logs as they are."""
    return dataclasses.replace(run, gates=tuple(_gate(g, run_dir) for g in run.gates))
