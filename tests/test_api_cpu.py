"""flashcore.attention input validation that needs no GPU: clear errors, nothing launched."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402


def test_cpu_tensors_are_refused_with_a_clear_error():
    q = torch.randn(1, 8, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(flashcore.FlashCoreError, match="needs CUDA tensors"):
        flashcore.attention(q, q, q)


def test_non_tensor_is_refused():
    with pytest.raises(flashcore.FlashCoreError, match="must be a torch.Tensor"):
        flashcore.attention([1, 2], None, None)  # type: ignore[arg-type]


def test_errors_are_value_errors():
    assert issubclass(flashcore.FlashCoreError, ValueError)
    assert issubclass(flashcore.UnsupportedDeviceError, flashcore.FlashCoreError)


def test_library_path_can_be_overridden(monkeypatch, tmp_path):
    monkeypatch.setenv("FLASHCORE_LIB", str(tmp_path / "lib.so"))
    assert flashcore.library_path() == tmp_path / "lib.so"


def test_the_version_matches_pyproject():
    import tomllib
    from pathlib import Path

    meta = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    assert flashcore.__version__ == meta["project"]["version"]


def test_cpu_refusal_names_the_sdpa_fallback():
    q = torch.randn(1, 8, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(flashcore.FlashCoreError, match="fallback='sdpa' also takes CPU tensors"):
        flashcore.attention(q, q, q)


@pytest.mark.parametrize("sq, sk, hq, hkv, causal", [(33, 33, 4, 4, True), (5, 40, 8, 2, True), (40, 7, 2, 2, True),
                                                     (17, 29, 4, 1, False)])
def test_fallback_sdpa_runs_the_contract_on_cpu_tensors(sq, sk, hq, hkv, causal):
    import warnings

    from flashcore import fallback

    fallback._warned.discard("cpu (CPU)")
    g = torch.Generator().manual_seed(sq * 100 + sk)
    q = torch.randn(2, sq, hq, 64, generator=g).bfloat16()
    k = torch.randn(2, sk, hkv, 64, generator=g).bfloat16()
    v = torch.randn(2, sk, hkv, 64, generator=g).bfloat16()
    with pytest.warns(RuntimeWarning, match="cpu .* torch SDPA"):
        out, lse = flashcore.attention(q, k, v, causal=causal, fallback="sdpa")
    # the contract: fp32 softmax over the visible keys (bottom-right causal), GQA by repeated K/V heads
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    kf, vf = kf.repeat_interleave(hq // hkv, 1), vf.repeat_interleave(hq // hkv, 1)
    s = qf @ kf.transpose(-1, -2) / 8.0
    if causal:
        s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq).logical_not(), float("-inf"))
    ref_lse = torch.logsumexp(s, -1)
    ref = torch.nan_to_num(torch.softmax(s, -1)) @ vf
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (2, hq, sq)
    assert torch.allclose(out.float().transpose(1, 2), ref, atol=2e-2)
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse)) and torch.allclose(lse, ref_lse, atol=1e-4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per device
        flashcore.attention(q, k, v, causal=causal, fallback="sdpa")


@pytest.mark.parametrize("context", ["grad", "no_grad", "inference_mode", "detached"])
def test_inputs_that_require_grad_are_refused_not_detached(context):
    q = torch.randn(1, 8, 2, 64).bfloat16().requires_grad_()
    k, v = torch.randn(1, 8, 2, 64).bfloat16(), torch.randn(1, 8, 2, 64).bfloat16()
    if context == "grad":
        with pytest.raises(flashcore.FlashCoreError, match=r"q requires grad .* forward-only .* torch\.no_grad\(\)"):
            flashcore.attention(q, k, v, fallback="sdpa")
        return
    if context == "detached":
        out, _ = flashcore.attention(q.detach(), k, v, fallback="sdpa")
    else:
        with torch.no_grad() if context == "no_grad" else torch.inference_mode():
            out, _ = flashcore.attention(q, k, v, fallback="sdpa")
    assert out.shape == q.shape and not out.requires_grad
