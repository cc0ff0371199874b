"""autotune-table gate (phase 5): the committed tuned table is usable on this host, and is what the library uses.

Checks: the library would use it (`in_effect`: flashcore.tuning's own resolution, environment included: tuning not
switched off by FLASHCORE_TUNE=0, FLASHCORE_TUNE_TABLE not pointing at another file, a table for this GPU measured
on this library's kernel; an ERROR otherwise, since nothing the gates measure then says anything about the table);
the table file (gates/tune.yaml `table`) parses; it has a table for this GPU (name and SM count) measured on
this kernel (the library's fc_kernel_id, a hash of the kernel sources); every entry of that table is a point the
library can run (block_n compiled for its head dim, a known schedule, an L2 share in 1..100, a compile-time point
that obeys the kernel's rules and is compiled into this library: kernel/tuned_points.inc); every bucket of the
gate's workloads has an entry. A failure says to re-run `make tune` on this GPU and commit the table.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from flashcore import tuning
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


def in_effect(environ: Mapping[str, str], used: Path, used_text: str | None, committed: Path,
              committed_text: str | None, host: Host) -> Check:
    """Would the library run the committed table on `host`? In flashcore.tuning.config_for's order: FLASHCORE_TUNE=0
    (never read a table), the file it reads (`used`: FLASHCORE_TUNE_TABLE or the packaged table), a table for this
    GPU, measured on this kernel. ERROR when not: a gate that then passes would judge the defaults, not the table."""

    def verdict(why: str) -> Check:
        return Check("(library)", "table_in_effect", None, None, Status.ERROR if why else Status.PASS, "==",
                     message=f"{why}: {RETUNE}, and run with it in effect" if why else
                     f"the library runs {committed} for {host.gpu} ({host.sm_count} SMs), kernel {host.kernel_id}")

    if environ.get("FLASHCORE_TUNE", "1") == "0":
        return verdict("FLASHCORE_TUNE=0: the library reads no table (every call runs the default tiles)")
    if used_text is None:
        return verdict(f"the library reads {used}, which does not exist")
    if committed_text != used_text:
        source = "FLASHCORE_TUNE_TABLE" if environ.get("FLASHCORE_TUNE_TABLE") else "the packaged table"
        return verdict(f"the library reads {used} ({source}), not the committed {committed}")
    try:
        tables = parse_tables(used_text, str(used))
    except TableError as e:
        return verdict(f"the library cannot parse {used} ({e})")
    table = next((t for t in tables if t.matches(host.gpu, host.sm_count)), None)
    if table is None:
        return verdict(f"{used} has no table for {host.gpu} with {host.sm_count} SMs")
    if table.kernel_id != host.kernel_id:
        return verdict(f"{used} was measured on kernel {table.kernel_id}, this library is kernel {host.kernel_id}")
    return verdict("")


def read_text(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def library_table_check(ctx: GateContext, host: Host) -> tuple[Check, Path]:
    """in_effect for this process's environment and library; also the committed table's path."""
    from harness.tune.settings import load_tune_settings

    committed = ctx.repo_root / load_tune_settings(ctx.config).table
    used = tuning.table_path()
    return in_effect(os.environ, used, read_text(used), committed, read_text(committed), host), committed


# ---- measuring ------------------------------------------------------------------------------------


def host_of(fc: Any, gpu_name: str, sm_count: int) -> Host:
    compiled = {d: fc.api.block_n_options(d) for d in fc.api.SUPPORTED_HEAD_DIMS}
    points = {d: fc.api.compiled_points(d) for d in fc.api.SUPPORTED_HEAD_DIMS}
    return Host(gpu_name, sm_count, fc.api.kernel_id(), compiled, points)


@register("autotune-table")
class AutotuneTableGate(FlashcoreGate):
    Params = AutotuneTableParams
    # its planted fault, a stale table fed to the verdict, is declared in gates/selftest.yaml (autotune-table-stale)

    def measure(self, ctx: GateContext, fc: ModuleType) -> GateResult:
        import torch

        props = torch.cuda.get_device_properties(0)
        host = host_of(fc, props.name, props.multi_processor_count)
        effect, table_file = library_table_check(ctx, host)
        rel = str(Path(table_file).relative_to(ctx.repo_root)) if table_file.is_relative_to(ctx.repo_root) \
            else str(table_file)
        checks = [effect, *verdict_table(rel, read_text(table_file), host, ctx.workloads())]
        return ctx.result(checks, details={"table": rel, "library_table": str(tuning.table_path()),
                                           "gpu": host.gpu, "sm_count": host.sm_count,
                                           "kernel_id": host.kernel_id,
                                           "compiled_block_n": {str(k): list(v) for k, v in host.compiled.items()},
                                           "compiled_points": {str(k): [p.name for p in v]
                                                               for k, v in host.points.items()}})
