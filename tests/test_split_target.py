"""The split-KV target a tuned table stores (CTAs per SM, flashcore/tuning.py splits_for_target) and the split count
a launch derives from it (flashcore/launch.py table_splits): caps, scaling with the batch, the round trip from a
tuned split count, and the path from the table to fc_params (CPU tensors, fc_plan faked, nothing launched)."""

from __future__ import annotations

import itertools
import warnings

import pytest

from flashcore import _lib, tuning
from flashcore.tuning import MAX_SPLITS, MIN_BLOCKS_PER_SPLIT, TileConfig, splits_for_target

SMS = (132, 114)  # H100 SXM and H200; H100 PCIe
TARGETS = (0.25, 0.5, 0.625, 0.75, 0.875, 1.0, 1.5, 2.0, 4.0)
TILES = (1, 2, 3, 8, 16, 24, 32, 48, 64, 100, 132, 200, 1024)  # batch x K/V heads (packed GQA) or query heads
N_BLOCKS = (1, 3, 4, 7, 8, 31, 64, 391, 512, 1024, 4096)  # cache lengths 128 .. 512K keys at 128 per block


@pytest.mark.parametrize("sms", SMS)
def test_the_split_count_never_passes_the_key_blocks_nor_the_target(sms: int) -> None:
    for target, tiles, n_blocks in itertools.product(TARGETS, TILES, N_BLOCKS):
        s = splits_for_target(target, tiles, n_blocks, sms)
        assert 1 <= s <= MAX_SPLITS and s <= max(1, n_blocks // MIN_BLOCKS_PER_SPLIT), (target, tiles, n_blocks)
        assert s == 1 or tiles * s <= target * sms, (target, tiles, n_blocks)


@pytest.mark.parametrize("sms", SMS)
def test_the_split_count_scales_down_as_the_batch_grows(sms: int) -> None:
    for target, heads, n_blocks in itertools.product(TARGETS, (1, 8, 32), (64, 512, 4096)):
        counts = [splits_for_target(target, batch * heads, n_blocks, sms) for batch in range(1, 65)]
        assert counts == sorted(counts, reverse=True), (target, heads, n_blocks)
        assert all(c == 1 for b, c in enumerate(counts, 1) if b * heads >= target * sms)  # tiles alone reach it


def test_twice_the_batch_gets_half_the_splits_at_the_same_ctas() -> None:
    """The H200 failure: 12 splits tuned on batch 1 (8 packed tiles, 96 CTAs) ran 0.85x the default at batch 2
    (192 CTAs, 1.45 waves). As a target, batch 2 takes 6 splits: the same 96 CTAs."""
    target = 12 * 8 / 132
    assert splits_for_target(target, 8, 512, 132) == 12 and splits_for_target(target, 16, 391, 132) == 6
    assert splits_for_target(target, 32, 391, 132) == 3 and splits_for_target(target, 128, 391, 132) == 1
    assert splits_for_target(0.75, 8, 512, 114) == 10  # an H100 PCIe: 80 CTAs for its 114 SMs


@pytest.mark.parametrize("sms", SMS)
def test_a_tuned_split_count_stored_as_a_target_gives_it_back_on_its_shape(sms: int) -> None:
    """What a table conversion relies on: count x tiles / SMs, stored as a float, yields the count again."""
    for tiles, count in itertools.product((1, 2, 3, 7, 8, 16, 24), range(1, 65)):
        n_blocks = 4096
        assert splits_for_target(count * tiles / sms, tiles, n_blocks, sms) == count, (tiles, count)


def test_the_fewest_splits_with_the_same_blocks_per_split() -> None:
    assert splits_for_target(9 / 132, 1, 40, 132) == 8  # 9 and 8 splits both give 5 blocks a split
    assert splits_for_target(10 / 132, 1, 40, 132) == 10  # 4 blocks a split: fewer splits would give 5


def test_no_target_or_tiles_that_reach_it_mean_no_split() -> None:
    assert splits_for_target(0.0, 8, 512, 132) == 1
    assert splits_for_target(0.75, 99, 512, 132) == 1 and splits_for_target(0.75, 50, 512, 132) == 1
    assert splits_for_target(0.75, 49, 512, 132) == 2


# ---- from the table to fc_params ------------------------------------------------------------------------------------


@pytest.fixture
def pretend_gpu(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A 132-SM GPU whose table gives 0.75 CTAs per SM to every bucket, and an fc_plan that packs GQA heads with
    128 keys per block; returns the num_splits of every fc_plan call made."""
    from flashcore import launch

    planned: list[int] = []

    def fake_plan(device: object, p: _lib.FcParams) -> _lib.FcPlanInfo:
        planned.append(p.num_splits)
        return _lib.FcPlanInfo(num_splits=1, pack_gqa=int(p.heads_q > p.heads_kv), block_n=128)

    monkeypatch.setattr(tuning, "config_for", lambda key, gpu, sms, kid: TileConfig(split_ctas_per_sm=0.75))
    monkeypatch.setattr(launch, "plan_on", fake_plan)
    monkeypatch.setattr(launch, "sm_count", lambda index: 132)
    monkeypatch.setattr(launch, "device_index", lambda device: 0)
    monkeypatch.setattr(launch, "kernel_id", lambda: "k")
    monkeypatch.setattr(launch, "device_info", lambda index: ((9, 0), "GPU X"))
    launch._table_config.cache_clear()
    launch._SPLITS_CACHE.clear()
    yield planned
    launch._table_config.cache_clear()  # the pretend GPU's answers stay in this test
    launch._SPLITS_CACHE.clear()


def _num_splits(batch: int, heads_kv: int = 8, seqlen_k: int = 12288, **kw: object) -> int:
    import torch

    from flashcore import check, launch

    q = torch.randn(batch, 1, 32, 128, dtype=torch.bfloat16)
    k = torch.randn(batch, seqlen_k, heads_kv, 128, dtype=torch.bfloat16)
    call = check.dense(q, k, k.clone(), device_type="cpu", **kw)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tuning.TuningWarning)
        return launch.params(call, q, None, launch.tile_config(call, 0)).num_splits


def test_the_tables_target_becomes_each_batchs_split_count(pretend_gpu: list[int]) -> None:
    assert _num_splits(1) == 12  # 8 packed tiles x 12 = 96 CTAs = 0.75 x 132
    assert _num_splits(2) == 6  # 16 tiles x 6 = 96
    assert _num_splits(1, heads_kv=32) == 3  # no GQA: 32 tiles x 3 = 96
    assert _num_splits(1, seqlen_k=1024) == 2  # 8 blocks: at least 4 blocks a split
    assert _num_splits(1, sm_margin=66) == 6  # 66 SMs left to the kernel: 0.75 x 66 = 49.5 CTAs
    assert pretend_gpu == [1] * 5  # each asked fc_plan once, with no split (tiles and blocks only)
    assert _num_splits(1) == 12 and len(pretend_gpu) == 5  # a repeated signature is not planned again


def test_the_callers_count_and_deterministic_mode_win_over_the_target(pretend_gpu: list[int]) -> None:
    assert _num_splits(1, num_splits=3) == 3
    assert _num_splits(1, deterministic=True) == 0  # the kernel's rule for the nominal SM count
    assert pretend_gpu == []
