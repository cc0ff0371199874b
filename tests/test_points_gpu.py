"""Every compile-time point the loaded library has (flashcore.compiled_points) on the GPU: close to an fp32
reference, bit-identical to the others of the same keys and rows per tile (stages, ping-pong, rescale timing and the
register split change the schedule, never a row's arithmetic; taller tiles may: a row then passes blocks it does not
see, whose rescale factor is an exp2 of a rounding residue), the point reported by plan(); an uncompiled point is
refused. Run it on a tune build to check
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
        same_shape = {}
        for p in pts:
            tile = TileConfig(point=p.name)
            assert flashcore.plan(q, k, v, causal=causal, tile=tile).point == p.name
            o, lse = flashcore.attention(q, k, v, causal=causal, tile=tile, num_splits=1)
            assert (o.float() - ref_o).abs().max() < 2e-2, (p.name, b, s, causal)
            assert (lse - ref_lse).abs().max() < 1e-3, (p.name, b, s, causal)
            first = same_shape.setdefault((p.block_n, p.consumer_wgs), (p.name, o, lse))
            assert torch.equal(o, first[1]) and torch.equal(lse, first[2]), (p.name, "vs", first[0])


def test_an_uncompiled_point_is_refused_with_the_list() -> None:
    q, k, v = (torch.randn(1, 64, 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    missing = next(p for p in (Point(128, 2, 2, False, True, 40), Point(144, 2, 2, False, True, 40))
                   if p not in flashcore.compiled_points(128))
    with pytest.raises(flashcore.FlashCoreError, match="not compiled for head dim 128"):
        flashcore.attention(q, k, v, tile=TileConfig(point=missing.name))


@pytest.mark.parametrize("splits", [1, 4, 12])
def test_a_tile_split_count_is_the_callers_num_splits(splits: int) -> None:
    """TileConfig(num_splits=n), what a tuned decode entry holds, launches n splits: the same bits as the call's own
    num_splits=n, close to the reference."""
    q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 20000, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    tile = TileConfig(num_splits=splits)
    assert flashcore.plan(q, k, v, tile=tile).num_splits == splits
    o, lse = flashcore.attention(q, k, v, tile=tile)
    o2, lse2 = flashcore.attention(q, k, v, num_splits=splits)
    assert torch.equal(o, o2) and torch.equal(lse, lse2)
    ref_o, ref_lse = reference(q, k, v, False)
    assert (o.float() - ref_o).abs().max() < 2e-2 and (lse - ref_lse).abs().max() < 1e-3
