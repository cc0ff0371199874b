"""autotune-gain gate (phase 5): the tuned table against the hand-tuned defaults, on held-out shapes.

A perf gate (harness/gates/perf.py) with the backend flashcore-default as the gated baseline, with one rule of its
own: a workload whose bucket the table leaves at the default makes the same launch with and without the table, so
its ratio is 1 by construction. It is timed and shown (report-only) but not judged, and the geometric mean is taken
over the workloads whose entry differs: otherwise timing noise on identical launches (+-0.4 % per shape on the H100)
decides a geomean >= 1.0. Under a planted fault (which slows FlashCore, never the baseline) every workload is judged.
With the table not in effect (tuning off, another or a missing, stale or foreign table: autotune_table.in_effect)
every bucket would be "the same launch": the gate is then an ERROR, never a pass on same-launch checks alone.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace

from flashcore.tuning import TileConfig
from harness import shard_perf
from harness.gates.autotune_table import host_of, library_table_check
from harness.gates.base import GateContext, SelfTest, flashcore_for
from harness.gates.perf import PerfGate, run_perf
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.schema import Workload
from harness.tune.space import bucket


def split_same_launch(workloads: Sequence[Workload], config_of: Callable[[Workload], TileConfig],
                      planted: bool) -> tuple[list[Workload], list[Workload]]:
    """(judged, same launch as the default). With a planted fault nothing is "the same launch"."""
    if planted:
        return list(workloads), []
    judged = [w for w in workloads if not config_of(w).is_default]
    return judged, [w for w in workloads if w not in judged]


def same_launch_check(wl: Workload) -> Check:
    return Check(wl.name, "same_launch_as_default", None, None, Status.PASS, "==",
                 message=f"the table keeps the default for {bucket(wl).label}: the same launch with and without "
                         "it (gain 1 by construction); timed and shown, not judged")


@register("autotune-gain")
class AutotuneGainGate(PerfGate):
    # Planted on the GPU: kernel fault 4 reaches the tuned calls, never the flashcore-default baseline (it runs
    # without the fault). A deliberately bad table cannot be planted: the gate is an ERROR unless the library reads
    # the committed table (autotune_table.in_effect), so a planted table would make it ERROR, never FAIL.
    selftests = (SelfTest("autotune-gain-slow", "perf", "slow", "kernel fault 4 (the producer sleeps 20 us after every "
                          "K/V tile) on the tuned calls only: every workload judged, each below 0.97x the defaults"),)

    def run(self, ctx: GateContext) -> GateResult:
        fc = flashcore_for(ctx)  # NOT_RUN without a usable GPU, ERROR without the library
        if isinstance(fc, GateResult):
            return fc
        import torch

        from flashcore import tuning

        props = torch.cuda.get_device_properties(0)
        kernel_id = fc.api.kernel_id()
        effect, _ = library_table_check(ctx, host_of(fc, props.name, props.multi_processor_count))
        if effect.status is not Status.PASS:
            return ctx.result([effect], message=f"no gain to judge: {effect.message}")

        def config_of(wl: Workload) -> TileConfig:
            with warnings.catch_warnings():  # the table gate reports a missing or stale table
                warnings.simplefilter("ignore", tuning.TuningWarning)
                return tuning.config_for(bucket(wl), props.name, props.multi_processor_count, kernel_id)

        mine = shard_perf.mine(ctx.config, shard_perf.part_of(ctx), ctx.workloads())  # a run in parts: its share
        judged, same = split_same_launch(mine, config_of, planted=bool(ctx.fault))
        if not judged:
            return ctx.result([same_launch_check(w) for w in same],
                              message="the table keeps the default on every bucket of these workloads: no gain to "
                                      "judge (1.0 by construction)")
        p = ctx.params
        params = replace(p, workloads=tuple(w.name for w in judged),
                         report_workloads=(*p.report_workloads, *(w.name for w in same)))
        result = run_perf(replace(ctx, spec=replace(ctx.spec, params=params)))
        if not result.checks:
            return result
        return ctx.result([*result.checks, *(same_launch_check(w) for w in same)], details=result.details,
                          logs=result.logs)
