"""A split-KV target (CTAs per SM) on the GPU: the split count the real fc_plan reports is splits_for_target of the
launch's own tiles, blocks and SMs (half the splits at twice the batch), a table entry reaches the launch the same
way, and the outputs stay close to an fp32 reference. pytest -m gpu tests/test_split_target_gpu.py"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402
from flashcore import TileConfig, api, tuning  # noqa: E402
from tests.test_api_gpu import reference  # noqa: E402

pytestmark = pytest.mark.gpu
TARGET = TileConfig(split_ctas_per_sm=0.75)


def _inputs(batch: int, seqlen_k: int, heads_q: int = 32, heads_kv: int = 8) -> tuple[torch.Tensor, ...]:
    q = torch.randn(batch, 1, heads_q, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(batch, seqlen_k, heads_kv, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return q, k, v


def _want(q: torch.Tensor, k: torch.Tensor, target: float) -> int:
    p = flashcore.plan(q, k, k, num_splits=1)
    tiles = q.shape[0] * (k.shape[2] if p.pack_gqa else q.shape[2])
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    return tuning.splits_for_target(target, tiles, -(-k.shape[1] // p.block_n), sms)


@pytest.mark.parametrize("batch, seqlen_k, heads_kv", [(1, 65536, 8), (2, 50000, 8), (4, 20000, 8), (1, 30000, 32)])
def test_the_target_gives_each_shape_its_split_count_and_right_outputs(batch: int, seqlen_k: int,
                                                                       heads_kv: int) -> None:
    q, k, v = _inputs(batch, seqlen_k, heads_kv=heads_kv)
    got = flashcore.plan(q, k, v, tile=TARGET).num_splits
    assert got == _want(q, k, 0.75)
    assert got == 1 or got * batch * heads_kv <= 0.75 * torch.cuda.get_device_properties(0).multi_processor_count
    out = torch.full_like(q, float("nan"))
    lse = torch.full((batch, q.shape[2], 1), float("nan"), device="cuda")
    flashcore.attention(q, k, v, tile=TARGET, out=out, lse=lse)
    ref_o, ref_lse = reference(q, k, v, False)
    assert (out.float() - ref_o).abs().max() < 2e-2 and (lse - ref_lse).abs().max() < 1e-3


def test_twice_the_batch_takes_half_the_splits() -> None:
    one = flashcore.plan(*_inputs(1, 65536), tile=TARGET).num_splits
    two = flashcore.plan(*_inputs(2, 65536), tile=TARGET).num_splits
    assert one > 1 and two in (one // 2, (one + 1) // 2)


def test_a_table_entry_reaches_the_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, v = _inputs(2, 50000)
    props = torch.cuda.get_device_properties(0)
    key = tuning.shape_key(128, "bf16", False, 32, 8, 1, 50000)
    table = tuning.Table(props.name, props.multi_processor_count, api.kernel_id())
    table.entries[key] = tuning.Entry(key, TARGET, 1.05)
    path = tmp_path / "tuned.yaml"
    path.write_text(tuning.dump_tables([table]))
    monkeypatch.setenv("FLASHCORE_TUNE_TABLE", str(path))
    monkeypatch.delenv("FLASHCORE_TUNE", raising=False)
    assert flashcore.plan(q, k, v).num_splits == _want(q, k, 0.75)
    assert flashcore.plan(q, k, v, num_splits=3).num_splits == 3  # the caller's count wins
