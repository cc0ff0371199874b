"""The perf gates' stored run (their regression check): the file of this GPU model, read, and the run's one notice
when a gate could not compare with it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.bench import stored as per_gpu
from harness.bench.record import RecordError, Run, read_run
from harness.bench.settings import BenchSettings
from harness.results import Check, Status
from harness.support import perf_verdict as pv


def load_stored(settings: BenchSettings, repo_root: Path, here: per_gpu.GpuModel | None,
                override: Path | None = None) -> Run | pv.Missing:
    """The stored run of GPU model `here` (or the file `override`), or why there is none: none for this GPU is
    NOT_APPLICABLE, an unreadable or ambiguous one an ERROR."""
    if override is None:
        found = per_gpu.find(repo_root, settings.stored_run.files, here)
        if found.path is None:
            return pv.Missing(found.why, Status.ERROR if found.applicable else Status.NOT_APPLICABLE)
        path = found.path
    else:
        path = override
    if not path.is_file():
        return pv.Missing(f"{pv.NO_STORED_RUN} ({path} does not exist)")
    try:
        return read_run(path)
    except RecordError as e:
        return pv.Missing(f"stored run unreadable: {e}: run make bench-baseline")


def stored_notice(stored: Run | pv.Missing | None, checks: Sequence[Check]) -> str:
    """The one line the run's notice carries when this gate could not compare with a stored run of this GPU: the
    same words from every perf gate, so the run says it once (each check names its own workload)."""
    if isinstance(stored, pv.Missing):
        return stored.why if stored.status is Status.NOT_APPLICABLE else ""
    lacking = any(c.metric == "slowdown_vs_stored" and c.status is Status.NOT_APPLICABLE for c in checks)
    if stored is None or not lacking:
        return ""
    return (f"the stored run {stored.path} ({stored.gpu}) lacks workloads the perf gates judge (their regression "
            "checks are not applicable): run make bench-baseline on this GPU and commit it")
