"""Phase-7 sanitizer gate: the sanitizer gate's runs over every workload phase 1's sanitizer does not run (big
prefill shapes included; gates/phases.yaml leaves phase 1's lists out, so the main job checks each workload once),
inside a gate-level time budget.

Same machinery, params and verdicts as harness/gates/sanitizer.py, plus `budget_s`: no run outlives the budget;
a run it cuts short is an ERROR and the runs it leaves out are listed as not run, so a spent budget turns the
gate into an ERROR (harness/sanitizer/budget.py), never a pass. Tune per-run timeouts, `<tool>_workloads` and
`budget_s` in gates/phases.yaml. `tools` order is the report's order; runs start longest first by the run-cost
model (gates/sanitizer-cost.yaml), so a spent budget leaves out short runs, all named as not run.
In a sharded run the gate runs in parts as the sanitizer gate does (SanitizerGate.run_part).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.gates.base import GateContext
from harness.gates.registry import register
from harness.gates.sanitizer import SanitizerGate, SanitizerParams
from harness.results import GateResult
from harness.sanitizer.budget import Budget
from harness.schema import param


@dataclass(frozen=True, kw_only=True)
class SanitizerAllParams(SanitizerParams):
    budget_s: int = param(gt=0)  # every run of the gate together; past it the rest is not run (an ERROR)


@register("sanitizer-all")
class SanitizerAllGate(SanitizerGate):
    Params = SanitizerAllParams
    selftests = ()
    selftest_none = "the sanitizer gate's runner and parser over every workload (its planted cases)"

    def run(self, ctx: GateContext) -> GateResult:
        return self.run_part(ctx, Budget(ctx.params.budget_s))
