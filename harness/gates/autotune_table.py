"""autotune-table gate (phase 5): the committed tuned table is usable on this host.

Checks: the table file (gates/tune.yaml `table`) parses; it has a table for this GPU (name and SM count) measured on
this kernel (the library's fc_kernel_id, a hash of the kernel sources); every entry of that table is a point the
library can run (block_n compiled for its head dim, a known schedule, an L2 share in 1..100, a compile-time point
that obeys the kernel's rules and is compiled into this library: kernel/tuned_points.inc); every bucket of the
gate's workloads has an entry. A failure says to re-run `make tune` on this GPU and commit the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from flashcore.points import Point
from flashcore.tuning import Table, TableError, parse_tables
from harness.gates.base import FlashcoreGate, GateContext
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.schema import Workload, param
from harness.tune.space import bucket

RETUNE = "re-run `make tune` on this GPU and commit the table"


@dataclass(frozen=True)
class AutotuneTableParams:
    workloads: tuple[str, ...] = param(workloads=True)  # each one's bucket must have an entry


@dataclass(frozen=True)
class Host:
    gpu: str
    sm_count: int
    kernel_id: str
    compiled: Mapping[int, tuple[int, ...]]  # head dim -> fc_block_n_options
    points: Mapping[int, tuple[Point, ...]] = field(default_factory=dict)  # head dim -> fc_points


# ---- verdict (pure) -------------------------------------------------------------------------------


def verdict_table(source: str, text: str | None, host: Host, workloads: Sequence[Workload]) -> list[Check]:
    """The checks of the gate for a table file's text (None: the file is missing) on `host`."""
    if text is None:
        return [Check("(table)", "parses", None, None, Status.FAIL, "==",
                      message=f"{source} does not exist: {RETUNE}")]
    try:
        tables = parse_tables(text, source)
    except TableError as e:
        return [Check("(table)", "parses", None, None, Status.FAIL, "==", message=f"{e}: fix it or {RETUNE}")]
    checks = [Check("(table)", "parses", None, None, Status.PASS, "==",
                    message=f"{len(tables)} table(s): " + ", ".join(f"{t.gpu} ({t.sm_count} SMs)" for t in tables))]
    table = next((t for t in tables if t.matches(host.gpu, host.sm_count)), None)
    if table is None:
        return checks + [Check("(table)", "table_for_gpu", None, None, Status.FAIL, "==",
                               message=f"no table for {host.gpu} with {host.sm_count} SMs: {RETUNE}")]
    checks.append(Check("(table)", "table_for_gpu", None, None, Status.PASS, "==",
                        message=f"{len(table.entries)} entries, tuned {table.tuned_at or '?'} at "
                                f"{table.commit[:12] or '?'}"))
    stale = table.kernel_id != host.kernel_id
    checks.append(Check("(table)", "kernel_id", None, None, Status.FAIL if stale else Status.PASS, "==",
                        message=(f"measured on kernel {table.kernel_id}, this library is kernel {host.kernel_id}: "
                                 f"{RETUNE}") if stale else f"kernel {host.kernel_id}"))
    checks.extend(_entry_checks(table, host))
    for wl in workloads:
        key = bucket(wl)
        entry = table.entries.get(key)
        checks.append(Check(wl.name, "bucket_entry", None, None, Status.PASS if entry else Status.FAIL, "==",
                            message=(f"{key.label}: {entry.config.label}" + (f" ({entry.speedup:.3f}x when tuned)"
                                                                              if entry.speedup else ""))
                            if entry else f"no entry for its bucket {key.label}: add the bucket to gates/tune.yaml's "
                                          f"shapes and {RETUNE}"))
    return checks


def _entry_checks(table: Table, host: Host) -> list[Check]:
    bad = []
    for key, entry in table.entries.items():
        problems = entry.config.problems(host.compiled.get(key.head_dim, ()), key.head_dim,
                                         host.points.get(key.head_dim, ()))
        if problems:
            bad.append(f"{key.label}: {entry.config.label}: {'; '.join(problems)}")
    return [Check("(table)", "invalid_entries", 0, len(bad), Status.FAIL if bad else Status.PASS, "==",
                  message="; ".join(bad[:3]) if bad else f"all {len(table.entries)} entries are valid points")]


# ---- measuring ------------------------------------------------------------------------------------


def host_of(fc: Any, gpu_name: str, sm_count: int) -> Host:
    compiled = {d: fc.api.block_n_options(d) for d in fc.api.SUPPORTED_HEAD_DIMS}
    points = {d: fc.api.compiled_points(d) for d in fc.api.SUPPORTED_HEAD_DIMS}
    return Host(gpu_name, sm_count, fc.api.kernel_id(), compiled, points)


@register("autotune-table")
class AutotuneTableGate(FlashcoreGate):
    Params = AutotuneTableParams
    selftest_none = "stale, foreign, invalid and incomplete tables planted on the CPU: tests/test_autotune.py"

    def measure(self, ctx: GateContext, fc: ModuleType) -> GateResult:
        import torch

        from harness.tune.settings import load_tune_settings

        table_file = ctx.repo_root / load_tune_settings(ctx.config).table
        props = torch.cuda.get_device_properties(0)
        host = host_of(fc, props.name, props.multi_processor_count)
        text = table_file.read_text() if table_file.is_file() else None
        rel = str(Path(table_file).relative_to(ctx.repo_root)) if table_file.is_relative_to(ctx.repo_root) \
            else str(table_file)
        checks = verdict_table(rel, text, host, ctx.workloads())
        return ctx.result(checks, details={"table": rel, "gpu": host.gpu, "sm_count": host.sm_count,
                                           "kernel_id": host.kernel_id,
                                           "compiled_block_n": {str(k): list(v) for k, v in host.compiled.items()},
                                           "compiled_points": {str(k): [p.name for p in v]
                                                               for k, v in host.points.items()}})
