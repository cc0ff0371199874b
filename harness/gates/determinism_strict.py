"""Determinism gate for deterministic mode: the determinism gate's bit-exact repeats, every call made with
flashcore.attention(..., deterministic=True) (the flag's guarantee, docs/design.md)."""

from __future__ import annotations

import dataclasses
import functools
from types import ModuleType

from harness.gates import determinism, gpu
from harness.gates.base import Gate, GateContext
from harness.gates.registry import register
from harness.results import GateResult


def deterministic_flashcore(fc: ModuleType) -> ModuleType:
    """A copy of the flashcore module whose attention() always passes deterministic=True."""
    strict = ModuleType("flashcore_deterministic")
    strict.__dict__.update(fc.__dict__)
    strict.attention = functools.partial(fc.attention, deterministic=True)  # type: ignore[attr-defined]
    return strict


@register("determinism-strict")
class StrictDeterminismGate(Gate):
    Params = determinism.DeterminismParams
    needs_gpu = True

    def run(self, ctx: GateContext) -> GateResult:
        fc = gpu.flashcore_for(ctx)
        if isinstance(fc, GateResult):
            return fc
        result = determinism.check_workloads(ctx, deterministic_flashcore(fc), "cuda")
        return dataclasses.replace(result, details={**result.details, "mode": "deterministic=True"})
