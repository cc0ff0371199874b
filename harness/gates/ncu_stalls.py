"""ncu-stalls gate (phase 4): the warp-stall breakdown, tensor-pipe activity and achieved occupancy per
workload, recorded and compared with a stored baseline run.

This gate records; it sets no threshold on the stalls. It passes only when every workload was measured: a
stall table (the columns matching `stall_metric_regex`), the tensor-pipe metric and the occupancy metric,
each a number. Zero matched launches, a missing metric or a profiler error is an ERROR; so is a CSV that is not
the profile asked for (a foreign kernel, another launch count, a unit or value a metric cannot have:
harness/ncu/checks.py). The comparison with
the baseline (a results.json that holds this gate, path from YAML) is informational: a missing baseline is
noted in the message (an ERROR only with `require_baseline: true`, since the first run has nothing to
compare with); a baseline that exists but cannot be read is an ERROR.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.bench import stored as per_gpu
from harness.gates.base import Gate, GateContext, summarize
from harness.gates.registry import register
from harness.ncu import runner
from harness.ncu import shared as ncu_shared
from harness.ncu.checks import named_by, profile_checks
from harness.ncu.parse import NcuCsv, group_kernels, short_name
from harness.ncu.stalls import Baseline, Stall, read_baseline, stall_columns, stall_table, total
from harness.ncu.units import not_percent
from harness.results import Check, GateResult, Status
from harness.schema import param


@dataclass(frozen=True, kw_only=True)
class NcuStallParams(runner.NcuParams):
    stall_metric_regex: str = param()  # stall-reason columns; group 1 (or the group `reason`) names the reason
    tensor_metric: str = param(check=not_percent)  # tensor-pipe activity, % of peak
    occupancy_metric: str = param(check=not_percent)  # achieved occupancy, % of the peak warps per SM
    # glob of the stored results.json holding this gate, one per GPU model (relative to the repository root)
    baseline: str = param()
    require_baseline: bool = param(default=False)  # true: a missing baseline is an ERROR

    def profiled(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.metrics, self.tensor_metric, self.occupancy_metric)))


def _recorded(subject: str, csv: NcuCsv, metric: str, value: float | None) -> Check:
    if not csv.has(metric):
        return Check(subject, metric, None, None, Status.ERROR, message=f"metric {metric} is missing from the "
                     "ncu output (is it in `metrics:`, and the name right for this ncu? `ncu --query-metrics`)")
    if value is None:
        return Check(subject, metric, None, None, Status.ERROR, message=f"{metric} is n/a in every launch")
    return Check(subject, metric, None, value, Status.PASS, message="recorded (no threshold)")


def _changes(stalls: list[Stall], n: int = 3) -> str:
    moved = sorted((s for s in stalls if s.delta is not None), key=lambda s: -abs(s.delta or 0.0))[:n]
    return ", ".join(f"{s.reason} {s.delta:+.2f}" for s in moved) or "no reason in common"


# ---- verdicts (pure) ------------------------------------------------------------------------------


def verdict_stalls(subject: str, csv: NcuCsv, p: NcuStallParams,
                   baseline: Mapping[str, float | None] | None) -> tuple[list[Check], dict[str, Any]]:
    """Checks and report data of one workload's parsed CSV (the first kernel the filter names). A CSV that is not
    the profile asked for (harness/ncu/checks.py: a foreign kernel, launches, units, ranges) adds ERROR checks."""
    named = [k for k in group_kernels(csv.launches) if named_by(k.name, p.kernel_filter)]
    if not named:
        return [Check(subject, "warp_stalls", None, None, Status.ERROR,
                      message=f"zero kernel launches matched regex:{p.kernel_filter}")], {}
    kernel = named[0]
    stalls = stall_table(kernel, csv.columns, p.stall_metric_regex, baseline)
    measured = [s for s in stalls if s.value is not None]
    if not stalls:
        check = Check(subject, "warp_stalls", None, None, Status.ERROR, message="no column matches "
                      f"{p.stall_metric_regex!r}: collect the WarpStateStats section (sections:)")
    elif not measured:
        check = Check(subject, "warp_stalls", None, None, Status.ERROR, message="every stall reason is n/a")
    else:
        top = ", ".join(f"{s.reason} {s.value:.2f}" for s in measured[:3])
        check = Check(subject, "warp_stalls", None, total(stalls), Status.PASS,
                      message=f"{len(measured)} reasons recorded for {short_name(kernel.name)}; top: {top}")
    exact = [m for m in (p.tensor_metric, p.occupancy_metric) if csv.has(m)]
    read = [*stall_columns(csv.columns, p.stall_metric_regex), *exact, *(m for m in p.metrics if csv.has(m))]
    problems = profile_checks(subject, csv, read, exact, p.kernel_filter, p.launch_count)
    tensor, occupancy = kernel.median(p.tensor_metric), kernel.median(p.occupancy_metric)
    checks = [check, _recorded(subject, csv, p.tensor_metric, tensor), _recorded(subject, csv, p.occupancy_metric,
                                                                                  occupancy), *problems]
    if baseline is not None:
        checks.append(Check(subject, "baseline", None, None, Status.PASS, message=f"changes: {_changes(stalls)}"))
    unit = next((csv.units.get(c, "") for c in stall_columns(csv.columns, p.stall_metric_regex)), "")
    data = {"kernel": kernel.facts(), "stalls": [s.to_dict() for s in stalls], "stall_total": total(stalls),
            "stall_max": max((s.value for s in measured if s.value is not None), default=0.0), "stall_unit": unit,
            "tensor_pct": tensor, "occupancy_pct": occupancy, "has_baseline": baseline is not None}
    return checks, data


def verdict_baseline(subject: str, baseline: Baseline, has_workload: bool, required: bool) -> Check | None:
    """A check for the baseline only where it matters: unreadable (ERROR), or missing when required (ERROR)."""
    if baseline.status == "unreadable":
        return Check(subject, "baseline", None, None, Status.ERROR, message=baseline.message)
    if required and (baseline.status == "missing" or not has_workload):
        why = baseline.message if baseline.status == "missing" else f"baseline {baseline.path} has no {subject}"
        return Check(subject, "baseline", None, None, Status.ERROR, message=why)
    return None


# ---- measuring ------------------------------------------------------------------------------------


def gpu_baseline(repo_root: Path, pattern: str, gate: str) -> Baseline:
    """The stored baseline of this GPU model among the files `pattern` matches (harness/bench/stored.py): stall
    cycles on an H200 say nothing about an H100's. None for this GPU is `missing`; two, or an unreadable file,
    `unreadable`."""
    from harness.env import torch_info

    if "*" not in pattern:  # one fixed file: whatever GPU it was measured on
        return read_baseline(repo_root / pattern, pattern, gate)
    found = per_gpu.find(repo_root, pattern, per_gpu.model_of(torch_info()), "stored ncu baseline",
                         "commit the results.json of a reviewed run on this GPU as one of them")
    if found.path is None:
        return Baseline(pattern, "unreadable" if found.applicable else "missing", found.why)
    return read_baseline(found.path, str(found.path.relative_to(repo_root)), gate)


@register("ncu-stalls")
class NcuStallsGate(Gate):
    Params = NcuStallParams
    needs_gpu = True
    # Recorded, not thresholded: its red is an ERROR, a workload whose stall table was not measured. No kernel fault
    # removes the table, so its planted case (gates/selftest.yaml ncu-stalls-unmeasured) feeds the gate's verdict
    # FlashCore's recorded WarpStateStats profile with every stall reason n/a, beside the profile as recorded.
    selftest_none = "CPU-planted in gates/selftest.yaml (ncu-stalls-unmeasured): no kernel fault removes a stall table"

    def run(self, ctx: GateContext) -> GateResult:
        p: NcuStallParams = ctx.params
        try:
            re.compile(p.stall_metric_regex)
        except re.error as e:
            return ctx.verdict_only(Status.ERROR, f"stall_metric_regex {p.stall_metric_regex!r} is not a regex: {e}")
        found = runner.locate(ctx, p)
        if isinstance(found, str):
            return ctx.verdict_only(Status.ERROR, found)
        ncu, driver = found
        base = gpu_baseline(ctx.repo_root, p.baseline, ctx.spec.name)
        checks: list[Check] = []
        logs: list[str] = []
        workloads: dict[str, Any] = {}
        for i, wl in enumerate(ctx.workloads()):
            ctx.step(f"ncu {wl.name} ({i + 1}/{len(p.workloads)})")
            shared = ncu_shared.profile(ctx, wl, p, ncu, driver)
            prof = shared.profile
            logs += prof.logs
            ctx.log(f"{wl.name}: {shared.note(ctx.spec.name)}")
            entry: dict[str, Any] = {"shape": wl.label, "kind": wl.kind, "logs": list(prof.logs),
                                     "profiled_by": shared.by, "shared_by": list(shared.gates)}
            previous = base.for_workload(wl.name)
            if prof.csv is None:
                checks.append(Check(wl.name, "warp_stalls", None, None, Status.ERROR, message=prof.error))
                entry["error"] = prof.error
            else:
                new, data = verdict_stalls(wl.name, prof.csv, p, previous)
                checks += new
                entry.update(data)
            extra = verdict_baseline(wl.name, base, previous is not None, p.require_baseline)
            checks += [extra] if extra else []
            workloads[wl.name] = entry
            ctx.log(f"{wl.name} ({wl.label}): {entry}")
        message = summarize(checks) + ("" if base.status == "loaded" else f"; {base.message}")
        details = {"ncu_version": ncu_shared.version(ctx, ncu), "stall_metric_regex": p.stall_metric_regex,
                   "tensor_metric": p.tensor_metric, "occupancy_metric": p.occupancy_metric,
                   "baseline": {"path": base.path, "status": base.status, "message": base.message,
                                "run_id": base.run_id},
                   "clock_control": p.clock_control, "launch_skip": p.launch_skip, "launch_count": p.launch_count,
                   "workloads": workloads}
        return ctx.result(checks, details=details, message=message, logs=logs)
