"""The scaling gate end to end on the CPU (the stand-in GPU of tests/perf_stand_in.py): FlashCore's throughput at
32K tokens against its own sweep's peak, with each seqlen's spread limit."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from perf_stand_in import ANCHORS, Rate, context, html

from harness.gates import scaling
from harness.results import Status
from harness.schema import Config, Workload


def sweep_rate(at_32k: float) -> Rate:
    def f(wl: Workload, backend: str) -> float | None:
        if backend != "flashcore":
            return ANCHORS[backend]
        return at_32k if wl.seqlen_q >= 32768 else {2048: 560.0, 4096: 600.0, 8192: 620.0, 16384: 610.0}[wl.seqlen_q]

    return f


@pytest.mark.parametrize(("at_32k", "status"), [(600.0, Status.PASS), (558.1, Status.PASS), (550.0, Status.FAIL)])
def test_scaling_gate(config: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None],
                      at_32k: float, status: Status) -> None:
    gpu_stand_in(sweep_rate(at_32k))
    result = scaling.ScalingGate().run(context(config, "scaling", tmp_path / "run"))
    assert result.status is status, result.message
    judged = [c for c in result.checks if c.metric == "tflops_s32768_vs_peak"]
    assert [c.workload for c in judged] == ["sweep-non-causal", "sweep-causal"]
    assert judged[0].measured == pytest.approx(at_32k / 620.0)
    spreads = [c for c in result.checks if c.metric == "rel_std[tflops_s32768_vs_peak]"]
    assert [c.status for c in spreads] == [Status.PASS, Status.PASS]
    limits = {c.metric: c.threshold for c in result.checks if c.metric.startswith("rel_std[")}
    assert limits == {"rel_std[tflops_s32768_vs_peak]": 0.02,  # batch 1 but 0.1 s calls: the 2 % rule
                      "rel_std[tflops_s65536_vs_peak]": 0.04, "rel_std[tflops_s131072_vs_peak]": 0.04}
    text = html(result)
    assert text.count("<svg") == 1 and 'class="bench"' in text


def test_scaling_seqlen_outside_the_sweep_is_an_error(config: Config, tmp_path: Path,
                                                      gpu_stand_in: Callable[[Rate], None]) -> None:
    result = scaling.ScalingGate().run(context(config, "scaling", tmp_path / "run", judged_seqlens=(3000,)))
    assert result.status is Status.ERROR and "judged_seqlens[0] = 3000" in result.message

