"""bench/clock_power.py's reading of the `nvidia-smi` sampler's lines and bench/ab_kernels.py's FA3 call. CPU only:
the samples come from an H100."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import load_bench

cp = load_bench("clock_power")


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
