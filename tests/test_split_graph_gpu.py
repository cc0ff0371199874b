"""Split-KV decode under CUDA graph capture: the combine kernel follows the attention kernel as a programmatic
dependent launch (kernel/grid_dependency.h), and a captured graph must replay it as the stream runs it: each replay
reads the caches as they are then, the combine after every split's partials."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402

pytestmark = pytest.mark.gpu


def _decode(q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, lens: torch.Tensor, splits: int) -> torch.Tensor:
    return flashcore.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens, causal=True, num_splits=splits)


@pytest.mark.parametrize("splits", [2, 5])
def test_a_split_decode_captured_in_a_graph_replays_as_eager(splits: int) -> None:
    g = torch.Generator(device="cuda").manual_seed(splits)
    q = torch.randn(8, 1, 32, 128, device="cuda", dtype=torch.bfloat16, generator=g)
    kc, vc = (torch.randn(8, 2048, 8, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    lens = torch.randint(100, 2048, (8,), device="cuda", dtype=torch.int32, generator=g)
    _decode(q, kc, vc, lens, splits)  # warm-up outside the capture (plans, workspace)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph):
        captured = _decode(q, kc, vc, lens, splits)
    torch.cuda.current_stream().wait_stream(stream)
    for step in range(3):  # new cache contents each time: the replay reads them, the combine sees every split
        kc.copy_(torch.randn(kc.shape, device="cuda", dtype=kc.dtype, generator=g))
        vc.copy_(torch.randn(vc.shape, device="cuda", dtype=vc.dtype, generator=g))
        captured.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, _decode(q, kc, vc, lens, splits)), f"replay {step}"
