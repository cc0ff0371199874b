"""Integrations gate (phase 7): FlashCore as PyTorch users call it, on the GPU.

- hf-prefill: a random-weight GQA Llama built from a config (transformers, no download) with
  attn_implementation="fcore" (flashcore/integrations/transformers.py): its logits against the eager model's within
  error_factor x SDPA's own distance to eager + error_slack.
- hf-decode: greedy generation through the KV cache (a prefill, then one-token steps): each step's logits against
  the SDPA model re-reading the whole generated sequence, the same bound.
- compiled: torch.compile(fullgraph=True) of a function calling flashcore.attention (traced as
  torch.ops.flashcore.attention) returns the eager call's bits.
- cuda-graph: flashcore.attention captured in a CUDA graph and replayed on fresh inputs copied into its buffers
  returns the eager call's bits on those inputs.
A planted kernel fault goes into every model call (the backend's debug_fault): hf-prefill and hf-decode must FAIL.
Without transformers the HF checks are an ERROR that says how to install it.
"""

from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from harness.gates.base import FlashcoreGate, GateContext, SelfTest, finite_or_none, margin_le
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.schema import WORKLOAD_HEAD_DIMS, param
from harness.support import gpu

INSTALL_HINT = "pip install 'transformers>=5' (the HF backend's tests and this gate build a model from a config)"


@dataclass(frozen=True)
class IntegrationsParams:
    vocab: int = param(gt=0)
    hidden: int = param(gt=0)
    layers: int = param(gt=0)
    heads_q: int = param(gt=0)
    heads_kv: int = param(gt=0)
    head_dim: int = param(choices=WORKLOAD_HEAD_DIMS)  # the head-dim table's (FA3's: multiples of 8 up to 256)
    batch: int = param(gt=0)
    seqlen: int = param(gt=0)  # prompt tokens
    new_tokens: int = param(gt=0)  # greedy decode steps through the KV cache
    error_factor: float = param(gt=0)  # ours vs eager <= factor x (SDPA vs eager) + slack
    error_slack: float = param(ge=0)


# ---- verdicts (pure) ------------------------------------------------------------------------------


def verdict_logits(subject: str, ours: float, sdpa: float, p: IntegrationsParams) -> Check:
    """Max |logits - reference| of FlashCore's model within factor x SDPA's + slack; NaN never passes."""
    if not math.isfinite(sdpa):
        return Check(subject, "logits_err", None, finite_or_none(ours), Status.ERROR,
                     message=f"SDPA's own distance is {sdpa}: nothing to judge against")
    limit = p.error_factor * sdpa + p.error_slack
    ok = ours <= limit  # False for NaN
    return Check(subject, "logits_err", limit, finite_or_none(ours), Status.PASS if ok else Status.FAIL, "<=",
                 margin=finite_or_none(margin_le(ours, limit)),
                 message=f"max|logits - reference| {ours:.4g} vs {p.error_factor:g} x SDPA's {sdpa:.4g} + "
                 f"{p.error_slack:g}")


def verdict_bits(subject: str, equal: bool, what: str) -> Check:
    return Check(subject, "bit_identical", 1, int(equal), Status.PASS if equal else Status.FAIL, "==",
                 message=f"{what}: {'the same bits' if equal else 'differs'} as the eager call")


# ---- measuring (GPU) ------------------------------------------------------------------------------


def _models(p: IntegrationsParams, fault: int) -> dict[str, Any]:
    import torch
    import transformers

    import flashcore.integrations.transformers as fct

    fct.register(debug_fault=fault)
    config = transformers.LlamaConfig(vocab_size=p.vocab, hidden_size=p.hidden, intermediate_size=2 * p.hidden,
                                      num_hidden_layers=p.layers, num_attention_heads=p.heads_q,
                                      num_key_value_heads=p.heads_kv, head_dim=p.head_dim,
                                      max_position_embeddings=p.seqlen + p.new_tokens)
    models = {}
    for impl in ("eager", "sdpa", fct.NAME):
        torch.manual_seed(0)  # one set of weights for every implementation
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=impl,
                                                                  dtype=torch.bfloat16)
        models[impl] = model.cuda().eval()
    return models


def measure_hf(p: IntegrationsParams, seed: int, fault: int) -> dict[str, float]:
    import torch

    import flashcore.integrations.transformers as fct

    models = _models(p, fault)
    g = torch.Generator(device="cuda").manual_seed(seed)
    ids = torch.randint(0, p.vocab, (p.batch, p.seqlen), device="cuda", generator=g)
    with torch.no_grad():
        logits = {k: m(ids).logits.float() for k, m in models.items()}
        sdpa_err = (logits["sdpa"] - logits["eager"]).abs().max().item()
        ours_err = (logits[fct.NAME] - logits["eager"]).abs().max().item()
        gen = models[fct.NAME].generate(ids[:1], max_new_tokens=p.new_tokens, do_sample=False, output_logits=True,
                                        return_dict_in_generate=True)
        steps = torch.stack(gen.logits, 1).float()[0]
        span = slice(p.seqlen - 1, p.seqlen - 1 + steps.shape[0])
        sdpa_full = models["sdpa"](gen.sequences).logits.float()[0, span]
        eager_full = models["eager"](gen.sequences).logits.float()[0, span]
        decode_err = (steps - sdpa_full).abs().max().item()
        decode_sdpa = (sdpa_full - eager_full).abs().max().item()
    return {"prefill_err": ours_err, "prefill_sdpa_err": sdpa_err, "decode_err": decode_err,
            "decode_sdpa_err": decode_sdpa, "decode_steps": float(steps.shape[0])}


def measure_op(p: IntegrationsParams, seed: int) -> dict[str, bool]:
    """torch.compile and CUDA-graph replays of flashcore.attention against eager calls, bit for bit."""
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
        compiled = torch.compile(layer, fullgraph=True)(q, k, v)
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
    hf: dict[str, float] | None
    hf_why: str
    op: dict[str, bool]


def verdicts(m: Measured, p: IntegrationsParams) -> list[Check]:
    checks = []
    if m.hf is None:
        checks += [Check(s, "logits_err", None, None, Status.ERROR, message=m.hf_why)
                   for s in ("hf-prefill", "hf-decode")]
    else:
        checks.append(verdict_logits("hf-prefill", m.hf["prefill_err"], m.hf["prefill_sdpa_err"], p))
        checks.append(verdict_logits("hf-decode", m.hf["decode_err"], m.hf["decode_sdpa_err"], p))
    checks.append(verdict_bits("compiled", m.op["compiled"], "torch.compile(fullgraph=True)"))
    checks.append(verdict_bits("cuda-graph", m.op["cuda_graph"], "CUDA graph replay on new inputs"))
    return checks


def measure(p: IntegrationsParams, seed: int, fault: int) -> Measured:
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        hf, why = None, f"transformers is not importable ({e}): {INSTALL_HINT}"
    else:
        hf, why = measure_hf(p, seed, fault), ""
    return Measured(hf, why, measure_op(p, seed + 1))


@register("integrations")
class IntegrationsGate(FlashcoreGate):
    Params = IntegrationsParams
    selftests = (SelfTest("hf-skip-row", "gate", "SKIP_ROW", "the first row of every query tile is never written, "
                          "inside a Transformers model (attn_implementation 'fcore'): its logits move away from "
                          "eager's"),)

    def measure(self, ctx: GateContext, fc: ModuleType) -> GateResult:
        p: IntegrationsParams = ctx.params
        seed = gpu.workload_seed(ctx.seed, ctx.spec.name, "model", 0)
        ctx.step("HF model (eager, sdpa, fcore), generate, torch.compile, CUDA graph")
        try:
            m = measure(p, seed, ctx.fault)
        except Exception as e:  # noqa: BLE001 - a crash is the gate's verdict
            return ctx.verdict_only(Status.ERROR, f"{type(e).__name__}: {e}")
        finally:
            gpu.free_memory()
        ctx.log(f"seed {seed}: hf {m.hf} ({m.hf_why}); op {m.op}")
        return ctx.result(verdicts(m, p), details={"seed": seed, "hf": m.hf, "hf_why": m.hf_why, "op": m.op})
