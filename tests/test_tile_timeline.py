"""bench/tile_timeline.py's summary of timeline stamps (kernel/timeline.h layout), on synthetic stamps whose phases are
known, and bench/ab_kernels.py's build settings (`NAME=lib@l2=PCT`). CPU only: the stamps come from an instrumented
build on an H100 (docs/perf-notes.md step 8.21)."""

from __future__ import annotations

import pytest
import torch
from conftest import load_bench

tt = load_bench("tile_timeline")

# Cycles per block, and per tile on top of blocks x STEP: Q wait 100 + first S 150 + last P V 150 + epilogue 250 - the
# 150 by which the first block (S GEMM + softmax) is shorter than a step.
STEP, FIXED = 1000, 500


def synthetic(blocks: int = 8, tiles: int = 5, slow_cta: int | None = None) -> torch.Tensor:
    """Two consumer warpgroups whose tiles take FIXED + blocks x STEP cycles, phases as the kernel stamps them."""
    t = torch.zeros(tt.CTAS, tt.TILES, tt.ROLES, tt.STAMPS, dtype=torch.int64)
    for c in range(tt.CTAS):
        now = 1000
        for k in range(tiles):
            t[c, k, tt.PRODUCER, 0] = now - 50
            t[c, k, tt.PRODUCER, 3] = now
            for wg in range(2):
                s0 = now
                s1 = s0 + 100                       # Q in
                s2 = s1 + 150                       # first S ready
                s3 = s2 + STEP - 150                # first softmax done: block 0 costs a step with its S GEMM
                s4 = s3 + (blocks - 1) * STEP       # blocks 1..n-1 in the loop
                s5 = s4 + 150                       # the last P V
                s6 = s5 + 250                       # epilogue
                t[c, k, wg] = torch.tensor([s0, s1, s2, s3, s4, s5, s6, blocks])
                step = [s3 + STEP * 3 + x for x in (0, 50, 80, 200, 230, 900, 920, 1000)]  # block 4's step
                t[c, k, tt.STEP_ROLE + wg] = torch.tensor(step)
            now = int(t[c, k, 0, 6])
        if c == slow_cta:  # its last tile's epilogue ends 20,000 cycles late
            t[c, tiles - 1, :2, 6] += 20000
    return t


def test_summary_splits_the_fixed_cost_into_its_phases(capsys: pytest.CaptureFixture[str]) -> None:
    tt.summarize("synthetic", synthetic())
    out = capsys.readouterr().out
    assert f"step {STEP} cycles" in out
    assert f"fixed per tile {FIXED} cycles = 0.50 steps" in out
    assert "q_wait 0.10 first_s 0.15 first_softmax 0.85 last_pv 0.15 epilogue 0.25" in out
    assert "block 4's step" in out and "softmax 0.67" in out and "pack 0.08" in out
    assert "max / mean 1.000" in out


def test_summary_shows_an_uneven_end(capsys: pytest.CaptureFixture[str]) -> None:
    tt.summarize("uneven", synthetic(slow_cta=3))
    out = capsys.readouterr().out
    ends = out[out.index("max / mean"):].split()[3]
    assert float(ends) > 1.2


def test_summary_says_when_nothing_was_stamped(capsys: pytest.CaptureFixture[str]) -> None:
    tt.summarize("empty", torch.zeros(tt.CTAS, tt.TILES, tt.ROLES, tt.STAMPS, dtype=torch.int64))
    assert "FLASHCORE_TIMELINE" in capsys.readouterr().out


def test_ab_kernels_build_settings_are_checked_before_loading() -> None:
    ab = load_bench("ab_kernels")
    for bad in ("lib.so@l2=abc", "lib.so@l2=101", "lib.so@flush=1"):
        with pytest.raises(SystemExit, match="unknown setting"):
            ab.Build("x", bad)
    with pytest.raises(OSError):  # a valid setting: parsed, then the missing library fails to load
        ab.Build("x", "/nonexistent/libflashcore.so@l2=67")
