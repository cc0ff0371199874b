"""torch.ops.flashcore.attention on the H100's kernel: opcheck, torch.compile(fullgraph=True) and CUDA graph capture.
Marked `gpu`: counted as skipped on CPU-only machines (see tests/conftest.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402
import flashcore.ops  # noqa: E402,F401  (registers the op)

pytestmark = pytest.mark.gpu


def _inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator(device="cuda").manual_seed(11)
    q = torch.randn(2, 300, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(2, 300, 2, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(2, 300, 2, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    return q, k, v


def test_opcheck_on_the_kernel() -> None:
    q, k, v = _inputs()
    torch.library.opcheck(torch.ops.flashcore.attention.default, (q, k, v), {"causal": True})


def test_compile_fullgraph_and_cuda_graph_capture_match_eager() -> None:
    q, k, v = _inputs()
    eager, eager_lse = flashcore.attention(q, k, v, causal=True)
    fn = torch.compile(lambda q, k, v: torch.ops.flashcore.attention(q, k, v, causal=True), fullgraph=True)
    out, lse = fn(q, k, v)
    assert torch.equal(out, eager) and torch.equal(lse, eager_lse)
    graph = torch.cuda.CUDAGraph()
    static = [t.clone() for t in (q, k, v)]
    flashcore.attention(*static, causal=True)  # warm-up outside the capture
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        g_out, g_lse = torch.ops.flashcore.attention(*static, causal=True)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(g_out, eager) and torch.equal(g_lse, eager_lse)
