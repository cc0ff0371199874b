"""bench/block_timeline.py's split of per-block stamps (kernel/timeline.h FLASHCORE_BLOCKLINE layout) into the V^T
copy's stretch and the rest, on synthetic stamps whose waits are known, and bench/clock_power.py's reading of the
`nvidia-smi` sampler's lines. CPU only: the stamps and samples come from an H100 (docs/perf-notes.md step 8.35)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import load_bench

bl = load_bench("block_timeline")
cp = load_bench("clock_power")


def synthetic(copy_wait: int, after_wait: int, flag_wait: int) -> torch.Tensor:
    """CTA 0 only: two copy items published by cycle 10,000, then 6 blocks of 2,000 cycles from cycle 1,000: blocks
    0-4 begin before 10,000 (the copy stretch), block 5 after it. Each consumer K and V wait lasts copy_wait cycles in
    the stretch and after_wait after it; the producer waits flag_wait cycles on each V^T flag."""
    t = torch.zeros(bl.WORDS, dtype=torch.int64)
    blocks = t[: bl.ITEM_BASE].view(bl.CTAS, bl.BLOCKS, 8)
    items = t[bl.ITEM_BASE : bl.TILE_BASE].view(bl.CTAS, bl.ITEMS, 8)
    tiles = t[bl.TILE_BASE :].view(bl.CTAS, bl.TILES, 4)
    tiles[0, 0] = torch.tensor([0, 6, 1000, 0])
    items[0, 0] = torch.tensor([1000, 2000, 3000, 4000, 7, 0, 0, 0])
    items[0, 1] = torch.tensor([4000, 6000, 8000, 10000, 9, 0, 0, 0])
    for b in range(6):
        start = 1000 + 2000 * b
        wait = copy_wait if start < 10000 else after_wait
        s0 = start - 900  # the producer's V^T flag wait, then the V and K issues
        blocks[0, b] = torch.tensor([s0, s0 + flag_wait, s0 + flag_wait + 10, s0 + flag_wait + 20,
                                     start, start + wait, start + wait, start + 2 * wait])  # fmt: skip
    return t


def test_waits_split_at_the_copys_last_item(capsys: pytest.CaptureFixture[str]) -> None:
    bl.summarize("synthetic", synthetic(copy_wait=300, after_wait=100, flag_wait=50))
    out = capsys.readouterr().out
    assert "1 CTAs" in out and "copy items per CTA 2" in out
    assert "copy ends at 9000" in out  # from the tile's first stamp (1,000) to the last item's publication
    assert "item phases (median): load 1500 transpose 1500 store 1500" in out
    copy_line = next(line for line in out.splitlines() if line.strip().startswith("copy :"))
    after_line = next(line for line in out.splitlines() if line.strip().startswith("after:"))
    assert "5 blocks" in copy_line and "K wait    300 V wait    300" in copy_line
    assert "1 blocks" in after_line and "K wait    100 V wait    100" in after_line
    assert "flag wait     50" in copy_line
    assert copy_line.rstrip().endswith("waits per CTA 3000")  # 5 blocks x (300 + 300)


def test_waits_below_the_threshold_give_no_arrival_latency(capsys: pytest.CaptureFixture[str]) -> None:
    bl.summarize("synthetic", synthetic(copy_wait=bl.STALLED, after_wait=bl.STALLED, flag_wait=0))
    out = capsys.readouterr().out
    assert "issue->arrival K     0 (0) V     0 (0)" in out


def test_an_uninstrumented_library_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    bl.summarize("plain", torch.zeros(bl.WORDS, dtype=torch.int64))
    assert "nothing stamped" in capsys.readouterr().out


def test_sampler_lines_parse_and_bad_lines_are_skipped(tmp_path: Path) -> None:
    log = tmp_path / "smi.csv"
    log.write_text("2026/11/26 18:40:01.250, 1980 MHz, 650.12 W, 0x0000000000000000\n"
                   "2026/11/26 18:40:01.270, 1605 MHz, 690.40 W, 0x0000000000000004\n"
                   "garbage line\n"
                   "2026/11/26 18:40:01.290, [N/A], 690.40 W, 0x4\n")  # fmt: skip
    got = cp.samples(str(log))
    assert [(s[1], s[2], s[3]) for s in got] == [(1980.0, 650.12, 0), (1605.0, 690.4, 4)]
    assert got[1][0] - got[0][0] == pytest.approx(0.02, abs=1e-3)
    assert cp.REASONS[4] == "sw_power_cap"


def test_fa3_call_passes_the_shape_and_descales_and_skips_dtypes_fa3_lacks() -> None:
    ab = load_bench("ab_kernels")
    seen = []

    def fake_fa3(q, k, v, **kw) -> None:
        seen.append(kw)

    q = k = v = torch.zeros(1)
    descales = (torch.ones(1), torch.ones(1) * 2, torch.ones(1) * 3)
    fn = ab.fa3_call(fake_fa3, frozenset({"e4m3"}), ab.SHAPES["fp8-s4k-causal"], q, k, v, descales)
    assert fn is not None
    fn()
    assert seen[0]["causal"] is True and seen[0]["num_splits"] == 0
    assert [seen[0][n].item() for n in ("q_descale", "k_descale", "v_descale")] == [1.0, 2.0, 3.0]
    assert ab.fa3_call(fake_fa3, frozenset({"e4m3"}), ab.SHAPES["d128"], q, k, v, ()) is None  # bf16: not taken
    assert ab.fa3_call(None, frozenset({"bf16"}), ab.SHAPES["d128"], q, k, v, ()) is None  # FA3 missing
