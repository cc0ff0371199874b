"""Random-shapes gate: calls drawn fresh every run, beside the fixed workloads the other gates judge.

`dense_draws` dense calls (flashcore.attention in bf16/fp16 and flashcore.attention_fp8, random shapes at tile
edges, GQA, decode rows, Sq > Sk, packed qkv views) and `serving_draws` serving calls (varlen batches with empty
sequences and seqused_k; KV caches with slots, paged caches, appends, windows, softcap), drawn from the run's seed
(harness/support/random_calls.py, random_serving.py) and judged against the float32 reference
(harness/support/random_judge.py: error <= error_factor x that of torch rounding as the kernel does + slack, rows
without keys 0 / -inf, nothing NaN, the LSE within lse_rel, FP8's within fp8_lse_rel plus 2^fp8_score_bits of the
row's score magnitude). One check per family: failing draws == 0; every failing draw is listed with the seed that
repeats it (FLASHCORE_FUZZ_SEED=<seed> with tests/test_random_*_gpu.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from harness.gates.base import FlashcoreGate, GateContext, SelfTest
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.schema import param
from harness.support import gpu
from harness.support.random_calls import Failure, run_dense
from harness.support.random_judge import Judge
from harness.support.random_serving import run_serving


@dataclass(frozen=True)
class RandomShapesParams:
    dense_draws: int = param(ge=1)
    serving_draws: int = param(ge=0)
    error_factor: float = param(gt=0)
    error_slack: float = param(ge=0)
    lse_rel: float = param(gt=0)
    fp8_lse_rel: float = param(gt=0)
    fp8_score_bits: float = param()  # log2 of the FP8 LSE's allowance per unit of score magnitude
    max_scores: int = param(ge=1)  # batch x heads_q x Sq x Sk of a dense draw: the references' score matrices


def judge_of(p: RandomShapesParams) -> Judge:
    return Judge(p.error_factor, p.error_slack, p.lse_rel, p.fp8_lse_rel, 2.0 ** p.fp8_score_bits)


# ---- verdict (pure) -------------------------------------------------------------------------------


def verdict_family(family: str, draws: int, ran: int, failures: list[Failure], seed: int) -> Check:
    """One family's check: every draw ran and none failed."""
    if ran < draws:
        return Check(family, "failing_draws", 0, len(failures), Status.ERROR, "==",
                     message=f"only {ran} of {draws} draws ran (seed {seed})")
    shown = "; ".join(f"#{f.index} {f.what}: {f.problem}" for f in failures[:3])
    more = f" (+{len(failures) - 3} more)" if len(failures) > 3 else ""
    text = f"{len(failures)} of {draws} draws failed, seed {seed}" + (f": {shown}{more}" if failures else "")
    return Check(family, "failing_draws", 0, len(failures), Status.FAIL if failures else Status.PASS, "==",
                 margin=float(-len(failures)), message=text)


@register("random-shapes")
class RandomShapesGate(FlashcoreGate):
    Params = RandomShapesParams
    selftests = (SelfTest("random-skip-row", "gate", "SKIP_ROW",
                          "the first row of every query tile is never written (NaN left in the poisoned output)"),)

    def measure(self, ctx: GateContext, fc: ModuleType) -> GateResult:
        return check_draws(ctx, fc, "cuda")


def check_draws(ctx: GateContext, fc: ModuleType, device: str) -> GateResult:
    """Both families' draws from the run's seed, one check each (device "cpu": the CPU tests' stand-in kernels)."""
    p: RandomShapesParams = ctx.params
    j = judge_of(p)
    checks: list[Check] = []
    details: dict[str, Any] = {}
    for family, draws in (("dense", p.dense_draws), ("serving", p.serving_draws)):
        if draws == 0:
            continue
        seed = gpu.workload_seed(ctx.seed, ctx.spec.name, family)
        ran = 0

        def progress(i: int, what: str, problem: str | None, family: str = family, draws: int = draws) -> None:
            nonlocal ran
            ran = i + 1
            ctx.log(f"{family} #{i} {what}: {problem or 'ok'}")
            if i % 25 == 0:
                ctx.step(f"{family} draw {i + 1}/{draws}")

        if family == "dense":
            failures = run_dense(fc, seed, draws, j, p.max_scores, device, progress)
        else:
            failures = run_serving(fc, seed, draws, j, device, progress)
        gpu.free_memory()
        checks.append(verdict_family(family, draws, ran, failures, seed))
        details[family] = {"seed": seed, "draws": draws, "ran": ran,
                           "failures": [{"index": f.index, "what": f.what, "problem": f.problem} for f in failures]}
    return ctx.result(checks, details={"base_seed": ctx.seed, **details})
