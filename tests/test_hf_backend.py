"""flashcore.integrations.transformers on CPU (fallback="sdpa"): a small random-weight GQA Llama, no download."""

from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
import flashcore  # noqa: E402
import flashcore.integrations.transformers as fct  # noqa: E402

PROMPT = 40


def _config(head_dim: int = 64) -> transformers.LlamaConfig:
    # GQA 4/2, two layers; head dim 64 (FlashCore's head dims are 64, 128, 256)
    return transformers.LlamaConfig(vocab_size=128, hidden_size=4 * head_dim, intermediate_size=512,
                                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                    head_dim=head_dim, max_position_embeddings=256)


def _model(impl: str, device: str = "cpu") -> transformers.PreTrainedModel:
    torch.manual_seed(0)  # the same weights for every implementation
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(_config()), attn_implementation=impl,
                                                              dtype=torch.bfloat16)
    return model.to(device).eval()


def _within_fa_rule(logits: dict, ours: str, base: str, ref: str, keep: torch.Tensor | None = None) -> bool:
    """FlashAttention's own accuracy rule: `ours` no further from `ref` than twice `base`'s distance, + 1e-3
    (over the `keep` positions: a padded batch's tokens)."""
    o, b, r = (logits[n] if keep is None else logits[n][keep] for n in (ours, base, ref))
    return (o - r).abs().max().item() <= 2 * (b - r).abs().max().item() + 1e-3


def _greedy(models: dict, names: tuple[str, ...], ids: torch.Tensor, new: int, **kw: object) -> dict:
    with torch.no_grad():
        return {k: models[k].generate(ids, max_new_tokens=new, do_sample=False, **kw) for k in names}


def _left_padded_greedy(models: dict, names: tuple[str, ...], seed: int, pad: int) -> dict:
    """6 greedy tokens of a batch of 2 random prompts, the first left-padded by `pad` tokens, from each model."""
    ids = torch.randint(0, 128, (2, PROMPT), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(2, PROMPT, dtype=torch.long)
    mask[0, :pad] = 0
    return _greedy(models, names, ids, 6, attention_mask=mask)


@pytest.fixture(scope="module")
def models() -> dict[str, transformers.PreTrainedModel]:
    fct.register(fallback="sdpa")
    return {impl: _model(impl) for impl in ("eager", "sdpa", fct.NAME)}


def test_the_name_has_no_flash_in_it() -> None:
    # Transformers routes every attn_implementation containing "flash" to its FlashAttention/kernels-hub loader
    assert "flash" not in fct.NAME


def test_prefill_logits_within_sdpas_tolerance_against_eager(models) -> None:
    ids = torch.randint(0, 128, (2, PROMPT), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = {k: m(ids).logits.float() for k, m in models.items()}
    assert models[fct.NAME].config._attn_implementation == fct.NAME
    assert _within_fa_rule(logits, fct.NAME, "sdpa", "eager")


def test_greedy_generation_with_a_kv_cache_matches_sdpa(models) -> None:
    ids = torch.randint(0, 128, (1, PROMPT), generator=torch.Generator().manual_seed(2))
    out = _greedy(models, ("sdpa", fct.NAME), ids, 8)
    assert out[fct.NAME].shape == (1, PROMPT + 8) and torch.equal(out[fct.NAME], out["sdpa"])


def test_a_padded_batch_matches_sdpa_on_its_tokens(models) -> None:
    ids = torch.randint(0, 128, (3, PROMPT), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(3, PROMPT, dtype=torch.long)
    mask[1, :5] = 0  # left padding
    mask[2, :PROMPT - 1] = 0  # one token
    with torch.no_grad():
        logits = {k: models[k](ids, attention_mask=mask).logits.float() for k in ("eager", "sdpa", fct.NAME)}
    keep = mask.bool()
    assert _within_fa_rule(logits, fct.NAME, "sdpa", "eager", keep)


def test_a_padded_batch_generates_as_sdpa_does(models) -> None:
    out = _left_padded_greedy(models, ("sdpa", fct.NAME), seed=4, pad=7)
    assert torch.equal(out[fct.NAME], out["sdpa"])


def test_padded_rows_are_zero_and_a_bad_mask_is_refused() -> None:
    q = torch.randn(2, 4, 6, 64, dtype=torch.bfloat16)
    k = torch.randn(2, 2, 6, 64, dtype=torch.bfloat16)
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    out, _ = fct.attention_forward(None, q, k, k, mask, is_causal=True, fallback="sdpa")
    assert (out[0, :2] == 0).all() and out[0, 2:].abs().sum() > 0
    ref, _ = flashcore.attention(q[:1, :, 2:].transpose(1, 2), k[:1, :, 2:].transpose(1, 2),
                                 k[:1, :, 2:].transpose(1, 2), causal=True, fallback="sdpa")
    torch.testing.assert_close(out[0, 2:].float(), ref[0].float(), atol=2e-2, rtol=2e-2)
    with pytest.raises(flashcore.FlashCoreError, match="2-D padding mask"):
        fct.attention_forward(None, q, k, k, mask[:, None, None, :], fallback="sdpa")


def test_grad_mode_is_refused_with_the_alternatives(models) -> None:
    with pytest.raises(flashcore.FlashCoreError, match="no_grad"):
        models[fct.NAME](torch.randint(0, 128, (1, 8)))


@pytest.mark.parametrize(("kwargs", "named"), [({"output_attentions": True}, "output_attentions")])
def test_what_flashcore_lacks_is_refused_by_name(kwargs, named) -> None:
    q = torch.randn(1, 4, 8, 64, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(flashcore.FlashCoreError, match=f"^{named}: "):
        fct.attention_forward(None, q, k, k, None, fallback="sdpa", **kwargs)


# ---- sliding windows and softcap: a small random Mistral (every layer windowed) and Gemma 2 (softcap, alternating
# sliding and global layers), windows shorter than the prompt so the window really cuts


def _windowed(kind: str, impl: str, dtype: torch.dtype = torch.bfloat16) -> transformers.PreTrainedModel:
    common = {"vocab_size": 128, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 256,
              "sliding_window": 12}
    config: transformers.PretrainedConfig
    if kind == "mistral":
        config = transformers.MistralConfig(**common)
    else:
        config = transformers.Gemma2Config(**common, attn_logit_softcapping=20.0, final_logit_softcapping=30.0,
                                           query_pre_attn_scalar=64)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=impl, dtype=dtype)
    return model.eval()


@pytest.fixture(scope="module", params=["mistral", "gemma2"])
def windowed(request) -> dict[str, transformers.PreTrainedModel]:
    """Eager in float32 (the reference: Gemma 2 has no SDPA path), eager and FlashCore in bf16."""
    fct.register(fallback="sdpa")
    return {"fp32": _windowed(request.param, "eager", torch.float32), "eager": _windowed(request.param, "eager"),
            fct.NAME: _windowed(request.param, fct.NAME)}


def test_windowed_and_softcapped_models_match_eager(windowed) -> None:
    """FlashCore's bf16 logits are as close to float32 eager as bf16 eager's are (FA's own rule: 2x + 1e-3)."""
    ids = torch.randint(0, 128, (2, PROMPT), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        logits = {k: m(ids).logits.float() for k, m in windowed.items()}
    assert _within_fa_rule(logits, fct.NAME, "eager", "fp32")


def test_windowed_models_left_padded_generation_matches_eager(windowed) -> None:
    """Greedy tokens of a left-padded batch (the sliding layers' caches are cut to the window) equal float32 eager's
    (bf16 eager itself leaves them at a near-tie on this draw; FlashCore's fallback computes in float32)."""
    out = _left_padded_greedy(windowed, ("fp32", fct.NAME), seed=6, pad=9)
    assert torch.equal(out[fct.NAME], out["fp32"])


def test_a_window_that_is_ignored_would_be_caught() -> None:
    """The control for the two tests above: FlashCore without the window differs from eager's windowed layer."""
    q = torch.randn(1, 4, 40, 64, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 40, 64, dtype=torch.bfloat16)
    with_window, _ = fct.attention_forward(None, q, k, k, None, is_causal=True, fallback="sdpa", sliding_window=12)
    without, _ = fct.attention_forward(None, q, k, k, None, is_causal=True, fallback="sdpa")
    # rows that see at most 12 keys are not cut by the window; the later ones are
    torch.testing.assert_close(with_window[:, :12].float(), without[:, :12].float(), atol=2e-2, rtol=2e-2)
    assert (with_window[:, 12:].float() - without[:, 12:].float()).abs().max() > 0.1


def test_window_and_softcap_arguments_are_checked() -> None:
    assert fct.window(None, True) == (-1, -1)
    assert fct.window(12, True) == (11, 0) and fct.window(12, False) == (11, 11)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(flashcore.FlashCoreError, match="sliding_window"):
            fct.window(bad, True)
    q = torch.randn(1, 4, 8, 64, dtype=torch.bfloat16)
    k = torch.randn(1, 2, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(flashcore.FlashCoreError, match="softcap"):
        fct.attention_forward(None, q, k, k, None, fallback="sdpa", softcap=-1.0)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["mistral", "gemma2"])
def test_windowed_models_on_the_kernel_match_eager(kind: str) -> None:
    """The same models on the Hopper kernel (window and softcap in the kernel's mask), prefill and a left-padded
    batch, against float32 eager on the GPU."""
    fct.register(fallback="error")
    ms = {"fp32": _windowed(kind, "eager", torch.float32).cuda(), "eager": _windowed(kind, "eager").cuda(),
          fct.NAME: _windowed(kind, fct.NAME).cuda()}
    ids = torch.randint(0, 128, (2, PROMPT), generator=torch.Generator().manual_seed(5)).cuda()
    mask = torch.ones(2, PROMPT, dtype=torch.long, device="cuda")
    mask[0, :9] = 0
    for kw in ({}, {"attention_mask": mask}):
        with torch.no_grad():
            logits = {k: m(ids, **kw).logits.float() for k, m in ms.items()}
        keep = mask.bool() if kw else torch.ones_like(mask, dtype=torch.bool)
        assert _within_fa_rule(logits, fct.NAME, "eager", "fp32", keep)
