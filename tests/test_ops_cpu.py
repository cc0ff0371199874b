"""torch.ops.flashcore.attention on the CPU (through fallback="sdpa"): the op's schema, fake implementation and
autograd registration pass torch.library.opcheck, and torch.compile(fullgraph=True) traces it without a break."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402
import flashcore.ops  # noqa: E402,F401  (registers the op)


def _inputs(sq: int = 9, sk: int = 13, hq: int = 4, hkv: int = 2) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, sq, hq, 64, generator=g).bfloat16()
    k = torch.randn(2, sk, hkv, 64, generator=g).bfloat16()
    v = torch.randn(2, sk, hkv, 64, generator=g).bfloat16()
    return q, k, v


def _assert_compiled_matches_eager(layer, *args: torch.Tensor) -> None:  # type: ignore[no-untyped-def]
    """torch.compile(fullgraph=True) traces `layer` (any graph break raises) and gives the eager result."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the fallback's once-per-device notice
        compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
        assert torch.allclose(compiled(*args), layer(*args))


def test_the_op_is_registered_and_matches_the_function() -> None:
    q, k, v = _inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the fallback's once-per-device notice
        out, lse = torch.ops.flashcore.attention(q, k, v, causal=True, fallback="sdpa")
        ref_out, ref_lse = flashcore.attention(q, k, v, causal=True, fallback="sdpa")
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)


def test_opcheck_passes_on_the_fallback() -> None:
    q, k, v = _inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        torch.library.opcheck(torch.ops.flashcore.attention.default, (q, k, v),
                              {"causal": True, "fallback": "sdpa"})


def test_torch_compile_fullgraph_traces_the_op() -> None:
    q, k, v = _inputs()

    def layer(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out, lse = torch.ops.flashcore.attention(q, k, v, causal=True, fallback="sdpa")
        return out.float().sum(-1) + lse.transpose(1, 2)

    _assert_compiled_matches_eager(layer, q, k, v)


def test_bad_input_through_the_op_is_the_same_flashcore_error() -> None:
    q, k, v = _inputs()
    with pytest.raises(flashcore.FlashCoreError, match="head dims must match"):
        torch.ops.flashcore.attention(q, k[..., :32].contiguous(), v, fallback="sdpa")


def test_torch_compile_fullgraph_traces_flashcore_attention_and_fa3_names() -> None:
    # flashcore.attention (and what calls it) goes through the registered op while Dynamo traces
    q, k, v = _inputs()

    def layer(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out, lse = flashcore.attention(q, k, v, causal=True, fallback="sdpa")
        other = flashcore.flash_attn_func(q, k, v, causal=True, fallback="sdpa")
        return out.float().sum(-1) + lse.transpose(1, 2) + other.float().sum(-1)

    _assert_compiled_matches_eager(layer, q, k, v)


def test_out_and_lse_buffers_are_filled_under_torch_compile() -> None:
    q, k, v = _inputs()

    def layer(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor) -> None:
        flashcore.attention(q, k, v, causal=True, out=out, lse=lse, fallback="sdpa")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ref_out, ref_lse = flashcore.attention(q, k, v, causal=True, fallback="sdpa")
        out, lse = torch.full_like(q, float("nan")), torch.full((2, 4, 9), float("nan"))
        torch.compile(layer, fullgraph=True, backend="aot_eager")(q, k, v, out, lse)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
