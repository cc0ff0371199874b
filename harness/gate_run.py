"""One gate run in this process, never raising: the rule both the engine and its gate worker apply."""

from __future__ import annotations

import dataclasses
import traceback

from harness.gates import registry
from harness.gates.base import Gate, GateContext
from harness.results import GateResult, Status, unchecked_status
from harness.schema import GateSpec
from harness.support.gpu import nvtx_range


def run_gate(spec: GateSpec, ctx: GateContext, gpu_reason: str | None) -> GateResult:
    """The registered gate `spec.name` (an ERROR when none is registered)."""
    gate_cls = registry.get(spec.name)
    if gate_cls is None:
        return ctx.verdict_only(Status.ERROR, f"gate {spec.name!r} is not registered")
    return run_gate_class(gate_cls, spec, ctx, gpu_reason)


def run_gate_class(gate_cls: type[Gate], spec: GateSpec, ctx: GateContext, gpu_reason: str | None) -> GateResult:
    """Exceptions, wrong return values and check-less passes become ERRORs; a GPU gate without a GPU is NOT_RUN."""
    if gate_cls.needs_gpu and gpu_reason is not None:
        return ctx.verdict_only(Status.NOT_RUN, "not run: no usable CUDA GPU (see the run notice)")
    try:
        with nvtx_range(f"gate/{spec.name}"):
            result = gate_cls().run(ctx)
        if not isinstance(result, GateResult):
            raise TypeError(f"{gate_cls.__qualname__}.run returned {type(result).__name__}, not GateResult")
    except Exception as e:  # noqa: BLE001 - a crashing gate is an ERROR, never an abort
        ctx.log(f"gate {spec.name} raised:\n{traceback.format_exc()}")
        return ctx.verdict_only(Status.ERROR, f"gate crashed: {type(e).__name__}: {e}")
    if not result.checks and unchecked_status(result.status) is not result.status:  # the readers' rule too
        return dataclasses.replace(result, status=Status.ERROR, message="gate reported PASS without any check")
    return result
