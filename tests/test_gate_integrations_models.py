"""The integrations gate's model families (harness/support/hf_models.py): each config builds with its family's traits,
and the gate's measurement and verdicts run on CPU through FlashCore's fallback (fallback="sdpa"), where a backend
that drops the sliding window, the softcap or the sinks turns that family red beside a clean control that passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import flashcore.integrations.transformers as fct  # noqa: E402
from harness.config import load_config  # noqa: E402
from harness.gates.integrations import IntegrationsParams, Measured, measure_hf, verdicts  # noqa: E402
from harness.results import Status  # noqa: E402
from harness.support import hf_models  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
# small enough for two shared CPU cores; the window cuts both prompts (40 and 48 tokens), init_std 0.1 gives scores
# of std ~1.3 (init_std^2 x hidden), as the gate's settings do, so that the softcap and the sinks matter
SMALL = IntegrationsParams(models=tuple(hf_models.FAMILIES), vocab=128, hidden=128, layers=2, heads_q=2, heads_kv=1,
                           head_dim=64, batch=2, seqlen=48, new_tokens=4, pad=8, sliding_window=16, softcap=2.0,
                           init_std=0.1, sinks_std=3.0, experts=2, experts_per_token=2, error_factor=2.0,
                           error_slack=0.01)
SEED = 1234


@pytest.fixture(autouse=True)
def _registered() -> None:
    fct.register(fallback="sdpa")


def _present(family: str) -> None:
    if why := hf_models.missing(family):
        pytest.skip(why)


def _judged(p: IntegrationsParams) -> dict[str, Status]:
    hf, not_run = measure_hf(p, SEED, "cpu", fct.NAME)
    return {c.workload: c.status for c in verdicts(Measured(hf, not_run, {"compiled": True, "cuda_graph": True}), p)
            if c.workload.startswith("hf-")}


@pytest.mark.parametrize("family", list(hf_models.FAMILIES))
def test_each_family_builds_with_its_traits(family: str) -> None:
    _present(family)
    cfg = hf_models.config(family, SMALL)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.head_dim) == (2, 128, 64)
    windowed = getattr(cfg, "sliding_window", None)
    if family == "llama":
        assert windowed is None
    else:
        assert windowed == SMALL.sliding_window
    if family in ("qwen2", "qwen3", "gemma2", "gemma3", "gpt_oss"):
        assert cfg.layer_types == ["sliding_attention", "full_attention"]  # both kinds of layer run
    if family == "gemma2":
        assert cfg.attn_logit_softcapping == SMALL.softcap
    if family == "gpt_oss":
        assert (cfg.num_local_experts, cfg.num_experts_per_tok) == (2, 2)


def test_gpt_oss_sinks_are_redrawn_large_and_shared_by_the_three_models() -> None:
    _present("gpt_oss")
    ms = hf_models.models("gpt_oss", SMALL, SEED, "cpu", fct.NAME)
    sinks = [dict(m.named_parameters())["model.layers.0.self_attn.sinks"] for m in ms.values()]
    assert sinks[0].abs().max() > 1.0  # GPT-OSS's own init draws them at the init's 0.02 spread
    assert all(torch.equal(s.float(), sinks[0].float()) for s in sinks)


def test_a_missing_family_is_named_with_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    # a class this transformers lacks (its lazy module resolves names on access: a deleted one comes back)
    monkeypatch.setitem(hf_models.FAMILIES, "gpt_oss", "GptOssV9Config")
    why = hf_models.missing("gpt_oss")
    assert "GptOssV9Config" in why and f"transformers {transformers.__version__}" in why
    hf, not_run = measure_hf(SMALL.__class__(**{**SMALL.__dict__, "models": ("gpt_oss",)}), SEED, "cpu", fct.NAME)
    assert hf == {} and not_run["gpt_oss"][0] is Status.NOT_APPLICABLE


@pytest.fixture(scope="module")
def clean() -> dict[str, Status]:
    present = tuple(f for f in SMALL.models if not hf_models.missing(f))
    return _judged(SMALL.__class__(**{**SMALL.__dict__, "models": present}))


def test_every_family_passes_on_the_cpu_fallback(clean: dict[str, Status]) -> None:
    assert clean and set(clean.values()) == {Status.PASS}, clean


@pytest.mark.parametrize(("family", "dropped"), [("mistral", "sliding_window"), ("qwen2", "sliding_window"),
                                                 ("gemma2", "softcap"), ("gpt_oss", "s_aux")])
def test_a_backend_dropping_a_family_trait_turns_it_red(family: str, dropped: str, clean: dict[str, Status],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _present(family)
    forward = fct.attention_forward

    def planted(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop(dropped, None)
        return forward(*args, **kwargs)

    monkeypatch.setattr(fct, "attention_forward", planted)  # the registered forward looks it up on each call
    judged = _judged(SMALL.__class__(**{**SMALL.__dict__, "models": (family,)}))
    assert judged[f"hf-{family}-prefill"] is Status.FAIL
    assert clean[f"hf-{family}-prefill"] is Status.PASS  # the control: nothing planted


@pytest.mark.gpu
def test_every_family_passes_on_the_kernel_at_the_gates_settings() -> None:
    """The gate's own settings (gates/phases.yaml) on the Hopper kernel: every family present passes."""
    p = next(g.params for ph in load_config(REPO / "gates").phases for g in ph.gates if g.name == "integrations")
    fct.register(fallback="error")
    hf, not_run = measure_hf(p, SEED, "cuda", fct.NAME)
    checks = verdicts(Measured(hf, not_run, {"compiled": True, "cuda_graph": True}), p)
    bad = [c for c in checks if c.status not in (Status.PASS, Status.NOT_APPLICABLE)]
    assert hf and not bad, [(c.workload, c.status, c.message) for c in bad]
