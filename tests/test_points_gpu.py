"""Every compile-time point the loaded library has (flashcore.compiled_points) on the GPU: the same output as the
default at the same keys per tile (bit for bit: a point changes the schedule, never a row's arithmetic), close to
an fp32 reference, the point reported by plan(); an uncompiled point is refused. Run it on a tune build to check
every candidate: FLASHCORE_LIB=build/tune/libflashcore.so pytest tests/test_points_gpu.py"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402
from flashcore import Point, TileConfig  # noqa: E402

from tests.test_api_gpu import reference  # noqa: E402

pytestmark = pytest.mark.gpu
SHAPES = [(2, 777, 4, 2, False), (1, 1000, 2, 2, True), (3, 129, 2, 1, True)]  # B, S, Hq, Hkv, causal


@pytest.mark.parametrize("hd", [64, 128, 256])
def test_every_compiled_point_matches_the_default(hd: int) -> None:
    pts = flashcore.compiled_points(hd)
    assert pts[: len(flashcore.compiled_points(hd, defaults_only=True))] == flashcore.compiled_points(hd, True)
    for b, s, hq, hkv, causal in SHAPES:
        q = torch.randn(b, s, hq, hd, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, s, hkv, hd, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        ref_o, ref_lse = reference(q, k, v, causal)
        by_bn = {}
        for p in pts:
            tile = TileConfig(point=p.name)
            assert flashcore.plan(q, k, v, causal=causal, tile=tile).point == p.name
            o, lse = flashcore.attention(q, k, v, causal=causal, tile=tile)
            assert (o.float() - ref_o).abs().max() < 2e-2, (p.name, b, s, causal)
            assert (lse - ref_lse).abs().max() < 1e-3, (p.name, b, s, causal)
            first = by_bn.setdefault(p.block_n, (p.name, o, lse))
            assert torch.equal(o, first[1]) and torch.equal(lse, first[2]), (p.name, "vs", first[0])


def test_an_uncompiled_point_is_refused_with_the_list() -> None:
    q, k, v = (torch.randn(1, 64, 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    missing = next(p for p in (Point(128, 2, 2, False, True, 40), Point(144, 2, 2, False, True, 40))
                   if p not in flashcore.compiled_points(128))
    with pytest.raises(flashcore.FlashCoreError, match="not compiled for head dim 128"):
        flashcore.attention(q, k, v, tile=TileConfig(point=missing.name))
