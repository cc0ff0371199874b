"""Random-weight Transformers models of the families the integrations gate runs (harness/gates/integrations.py), each
built from its family's config class (no download), and what the gate measures on them.

Each family gets three models with one set of weights: eager in float32 (the reference), eager in bf16 (the baseline:
what bf16 rounding alone costs) and FlashCore ("fcore") in bf16. The weights are the bf16-rounded ones in all three,
so the reference computes exactly on what the bf16 models hold. The family's traits stay, cut to size: Mistral windows
every layer; Qwen2, Qwen3, Gemma 2, Gemma 3 and GPT-OSS alternate sliding and full layers (sliding first); Gemma 2
soft-caps its scores; GPT-OSS adds per-head attention sinks and a mixture of experts. The initializer's spread
(`init_std`) makes the scores large enough that the window, the softcap and the sinks each move the logits well
past the error rule: a backend that drops one of them cannot pass. GPT-OSS's own init draws its sinks near 0, where
they would hardly matter; they are redrawn at `sinks_std`.

Measured per family: the prefill logits of an unpadded batch; greedy generation of a left-padded batch (the first
prompt `pad` tokens shorter: padding through the varlen path, decode steps through the KV cache, sliding layers on
their cut caches) against bf16 eager's tokens, and its step logits against the reference re-reading the generated
sequence whole. Where FlashCore's tokens part from eager's, the reference's logits of the two tokens at the first step
that differs are recorded: a gap within the error rule is a tie that bf16 rounding may flip either way.
"""

from __future__ import annotations

import copy
import warnings
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

# family -> its config class in transformers (AutoModelForCausalLM builds the causal LM of each)
FAMILIES = {"llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config",
            "gemma2": "Gemma2Config", "gemma3": "Gemma3TextConfig", "gpt_oss": "GptOssConfig"}
REFERENCE, BASELINE = "fp32", "eager"  # the names of the float32 and the bf16 eager models


class Settings(Protocol):
    """The model and run sizes (the integrations gate's Params), read-only."""

    @property
    def vocab(self) -> int: ...

    @property
    def hidden(self) -> int: ...

    @property
    def layers(self) -> int: ...

    @property
    def heads_q(self) -> int: ...

    @property
    def heads_kv(self) -> int: ...

    @property
    def head_dim(self) -> int: ...

    @property
    def batch(self) -> int: ...

    @property
    def seqlen(self) -> int: ...

    @property
    def new_tokens(self) -> int: ...

    @property
    def pad(self) -> int: ...

    @property
    def sliding_window(self) -> int: ...

    @property
    def softcap(self) -> float: ...

    @property
    def init_std(self) -> float: ...

    @property
    def sinks_std(self) -> float: ...

    @property
    def experts(self) -> int: ...

    @property
    def experts_per_token(self) -> int: ...


def missing(family: str) -> str:
    """Why this process's transformers cannot build `family` ("" when it can)."""
    import transformers

    name = FAMILIES[family]
    try:
        getattr(transformers, name)
    except (AttributeError, ImportError):
        return f"transformers {transformers.__version__} has no {name}: {family} does not run on this host"
    return ""


def config(family: str, s: Settings) -> Any:
    """The family's config at the settings' size, with no special tokens (greedy decoding never stops early)."""
    import transformers

    alternate = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(s.layers)]
    window = {"sliding_window": s.sliding_window}
    extra: dict[str, dict[str, Any]] = {
        "llama": {},
        "mistral": window,
        "qwen2": {**window, "use_sliding_window": True, "layer_types": alternate},
        "qwen3": {**window, "use_sliding_window": True, "layer_types": alternate},
        "gemma2": {**window, "layer_types": alternate, "attn_logit_softcapping": s.softcap,
                   "query_pre_attn_scalar": s.head_dim},
        "gemma3": {**window, "layer_types": alternate, "query_pre_attn_scalar": s.head_dim},
        "gpt_oss": {**window, "layer_types": alternate, "num_local_experts": s.experts,
                    "num_experts_per_tok": s.experts_per_token},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(transformers, FAMILIES[family])(
            vocab_size=s.vocab, hidden_size=s.hidden, intermediate_size=2 * s.hidden, num_hidden_layers=s.layers,
            num_attention_heads=s.heads_q, num_key_value_heads=s.heads_kv, head_dim=s.head_dim,
            max_position_embeddings=s.seqlen + s.new_tokens, initializer_range=s.init_std, pad_token_id=0,
            bos_token_id=None, eos_token_id=None, **extra[family])


def models(family: str, s: Settings, seed: int, device: str, backend: str) -> dict[str, Any]:
    """The reference, the baseline and `backend` (the registered attn_implementation name) on `device`, eval mode."""
    import torch
    import transformers

    cfg = config(family, s)
    torch.manual_seed(seed)
    built = {}
    for name, impl, dtype in ((REFERENCE, "eager", torch.float32), (BASELINE, "eager", torch.bfloat16),
                              (backend, backend, torch.bfloat16)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            built[name] = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(cfg), attn_implementation=impl,
                                                                        dtype=dtype)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, weight in built[REFERENCE].named_parameters():
            if name.endswith("self_attn.sinks"):
                weight.copy_(torch.randn(weight.shape, generator=g) * s.sinks_std)
    weights = {k: v.to(torch.bfloat16) for k, v in built[REFERENCE].state_dict().items()}
    for model in built.values():
        model.load_state_dict(weights)  # cast to each model's dtype: bf16-exact in the float32 one
    return {k: m.to(device).eval() for k, m in built.items()}


def _dist(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max().item())  # NaN stays NaN: never within a bound


def measure_family(family: str, s: Settings, seed: int, device: str, backend: str) -> dict[str, float]:
    """Prefill and left-padded generation of `family`: the backend's and the baseline's distances to the reference,
    and the first step where the backend's greedy tokens part from the baseline's (-1: none) with the reference's
    gap between the two tokens there (the largest over the rows)."""
    import torch

    ms = models(family, s, seed, device, backend)
    g = torch.Generator(device=device).manual_seed(seed)
    ids = torch.randint(0, s.vocab, (s.batch, s.seqlen), device=device, generator=g)
    mask = torch.ones_like(ids)
    mask[0, :s.pad] = 0
    with torch.no_grad():
        prefill = {k: m(ids).logits for k, m in ms.items()}
        gen = {k: ms[k].generate(ids, attention_mask=mask, max_new_tokens=s.new_tokens, do_sample=False,
                                 output_logits=True, return_dict_in_generate=True) for k in (BASELINE, backend)}
        seq = gen[backend].sequences
        whole = torch.cat([mask, torch.ones_like(seq[:, s.seqlen:])], 1)
        positions = (whole.cumsum(-1) - 1).clamp(min=0)  # as generate() numbers a left-padded row's tokens
        span = slice(s.seqlen - 1, seq.shape[1] - 1)
        reread = {k: ms[k](seq, attention_mask=whole, position_ids=positions).logits[:, span].float()
                  for k in (REFERENCE, BASELINE)}
    steps = torch.stack(gen[backend].logits, 1).float()
    ref = reread[REFERENCE]
    ours, theirs = seq[:, s.seqlen:], gen[BASELINE].sequences[:, s.seqlen:]
    flips = []  # (the reference's gap between the two tokens, step) at each row's first differing step
    for row in range(ours.shape[0]):
        differ = (ours[row] != theirs[row]).nonzero()
        if len(differ):
            t = int(differ[0])
            flips.append((abs(float(ref[row, t, ours[row, t]] - ref[row, t, theirs[row, t]])), float(t)))
    nan = [f for f in flips if f[0] != f[0]]
    gap, first_step = (nan or [max(flips, default=(0.0, -1.0))])[0]
    return {"prefill_err": _dist(prefill[backend], prefill[REFERENCE]),
            "prefill_base_err": _dist(prefill[BASELINE], prefill[REFERENCE]),
            "decode_err": _dist(steps, ref), "decode_base_err": _dist(reread[BASELINE], ref),
            "decode_steps": float(steps.shape[1]), "token_flip_step": first_step, "token_flip_gap": gap}
