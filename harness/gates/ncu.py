"""ncu throughput gates: a hardware-counter percentage of peak, per workload, from the ncu CLI.

`ncu-dram` (phase 2): dram__throughput.avg.pct_of_peak_sustained_elapsed >= 85 on memory-bound workloads.
`ncu-sm` (phase 3): sm__throughput.avg.pct_of_peak_sustained_elapsed >= 70 on compute-bound workloads.
Both are this class with other YAML params. Only workloads of kind `applies_to` are judged (a long prefill
reads DRAM at ~5 % even in FA3); others in the list are profiled and shown. Verdict (pure, below): the
median over the profiled launches of each matched kernel >= min_pct. Zero matched launches, a metric
missing from the output, a profiler error (e.g. ERR_NVGPUCTRPERM), a launch of a kernel the filter does not
name, a kernel without exactly `launch_count` measured launches, a metric in the wrong unit or a percentage
outside 0..100 is an ERROR, never a pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.gates.base import Gate, GateContext, SelfTest
from harness.gates.registry import register
from harness.ncu import runner
from harness.ncu import shared as ncu_shared
from harness.ncu.checks import screen
from harness.ncu.parse import Kernel, NcuCsv, group_kernels, short_name
from harness.ncu.units import not_percent
from harness.results import Check, GateResult, Status
from harness.schema import KINDS, param


@dataclass(frozen=True, kw_only=True)
class NcuThroughputParams(runner.NcuParams):
    metric: str = param(check=not_percent)  # the gated metric, a percentage of peak (also collected)
    min_pct: float = param()  # the median over launches must be >= this (schema.RANGES: a percentage, (0, 100])
    applies_to: str = param(choices=KINDS)  # workloads of this kind are judged; others are only shown

    def profiled(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.metric, *self.metrics)))


# ---- verdicts (pure) ------------------------------------------------------------------------------


def verdict_kernel(subject: str, kernel: Kernel, metric: str, minimum: float) -> Check:
    """The median of `metric` over the kernel's launches against `minimum`; no number at all is an ERROR."""
    values = kernel.values(metric)
    median = kernel.median(metric)
    if median is None:
        return Check(subject, metric, minimum, None, Status.ERROR, ">=",
                     message=f"{metric} is not a number in any of the {len(values)} launches of "
                     f"{short_name(kernel.name)} (n/a)")
    shown = ", ".join("n/a" if v is None else f"{v:.2f}" for v in values)
    ok = median >= minimum
    return Check(subject, metric, minimum, median, Status.PASS if ok else Status.FAIL, ">=", margin=median - minimum,
                 message=f"median of {len(values)} launches of {short_name(kernel.name)}: {median:.2f} % "
                 f"({shown}); threshold {minimum:g} %")


def verdict_profile(subject: str, csv: NcuCsv, metrics: Sequence[str], metric: str, minimum: float,
                    kernel_filter: str, launch_count: int) -> list[Check]:
    """Checks of one workload's parsed CSV: one per kernel (several names: subject gets the name). A kernel the
    filter does not name, or one whose launches are not the profile asked for (harness/ncu/checks.py), is an
    ERROR in place of its verdict."""
    if not csv.launches:
        return [Check(subject, metric, minimum, None, Status.ERROR, ">=",
                      message=f"zero kernel launches matched regex:{kernel_filter}")]
    missing = [m for m in metrics if not csv.has(m)]
    if missing:
        return [Check(subject, m, minimum if m == metric else None, None, Status.ERROR, ">=",
                      message=f"metric {m} is missing from the ncu output (is the name right for this ncu? "
                      "`ncu --query-metrics`)") for m in missing]
    checks: list[Check] = []
    for s in screen(subject, csv, metrics, (metric,), kernel_filter, launch_count):
        if s.foreign:
            checks.append(s.foreign)
        elif s.problems:
            checks.append(Check(s.subject, metric, minimum, None, Status.ERROR, ">=",
                                message="; ".join(why for _, why in s.problems)))
        else:
            checks.append(verdict_kernel(s.subject, s.kernel, metric, minimum))
    return checks


def workload_details(csv: NcuCsv, metrics: Sequence[str]) -> dict[str, Any]:
    """Per kernel: launch facts, the median and per-launch values of every collected metric."""
    return {"kernels": [{**k.facts(),
                         "metrics": {m: k.median(m) for m in metrics if csv.has(m)},
                         "per_launch": {m: k.values(m) for m in metrics if csv.has(m)}}
                        for k in group_kernels(csv.launches)],
            "units": {m: csv.units.get(m, "") for m in metrics}}


# ---- measuring ------------------------------------------------------------------------------------


class NcuThroughputGate(Gate):
    Params = NcuThroughputParams
    needs_gpu = True

    def run(self, ctx: GateContext) -> GateResult:
        p: NcuThroughputParams = ctx.params
        found = runner.locate(ctx, p)
        if isinstance(found, str):
            return ctx.verdict_only(Status.ERROR, found)
        ncu, driver = found
        metrics = p.profiled()
        checks: list[Check] = []
        logs: list[str] = []
        workloads: dict[str, Any] = {}
        judged_any = False
        for i, wl in enumerate(ctx.workloads()):
            judged = wl.kind == p.applies_to
            judged_any |= judged
            ctx.step(f"ncu {wl.name} ({i + 1}/{len(p.workloads)})")
            shared = ncu_shared.profile(ctx, wl, p, ncu, driver)
            prof = shared.profile
            logs += prof.logs
            ctx.log(f"{wl.name}: {shared.note(ctx.spec.name)}")
            entry: dict[str, Any] = {"shape": wl.label, "kind": wl.kind, "judged": judged, "logs": list(prof.logs),
                                     "profiled_by": shared.by, "shared_by": list(shared.gates)}
            if prof.csv is None:
                checks.append(Check(wl.name, p.metric, p.min_pct if judged else None, None, Status.ERROR, ">=",
                                    message=prof.error))
                entry["error"] = prof.error
            else:
                entry.update(workload_details(prof.csv, metrics))
                if judged:
                    checks += verdict_profile(wl.name, prof.csv, metrics, p.metric, p.min_pct, p.kernel_filter,
                                              p.launch_count)
            workloads[wl.name] = entry
            ctx.log(f"{wl.name} ({wl.label}): {entry}")
        if not judged_any:
            checks.append(Check("(config)", p.metric, p.min_pct, None, Status.ERROR, ">=",
                                message=f"no {p.applies_to} workload among {', '.join(p.workloads)}: nothing judged"))
        details = {"ncu_version": ncu_shared.version(ctx, ncu), "metric": p.metric, "threshold": p.min_pct,
                   "applies_to": p.applies_to, "metrics": list(metrics), "clock_control": p.clock_control,
                   "launch_skip": p.launch_skip, "launch_count": p.launch_count, "workloads": workloads}
        return ctx.result(checks, details=details, logs=logs)


@register("ncu-dram")
class NcuDramGate(NcuThroughputGate):
    """Phase 2: DRAM throughput on the memory-bound workloads."""

    selftests = (SelfTest("slow-loads", "gate", "SLOW",
                          "one producer lane issues every K/V copy, without prefetch: decode starves DRAM"),)


@register("ncu-sm")
class NcuSmGate(NcuThroughputGate):
    """Phase 3: SM throughput on the compute-bound workloads."""

    # on the GPU, and on a recorded profile under its threshold (gates/selftest.yaml ncu-sm-low)
    selftests = (SelfTest("ncu-sm-slow", "gate", "SLOW",
                          "the producer sleeps 20 us after every K/V tile: the SMs wait, far under 70 %"),)


@register("ncu-sm-pipeline")
class NcuSmPipelineGate(NcuThroughputGate):
    """Phase 4: SM throughput on the compute-bound workloads with the pipelined kernel (ROADMAP: >= 80 %)."""

    # on the GPU, and on a recorded profile under its threshold (gates/selftest.yaml ncu-sm-pipeline-low)
    selftests = (SelfTest("ncu-sm-pipeline-slow", "gate", "SLOW",
                          "the producer sleeps 20 us after every K/V tile: the SMs wait, far under 80 %"),)
