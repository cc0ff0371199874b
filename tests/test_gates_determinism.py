"""Determinism gate: the pure verdict, and bit-exact comparison of repeats with stand-in kernels."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import fake_flashcore, make_context, workload

from harness.gates import determinism
from harness.gates.determinism import DeterminismParams, RepeatStats, verdict_determinism
from harness.results import Status
from harness.support import gpu

P = DeterminismParams(workloads=("w",), repeats=6)
WL = workload("w", b=2, hq=4, hkv=2, sq=19, sk=19, d=64, dtype="bf16", causal=True)


def test_verdict_zero_mismatches_passes() -> None:
    c = verdict_determinism("w", RepeatStats(seed=1, repeats=6, mismatches=0, max_abs_diff=0.0), P)
    assert (c.status, c.threshold, c.measured, c.comparison) == (Status.PASS, 0, 0, "==")


def test_verdict_one_mismatch_fails() -> None:
    c = verdict_determinism("w", RepeatStats(seed=1, repeats=6, mismatches=1, max_abs_diff=2.0**-8), P)
    assert c.status is Status.FAIL
    assert "1 of 5 repeats differ" in c.message and "0.00391" in c.message


def test_verdict_with_fewer_repeats_than_asked_is_an_error() -> None:
    assert verdict_determinism("w", RepeatStats(1, 3, 0, 0.0), P).status is Status.ERROR


def test_deterministic_kernel_has_no_mismatch() -> None:
    calls: list[int] = []
    s = determinism.measure(fake_flashcore(calls=calls), WL, seed=5, repeats=6, device="cpu")
    assert (s.repeats, s.mismatches, s.max_abs_diff) == (6, 0, 0.0)
    assert len(calls) == 6


def test_nondeterministic_kernel_is_caught() -> None:
    s = determinism.measure(fake_flashcore("noise"), WL, seed=5, repeats=6, device="cpu")
    assert s.mismatches == 3  # calls 2, 4 and 6 differ from call 1
    assert s.max_abs_diff == pytest.approx(1.0, abs=0.02)


def test_comparison_is_on_bits_so_nan_payloads_count() -> None:
    fc = fake_flashcore()
    inner = fc.attention
    count = [0]

    def attention(*args, **kw):  # writes a NaN whose payload changes between calls
        out, lse = inner(*args, **kw)
        count[0] += 1
        out.view(torch.int16)[0, 0, 0, 0] = 0x7FC0 + count[0]
        return out, lse

    fc.attention = attention  # type: ignore[attr-defined]
    s = determinism.measure(fc, WL, seed=5, repeats=3, device="cpu")
    assert s.mismatches == 2
    assert s.max_abs_diff == 0.0  # NaN-only differences have no finite size


def test_gate_over_workloads(tmp_path: Path) -> None:
    wls = (WL, workload("gqa", hq=8, hkv=2, sq=8, sk=8))
    ctx = make_context(tmp_path, "determinism", DeterminismParams(workloads=("w", "gqa"), repeats=4), wls)
    good = determinism.check_workloads(ctx, fake_flashcore(), "cpu")
    assert good.status is Status.PASS, good.message
    assert [c.workload for c in good.checks] == ["w", "gqa"]
    assert good.details["workloads"]["w"]["repeats"] == 4
    assert determinism.check_workloads(ctx, fake_flashcore("noise"), "cpu").status is Status.FAIL
    crashed = determinism.check_workloads(ctx, fake_flashcore("crash"), "cpu")
    assert crashed.status is Status.ERROR and len(crashed.checks) == 2


def test_gate_without_gpu_is_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = determinism.DeterminismGate().run(make_context(tmp_path, "determinism", P, (WL,)))
    assert result.status is Status.NOT_RUN and result.message == gpu.NO_GPU_LINE


@pytest.mark.gpu
def test_real_kernel_is_deterministic_and_a_planted_race_is_caught(tmp_path: Path) -> None:
    import flashcore

    wl = workload("gqa", b=2, hq=8, hkv=2, sq=1000, sk=1000, d=128, causal=True)
    assert determinism.measure(flashcore, wl, seed=1, repeats=10, device="cuda").mismatches == 0
    racy = fake_flashcore()
    racy.attention = lambda *a, **kw: flashcore.attention(*a, **kw, debug_fault=2)  # type: ignore[attr-defined]
    assert determinism.measure(racy, wl, seed=1, repeats=20, device="cuda").mismatches > 0


def test_repeat_bits_passes_each_repeat_its_own_options() -> None:
    # determinism-strict cycles sm_margin through the repeats with this loop
    seen: list[dict[str, object]] = []
    fc = fake_flashcore()
    real = fc.attention

    def attention(*args: object, **kwargs: object) -> object:
        seen.append({k: kwargs.pop(k) for k in ("deterministic", "sm_margin") if k in kwargs})
        return real(*args, **kwargs)

    fc.attention = attention  # type: ignore[attr-defined]
    inputs = gpu.make_inputs(WL, 5, "cpu")
    s = determinism.repeat_bits(fc, WL, inputs, 5, 4, "cpu", lambda r: {"deterministic": True, "sm_margin": 10 * r})
    assert (s.repeats, s.mismatches) == (4, 0)
    assert seen == [{"deterministic": True, "sm_margin": m} for m in (0, 10, 20, 30)]
