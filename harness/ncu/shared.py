"""One ncu profile per workload and settings for the ncu gates of a run in this process.

Several ncu gates may profile one workload with the same settings (ncu-sm and ncu-sm-pipeline: prefill-d128, the
same metrics, launches and clocks). A profile costs seconds of kernel replays and its report megabytes of the run
directory, so the first gate that needs it profiles it for every gate of the run that will (`GateContext.peers`),
collecting the union of their metrics; it is stored once, under that gate's logs/<gate>/, and the later gates judge
the same parsed CSV and name the same files (the report links what each gate judged). The shard plan keeps the ncu
gates in one worker (gates/shard.yaml `together`), so in a sharded run too they meet here.

Settings that differ in anything but the metrics are profiled apart, as each gate alone would: the driver command
(workload, iterations, planted fault, flags), kernel filter, launch skip and count, clock control, the ncu tool, and
the sections, since which columns a section adds is ncu's to say. Each gate reads only the metrics it asked for
(harness/gates/ncu.py, ncu_stalls.py), so its verdict is the one it gives alone: a metric of its own missing from the
shared CSV is its ERROR. Should a joint profile fail for a gate whose metrics are fewer than the union's (ncu refuses
the whole list for one name it does not know), that gate profiles its own request alone before it judges.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.ncu import runner
from harness.ncu.runner import NcuParams, Profile
from harness.schema import Workload

if TYPE_CHECKING:  # a runtime import would be circular (harness/ncu/runner.py says why)
    from harness.gates.base import GateContext

Key = tuple[Hashable, ...]


@dataclass(frozen=True)
class Shared:
    """A profile as one gate judges it: who ran it, for which gates, and with which metrics."""

    profile: Profile
    by: str  # the gate that ran the profile (its files are under logs/<by>/)
    gates: tuple[str, ...]  # every gate of the run planned to judge it, in run order
    metrics: tuple[str, ...]  # what it collected with --metrics

    @property
    def report(self) -> str:
        """The .ncu-rep it read (relative to the run directory); "" when ncu wrote none."""
        return next((x for x in self.profile.logs if x.endswith(".ncu-rep")), "")

    def note(self, gate: str) -> str:
        """One line for the gate's log: the report it judged, and which gates share it."""
        others = [g for g in self.gates if g != gate]
        where = self.report or f"no report (logs: {', '.join(self.profile.logs)})"
        if not others:
            return f"judged from {where}"
        ran = "profiled here" if self.by == gate else f"profiled by {self.by}"
        return f"judged from {where} ({ran}, one profile for {', '.join(self.gates)})"


@dataclass
class _Run:
    run_dir: Path
    profiles: dict[Key, Shared] = dataclasses.field(default_factory=dict)
    versions: dict[str, str] = dataclasses.field(default_factory=dict)


_RUN: list[_Run] = []  # the run this process is in; a new run directory starts afresh (one run at a time)


def _state(ctx: GateContext) -> _Run:
    run_dir = Path(ctx.run_dir).resolve()
    if not _RUN or _RUN[0].run_dir != run_dir:
        _RUN[:] = [_Run(run_dir)]
    return _RUN[0]


def settings_key(ctx: GateContext, wl: Workload, p: NcuParams) -> Key:
    """Everything of a profile but its metrics: two requests with one key can be profiled as one."""
    program = runner.driver_command(str(ctx.repo_root / p.driver), wl, p.launch_skip + p.launch_count, ctx.fault,
                                    p.driver_args)
    return (p.ncu, tuple(program), p.kernel_filter, p.launch_skip, p.launch_count, p.clock_control, p.sections)


def plan(ctx: GateContext, wl: Workload, p: NcuParams) -> tuple[tuple[str, ...], int, tuple[str, ...]]:
    """(metrics, timeout_s, gates) of one profile for this gate's request and every peer's with the same settings:
    the union of their metrics in run order, the longest of their timeouts."""
    key = settings_key(ctx, wl, p)
    metrics, timeout, gates = list(p.profiled()), p.timeout_s, [ctx.spec.name]
    for spec in ctx.peers:
        q = spec.params
        if spec.name == ctx.spec.name or not isinstance(q, NcuParams):
            continue
        for name in q.workloads:
            other = ctx.config.workloads.get(name)
            if other is not None and settings_key(ctx, other, q) == key:
                metrics += q.profiled()
                timeout = max(timeout, q.timeout_s)
                gates.append(spec.name)
    order = [s.name for s in ctx.peers]
    gates.sort(key=lambda g: order.index(g) if g in order else -1)
    return tuple(dict.fromkeys(metrics)), timeout, tuple(dict.fromkeys(gates))


def profile(ctx: GateContext, wl: Workload, p: NcuParams, ncu: str, driver: Path) -> Shared:
    """This gate's profile of `wl`: the run's shared one when a gate already ran it with these settings and at least
    this gate's metrics, else profiled now for every peer that will ask for it."""
    state = _state(ctx)
    own = p.profiled()
    key = settings_key(ctx, wl, p)
    found = state.profiles.get(key)
    if found is None or not set(own) <= set(found.metrics):
        metrics, timeout, gates = plan(ctx, wl, p)
        prof = runner.profile(ctx, wl, dataclasses.replace(p, timeout_s=timeout), metrics, ncu, driver)
        found = state.profiles[key] = Shared(prof, ctx.spec.name, gates, metrics)
    if found.profile.csv is None and not found.profile.timed_out and set(own) < set(found.metrics):
        alone = runner.profile(ctx, wl, p, own, ncu, driver, f"logs/{ctx.spec.name}/{wl.name}.alone")
        return Shared(alone, ctx.spec.name, (ctx.spec.name,), own)
    return found


def version(ctx: GateContext, ncu: str) -> str:
    """`ncu --version`, asked once per run and tool."""
    versions = _state(ctx).versions
    if ncu not in versions:
        versions[ncu] = runner.ncu_version(ncu, ctx.repo_root)
    return versions[ncu]
