"""FA3's names with inputs that require grad under grad mode (flashcore/forward_only.py): the forward runs as
fa3-fwd's does, its output's backward raises FlashCoreError, the LSE needs no grad; flashcore.attention keeps
refusing such inputs at the call. On the CPU (fallback="sdpa")."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:flashcore. cpu")


def _qkv(seed: int, *shape: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g).bfloat16().requires_grad_() for _ in range(3)]


def test_flash_attn_func_runs_under_grad_and_its_backward_raises() -> None:
    q, k, v = _qkv(1, 1, 8, 2, 64)
    out, lse = flashcore.flash_attn_func(q, k, v, causal=True, fallback="sdpa", return_attn_probs=True)
    with torch.no_grad():
        want = flashcore.flash_attn_func(q, k, v, causal=True, fallback="sdpa")
    assert torch.equal(out, want) and out.requires_grad and not lse.requires_grad and not want.requires_grad
    with pytest.raises(flashcore.FlashCoreError, match="forward-only .*cannot be backpropagated"):
        out.float().sum().backward()
    assert q.grad is None


def test_varlen_and_kvcache_under_grad_carry_the_raising_backward() -> None:
    q, k, v = _qkv(2, 10, 2, 64)
    cu = torch.tensor([0, 4, 10], dtype=torch.int32)
    out = flashcore.flash_attn_varlen_func(q, k, v, cu, cu, 6, 6, fallback="sdpa")
    assert out.grad_fn is not None
    out.add_(1)  # a fresh output, not a view of an input: in-place use works
    q4, k4, v4 = _qkv(3, 2, 1, 2, 64)
    cache_out = flashcore.flash_attn_with_kvcache(q4, k4.detach(), v4.detach(), cache_seqlens=1, fallback="sdpa")
    with pytest.raises(flashcore.FlashCoreError, match="forward-only"):
        cache_out.float().sum().backward()


def test_flashcore_attention_still_refuses_inputs_that_need_grad() -> None:
    q, k, v = _qkv(4, 1, 8, 2, 64)
    with pytest.raises(flashcore.FlashCoreError, match="q, k, v require grad .* forward-only"):
        flashcore.attention(q, k, v, fallback="sdpa")
