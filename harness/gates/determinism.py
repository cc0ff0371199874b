"""Determinism gate: the same inputs give bit-identical output and LSE on every repeat.

Per workload: fresh inputs, `repeats` calls into fresh poisoned buffers, each compared bit for bit with the
first (on the raw bit patterns, so NaN payloads and unwritten elements compare too). Bit-exact is the
definition of this gate: any mismatching repeat fails it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from types import ModuleType
from typing import Any

from harness.gates.base import FlashcoreGate, GateContext, SelfTest, finite_or_none, guarded
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.schema import Workload, param
from harness.support import gpu, serving


@dataclass(frozen=True)
class DeterminismParams:
    workloads: tuple[str, ...] = param(workloads=True, serving=True)
    repeats: int = param(ge=2)  # calls per workload, the first being the one the others must equal


@dataclass(frozen=True)
class RepeatStats:
    seed: int
    repeats: int  # calls made
    mismatches: int  # repeats (after the first) whose output or LSE bits differ from the first
    max_abs_diff: float  # largest |repeat - first| over finite output and LSE elements


# ---- verdict (pure) -------------------------------------------------------------------------------


def verdict_determinism(subject: str, s: RepeatStats, p: DeterminismParams) -> Check:
    if s.repeats < p.repeats:
        return Check(subject, "mismatching_repeats", 0, s.mismatches, Status.ERROR, "==",
                     message=f"only {s.repeats} of {p.repeats} repeats ran")
    ok = s.mismatches == 0
    return Check(subject, "mismatching_repeats", 0, s.mismatches, Status.PASS if ok else Status.FAIL, "==",
                 margin=float(-s.mismatches),
                 message=f"{s.mismatches} of {s.repeats - 1} repeats differ from the first"
                 f" (max |diff| {s.max_abs_diff:.3g}), seed {s.seed}")


# ---- measuring ------------------------------------------------------------------------------------


def _max_abs_diff(a: Any, b: Any) -> float:
    import torch

    d = (a.float() - b.float()).abs()
    d = d[torch.isfinite(d)]
    return float(d.max()) if d.numel() else 0.0


def measure(fc: ModuleType, wl: Workload, seed: int, repeats: int, device: str,
            step: Callable[[int], None] | None = None) -> RepeatStats:
    return repeat_bits(fc, wl, serving.inputs_for(wl, seed, device), seed, repeats, device, step=step)


def repeat_bits(fc: ModuleType, wl: Workload, inputs: Any, seed: int, repeats: int, device: str,
                options: Callable[[int], dict[str, Any]] | None = None, step: Callable[[int], None] | None = None,
                label: str = "determinism") -> RepeatStats:
    """`repeats` calls on the same inputs (serving.inputs_for's form) into fresh poisoned buffers, each compared bit
    for bit with the first; `options(r)`: keyword arguments of call r (e.g. the launch configuration it asks for)."""
    import torch

    first_out, first_lse = gpu.poisoned_outputs(wl, device)
    mismatches, worst = 0, 0.0
    with gpu.nvtx_range(f"{label}/{wl.name}"):
        serving.run(fc, wl, inputs, first_out, first_lse, **(options(0) if options else {}))
        for r in range(1, repeats):
            if step is not None and r % 10 == 0:
                step(r)
            out, lse = gpu.poisoned_outputs(wl, device)
            serving.run(fc, wl, inputs, out, lse, **(options(r) if options else {}))
            same = torch.equal(gpu.bits(out), gpu.bits(first_out)) and torch.equal(gpu.bits(lse), gpu.bits(first_lse))
            if not same:
                mismatches += 1
                worst = max(worst, _max_abs_diff(out, first_out), _max_abs_diff(lse, first_lse))
            del out, lse
    return RepeatStats(seed, repeats, mismatches, worst)


@register("determinism")
class DeterminismGate(FlashcoreGate):
    Params = DeterminismParams
    selftests = (SelfTest("nondeterministic", "phase1", "NONDETERMINISTIC",
                          "a racy global accumulation feeds the output"),)

    def measure(self, ctx: GateContext, fc: ModuleType) -> GateResult:
        return check_workloads(ctx, fc, "cuda")


def _step_repeat(ctx: GateContext, where: str, repeats: int, r: int) -> None:
    ctx.step(f"{where} repeat {r + 1}/{repeats}")


def check_workloads(ctx: GateContext, fc: ModuleType, device: str) -> GateResult:
    p: DeterminismParams = ctx.params
    workloads = ctx.workloads()
    checks: list[Check] = []
    details: dict[str, Any] = {}
    for i, wl in enumerate(workloads):
        where = f"{wl.name} ({i + 1}/{len(workloads)})"
        ctx.step(where)
        seed = gpu.workload_seed(ctx.seed, ctx.spec.name, wl.name)
        s, crashed = guarded(fc, wl.name, wl.label, seed, ctx.log,
                             partial(measure, fc, wl, seed, p.repeats, device,
                                     partial(_step_repeat, ctx, where, p.repeats)))
        if crashed is not None:
            checks.append(crashed[0])
            details[wl.name] = crashed[1]
            continue
        assert s is not None
        checks.append(verdict_determinism(wl.name, s, p))
        details[wl.name] = {"shape": wl.label, **asdict(s), "max_abs_diff": finite_or_none(s.max_abs_diff)}
        ctx.log(f"{wl.name} ({wl.label}): {details[wl.name]}")
    return ctx.result(checks, details={"base_seed": ctx.seed, "workloads": details})

