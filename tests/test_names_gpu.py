"""On the H100: flash_attn_func / flash_attn_with_kvcache against FA3's own (when installed), and the HF backend on the
kernel. Marked `gpu`: counted as skipped on CPU-only machines (see tests/conftest.py)."""

from __future__ import annotations

import copy
import importlib
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402

pytestmark = pytest.mark.gpu


def _fa3():
    try:
        config = importlib.import_module("fa3_fwd_config")
        sys.modules.setdefault("flash_attn_config", config)
        return importlib.import_module("fa3_fwd_interface")
    except Exception:  # noqa: BLE001
        pytest.skip("FA3 (fa3-fwd) not installed")


def _qkv(b, sq, sk, hq, hkv, d, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
            for s, h in ((sq, hq), (sk, hkv), (sk, hkv))]


def test_flash_attn_func_matches_fa3s() -> None:
    fa3 = _fa3()
    q, k, v = _qkv(2, 333, 1000, 8, 2, 128, seed=5)
    out, lse = flashcore.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    ref, ref_lse = fa3.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert (out.float() - ref.float()).abs().max().item() < 2e-2
    assert (lse - ref_lse).abs().max().item() < 1e-3


def test_flash_attn_with_kvcache_appends_like_fa3s() -> None:
    fa3 = _fa3()
    q, k_new, v_new = _qkv(4, 1, 1, 16, 4, 128, seed=6)
    _, k_cache, v_cache = _qkv(4, 1, 2048, 16, 4, 128, seed=7)
    ours_k, ours_v = k_cache.clone(), v_cache.clone()
    lengths = torch.full((4,), 1500, dtype=torch.int32, device="cuda")
    out = flashcore.flash_attn_with_kvcache(q, ours_k, ours_v, k_new, v_new, cache_seqlens=lengths, causal=True)
    ref = fa3.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lengths, causal=True)
    assert torch.equal(ours_k, k_cache) and torch.equal(ours_v, v_cache)  # the same in-place append
    assert (out.float() - ref.float()).abs().max().item() < 2e-2


def test_hf_model_on_the_kernel() -> None:
    transformers = pytest.importorskip("transformers")
    import flashcore.integrations.transformers as fct

    fct.register()
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=128,
                                      max_position_embeddings=1024)
    models = {}
    for impl in ("eager", "sdpa", fct.NAME):
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            models[impl] = transformers.AutoModelForCausalLM.from_config(
                copy.deepcopy(config), attn_implementation=impl, dtype=torch.bfloat16).cuda().eval()
    ids = torch.randint(0, 256, (2, 300), device="cuda", generator=torch.Generator(device="cuda").manual_seed(3))
    with torch.no_grad():
        logits = {k: m(ids).logits.float() for k, m in models.items()}
        tol = (logits["sdpa"] - logits["eager"]).abs().max().item()
        assert (logits[fct.NAME] - logits["eager"]).abs().max().item() <= 2 * tol + 1e-2
        # decode through the KV cache: the step logits against sdpa re-reading the whole generated sequence
        gen = models[fct.NAME].generate(ids[:1], max_new_tokens=16, do_sample=False, output_logits=True,
                                        return_dict_in_generate=True)
        steps = torch.stack(gen.logits, 1).float()[0]  # [16, vocab]
        full = models["sdpa"](gen.sequences).logits.float()[0, 299:315]
        assert (steps - full).abs().max().item() <= 2 * tol + 5e-2
