"""Determinism gate for deterministic mode: bit-identical results across runs AND across launch configurations.

flashcore.attention(..., deterministic=True) promises the same bits whatever launch configuration a run could
pick. What changes the configuration today is the split-KV count, chosen from the GPU's SM count minus
`sm_margin` (kernel/tile_scheduler.h). So each workload's repeats cycle through `sm_margins` (as if the GPU had
that many fewer SMs), all with deterministic=True, and every repeat must equal the first bit for bit.
The gate also records flashcore.plan() for each margin with and without the flag: without it the split count
must change with the margin on at least one workload (`require_varied_plans`), or the sweep proved nothing
and the gate is an ERROR. The selftest makes attention() drop the flag (harness/selftest.py): this gate must then FAIL.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial
from types import ModuleType
from typing import Any

from harness.gates.base import FlashcoreGate, GateContext, SelfTest, finite_or_none, guarded
from harness.gates.determinism import DeterminismParams, RepeatStats, repeat_bits, verdict_determinism
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.schema import Workload, param
from harness.support import gpu, serving


@dataclass(frozen=True)
class StrictParams:
    workloads: tuple[str, ...] = param(workloads=True, fp8=True)  # plain dense and FP8 ones
    repeats: int = param(ge=2)  # calls per workload; repeat r uses sm_margins[r % len(sm_margins)]
    sm_margins: tuple[int, ...] = param()  # launch configurations the repeats cycle through
    require_varied_plans: bool = param(default=True)

    def as_determinism(self) -> DeterminismParams:
        return DeterminismParams(self.workloads, self.repeats)


def plans(fc: ModuleType, wl: Workload, q: Any, k: Any, v: Any, margins: tuple[int, ...]) -> dict[str, list[int]]:
    """Split counts per margin, with the deterministic flag (must not move) and without (may move)."""
    return {mode: [fc.plan(q, k, v, causal=wl.causal, deterministic=flag, sm_margin=m).num_splits for m in margins]
            for mode, flag in (("deterministic", True), ("default", False))}


def measure(fc: ModuleType, wl: Workload, seed: int, p: StrictParams) -> tuple[RepeatStats, Any]:
    if not (wl.plain or wl.fp8):
        raise ValueError(f"{wl.name}: determinism-strict runs plain dense and FP8 workloads (flashcore.plan takes "
                         f"[B, S, H, D] tensors, not the {wl.layout} layout)")
    inputs = serving.inputs_for(wl, seed, "cuda")  # (q, k, v), or an FP8 Batch with its descales
    q, k, v = (inputs.q, inputs.k, inputs.v) if isinstance(inputs, serving.Batch) else inputs
    plan = plans(fc, wl, q, k, v, p.sm_margins)

    def options(r: int) -> dict[str, Any]:
        return {"deterministic": True, "sm_margin": p.sm_margins[r % len(p.sm_margins)]}

    return repeat_bits(fc, wl, inputs, seed, p.repeats, "cuda", options, label="determinism-strict"), plan


def verdict_plans(details: dict[str, Any], p: StrictParams) -> Check:
    varied = sorted(n for n, d in details.items() if len(set(d.get("plans", {}).get("default", []))) > 1)
    fixed = all(len(set(d["plans"]["deterministic"])) == 1 for d in details.values() if "plans" in d)
    if not fixed:
        return Check("plans", "deterministic_split_counts", 1, 0, Status.FAIL, "==",
                     message="deterministic=True chose different split counts for different sm_margin")
    if p.require_varied_plans and not varied:
        return Check("plans", "workloads_with_varied_default_plans", 1, 0, Status.ERROR, ">=",
                     message=f"sm_margins {list(p.sm_margins)} changed no workload's split count without the flag: "
                             "the sweep tested no second launch configuration")
    return Check("plans", "workloads_with_varied_default_plans", 1 if p.require_varied_plans else 0, len(varied),
                 Status.PASS, ">=", message=f"split count moves with sm_margin without the flag on {varied}")


def check_workloads(ctx: GateContext, fc: ModuleType) -> GateResult:
    p: StrictParams = ctx.params
    checks: list[Check] = []
    details: dict[str, Any] = {}
    workloads = ctx.workloads()
    for i, wl in enumerate(workloads):
        ctx.step(f"{wl.name} ({i + 1}/{len(workloads)}), sm_margin {list(p.sm_margins)}")
        seed = gpu.workload_seed(ctx.seed, ctx.spec.name, wl.name)
        got, crashed = guarded(fc, wl.name, wl.label, seed, ctx.log, partial(measure, fc, wl, seed, p))
        if crashed is not None:
            checks.append(crashed[0])
            details[wl.name] = crashed[1]
            continue
        assert got is not None
        s, plan = got
        checks.append(verdict_determinism(wl.name, s, p.as_determinism()))
        details[wl.name] = {"shape": wl.label, **asdict(s), "max_abs_diff": finite_or_none(s.max_abs_diff),
                            "plans": plan}
        ctx.log(f"{wl.name} ({wl.label}): {details[wl.name]}")
    checks.append(verdict_plans(details, p))
    return ctx.result(checks, details={"base_seed": ctx.seed, "mode": "deterministic=True",
                                       "sm_margins": list(p.sm_margins), "workloads": details})


@register("determinism-strict")
class StrictDeterminismGate(FlashcoreGate):
    Params = StrictParams
    selftests = (SelfTest("strict-flag-ignored", "flag-dropped", "deterministic",
                          "deterministic=True dropped: sm_margin moves the split count and the bits"),)

    def measure(self, ctx: GateContext, fc: ModuleType) -> GateResult:
        return check_workloads(ctx, fc)
