"""Integrations gate (phase 7): FlashCore as PyTorch users call it, on the GPU.

- hf-<family>-prefill, for each family in `models` (Llama, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3, GPT-OSS): a
  random-weight model built from the family's config class (transformers, no download; harness/support/hf_models.py:
  sliding windows that cut the prompt, Gemma 2's softcap, GPT-OSS's sinks) with attn_implementation="fcore"
  (flashcore/integrations/transformers.py): its bf16 logits against float32 eager's within error_factor x bf16
  eager's own distance to them + error_slack (the ROADMAP's rule, on logits).
- hf-<family>-decode: greedy generation of a left-padded batch (prompts of two lengths) through the KV cache: each
  step's logits against float32 eager re-reading the whole generated sequence, the same bound.
- hf-<family>-tokens: those greedy tokens are bf16 eager's, or part from them only at a tie: at the first step that
  differs the float32 reference scores the two tokens no further apart than bf16 eager's distance plus the decode
  bound (the most the two models' errors can flip). Later steps follow other prefixes and are not compared.
- hf-<family>: NOT_APPLICABLE, naming the class and the version, where the installed transformers lacks the family.
- compiled: torch.compile(fullgraph=True) of a function calling flashcore.attention (traced as
  torch.ops.flashcore.attention) returns the eager call's bits.
- cuda-graph: flashcore.attention captured in a CUDA graph and replayed on fresh inputs copied into its buffers
  returns the eager call's bits on those inputs.
A planted kernel fault goes into every model call the backend makes through flashcore.attention (the backend's
debug_fault; Llama's unpadded prefill): hf-llama-prefill must FAIL. Without transformers each family is an ERROR
that says how to install it; a family that crashes is an ERROR of its own, the others still judged.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from types import ModuleType

from harness.gates.base import FlashcoreGate, GateContext, SelfTest, finite_or_none, margin_le
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.schema import PHASES_FILE, WORKLOAD_HEAD_DIMS, ConfigError, param
from harness.support import gpu, hf_models

INSTALL_HINT = "pip install 'transformers>=5' (the HF backend's tests and this gate build a model from a config)"


@dataclass(frozen=True)
class IntegrationsParams:
    models: tuple[str, ...] = param(choices=tuple(hf_models.FAMILIES))  # the families run, in this order
    vocab: int = param(gt=0)
    hidden: int = param(gt=0)
    layers: int = param(gt=0)
    heads_q: int = param(gt=0)
    heads_kv: int = param(gt=0)
    head_dim: int = param(choices=WORKLOAD_HEAD_DIMS)  # the head-dim table's (FA3's: multiples of 8 up to 256)
    batch: int = param(gt=0)
    seqlen: int = param(gt=0)  # prompt tokens
    new_tokens: int = param(gt=0)  # greedy decode steps through the KV cache
    pad: int = param(gt=0)  # the generated batch's first prompt is this many tokens shorter (left padding)
    sliding_window: int = param(gt=0)  # the sliding layers' window: shorter than the shorter prompt, so it cuts
    softcap: float = param(gt=0)  # Gemma 2's attn_logit_softcapping
    init_std: float = param(gt=0)  # the initializer's spread (the configs' initializer_range)
    sinks_std: float = param(gt=0)  # GPT-OSS's sinks drawn N(0, sinks_std^2)
    experts: int = param(gt=0)  # GPT-OSS's mixture of experts
    experts_per_token: int = param(gt=0)
    error_factor: float = param(gt=0)  # ours vs fp32 eager <= factor x (bf16 eager vs fp32 eager) + slack
    error_slack: float = param(ge=0)

    def __post_init__(self) -> None:
        key = "gates.integrations"
        if len(set(self.models)) != len(self.models):
            raise ConfigError(PHASES_FILE, f"{key}.models", list(self.models), "each family at most once")
        if self.sliding_window >= self.seqlen - self.pad:
            raise ConfigError(PHASES_FILE, f"{key}.sliding_window", self.sliding_window,
                              f"below the shorter prompt's {self.seqlen - self.pad} tokens (seqlen - pad): a window "
                              "that cuts nothing cannot show a backend that drops it")
        if self.heads_q % self.heads_kv:
            raise ConfigError(PHASES_FILE, f"{key}.heads_kv", self.heads_kv, f"must divide heads_q ({self.heads_q})")
        if self.experts_per_token > self.experts:
            raise ConfigError(PHASES_FILE, f"{key}.experts_per_token", self.experts_per_token,
                              f"at most experts ({self.experts})")


# ---- verdicts (pure) ------------------------------------------------------------------------------


def logits_limit(base: float, p: IntegrationsParams) -> float:
    return p.error_factor * base + p.error_slack


def verdict_logits(subject: str, ours: float, base: float, p: IntegrationsParams) -> Check:
    """Max |logits - fp32 eager's| of FlashCore's model within factor x bf16 eager's + slack; NaN never passes."""
    if not math.isfinite(base):
        return Check(subject, "logits_err", None, finite_or_none(ours), Status.ERROR,
                     message=f"bf16 eager's own distance is {base}: nothing to judge against")
    limit = logits_limit(base, p)
    ok = ours <= limit  # False for NaN
    return Check(subject, "logits_err", limit, finite_or_none(ours), Status.PASS if ok else Status.FAIL, "<=",
                 margin=finite_or_none(margin_le(ours, limit)),
                 message=f"max|logits - fp32 eager's| {ours:.4g} vs {p.error_factor:g} x bf16 eager's {base:.4g} + "
                 f"{p.error_slack:g}")


def verdict_tokens(subject: str, m: dict[str, float], p: IntegrationsParams) -> Check:
    """Greedy tokens equal to bf16 eager's, or parting from them at a tie: the fp32 reference's gap between the two
    tokens at the first step that differs within bf16 eager's distance + the decode bound (what the two models'
    errors may move a logit by); NaN never passes."""
    base, gap, step = m["decode_base_err"], m["token_flip_gap"], int(m["token_flip_step"])
    if not math.isfinite(base):
        return Check(subject, "token_tie_gap", None, finite_or_none(gap), Status.ERROR,
                     message=f"bf16 eager's own distance is {base}: no tie can be judged")
    limit = base + logits_limit(base, p)
    ok = gap <= limit  # False for NaN
    if step < 0:
        what = f"the same {int(m['decode_steps'])} greedy tokens as bf16 eager in every left-padded row"
    else:
        what = (f"tokens part from bf16 eager's at step {step}: fp32 eager scores the two {gap:.4g} apart, "
                f"{'within' if ok else 'beyond'} a tie's {limit:.4g} (bf16 eager's {base:.4g} + the decode bound)")
    return Check(subject, "token_tie_gap", limit, finite_or_none(gap), Status.PASS if ok else Status.FAIL, "<=",
                 margin=finite_or_none(margin_le(gap, limit)), message=what)


def verdict_bits(subject: str, equal: bool, what: str) -> Check:
    return Check(subject, "bit_identical", 1, int(equal), Status.PASS if equal else Status.FAIL, "==",
                 message=f"{what}: {'the same bits' if equal else 'differs'} as the eager call")


# ---- measuring (GPU) ------------------------------------------------------------------------------


def measure_hf(p: IntegrationsParams, seed: int, device: str, backend: str, seconds: dict[str, float] | None = None,
               ) -> tuple[dict[str, dict[str, float]], dict[str, tuple[Status, str]]]:
    """Each family's numbers (harness/support/hf_models.py), on `device` with the attention backend registered as
    `backend`; and the families not measured: NOT_APPLICABLE where this transformers lacks the class, ERROR where the
    family crashed (the others still run). `seconds` gets each family's wall time (where the gate's time goes)."""
    measured, not_run = {}, {}
    seconds = {} if seconds is None else seconds
    for family in p.models:
        if why := hf_models.missing(family):
            not_run[family] = (Status.NOT_APPLICABLE, why)
            continue
        start = time.perf_counter()
        try:
            measured[family] = hf_models.measure_family(family, p, gpu.workload_seed(seed, "hf", family), device,
                                                        backend)
        except Exception as e:  # noqa: BLE001 - this family's verdict; the others still run
            not_run[family] = (Status.ERROR, f"{type(e).__name__}: {e}")
        finally:
            gpu.free_memory()
            seconds[family] = round(time.perf_counter() - start, 2)
    return measured, not_run


def measure_op(p: IntegrationsParams, seed: int, seconds: dict[str, float]) -> dict[str, bool]:
    """torch.compile and CUDA-graph replays of flashcore.attention against eager calls, bit for bit (`seconds`: the
    compiled call's wall time, compilation included)."""
    import torch

    import flashcore

    g = torch.Generator(device="cuda").manual_seed(seed)

    def inputs() -> list[torch.Tensor]:
        return [torch.randn(p.batch, p.seqlen, h, p.head_dim, device="cuda", dtype=torch.bfloat16, generator=g)
                for h in (p.heads_q, p.heads_kv, p.heads_kv)]

    def layer(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return flashcore.attention(q, k, v, causal=True)

    q, k, v = inputs()
    with torch.no_grad():
        eager = layer(q, k, v)
        start = time.perf_counter()
        compiled = torch.compile(layer, fullgraph=True)(q, k, v)
        seconds["compile"] = round(time.perf_counter() - start, 2)
        static = inputs()
        layer(*static)  # warm-up outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = layer(*static)
        fresh = inputs()
        for buf, new in zip(static, fresh, strict=True):
            buf.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        want = layer(*fresh)
    return {"compiled": all(torch.equal(a, b) for a, b in zip(compiled, eager, strict=True)),
            "cuda_graph": all(torch.equal(a, b) for a, b in zip(captured, want, strict=True))}


@dataclass
class Measured:
    hf: dict[str, dict[str, float]]  # family -> its numbers
    hf_not_run: dict[str, tuple[Status, str]]  # family -> NOT_APPLICABLE or ERROR, and why
    op: dict[str, bool]
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per family, "transformers", "compile"


def verdicts(m: Measured, p: IntegrationsParams) -> list[Check]:
    checks = []
    for family in p.models:
        if family not in m.hf:
            status, why = m.hf_not_run.get(family, (Status.ERROR, "not measured"))
            checks.append(Check(f"hf-{family}", "logits_err", None, None, status, message=why))
            continue
        f = m.hf[family]
        checks.append(verdict_logits(f"hf-{family}-prefill", f["prefill_err"], f["prefill_base_err"], p))
        checks.append(verdict_logits(f"hf-{family}-decode", f["decode_err"], f["decode_base_err"], p))
        checks.append(verdict_tokens(f"hf-{family}-tokens", f, p))
    checks.append(verdict_bits("compiled", m.op["compiled"], "torch.compile(fullgraph=True)"))
    checks.append(verdict_bits("cuda-graph", m.op["cuda_graph"], "CUDA graph replay on new inputs"))
    return checks


def measure(p: IntegrationsParams, seed: int, fault: int) -> Measured:
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        why = f"transformers is not importable ({e}): {INSTALL_HINT}"
        hf: dict[str, dict[str, float]] = {}
        not_run = {f: (Status.ERROR, why) for f in p.models}
    else:
        import flashcore.integrations.transformers as fct

        seconds["transformers"] = round(time.perf_counter() - start, 2)
        fct.register(debug_fault=fault)
        hf, not_run = measure_hf(p, seed, "cuda", fct.NAME, seconds)
    return Measured(hf, not_run, measure_op(p, seed + 1, seconds), seconds)


@register("integrations")
class IntegrationsGate(FlashcoreGate):
    Params = IntegrationsParams
    selftests = (SelfTest("hf-skip-row", "gate", "SKIP_ROW", "the first row of every query tile is never written, "
                          "inside a Transformers model (attn_implementation 'fcore'): its logits move away from "
                          "eager's"),)

    def measure(self, ctx: GateContext, fc: ModuleType) -> GateResult:
        p: IntegrationsParams = ctx.params
        seed = gpu.workload_seed(ctx.seed, ctx.spec.name, "model", 0)
        ctx.step(f"HF models ({', '.join(p.models)}: fp32 and bf16 eager, fcore), generate, torch.compile, CUDA graph")
        try:
            m = measure(p, seed, ctx.fault)
        except Exception as e:  # noqa: BLE001 - a crash is the gate's verdict
            return ctx.verdict_only(Status.ERROR, f"{type(e).__name__}: {e}")
        finally:
            gpu.free_memory()
        not_run = {f: f"{status.value}: {why}" for f, (status, why) in m.hf_not_run.items()}
        ctx.log(f"seed {seed}: hf {m.hf} (not run: {not_run}); op {m.op}; seconds {m.seconds}")
        return ctx.result(verdicts(m, p), details={"seed": seed, "hf": m.hf, "hf_not_run": not_run, "op": m.op,
                                                   "seconds": m.seconds})
