"""determinism-gpus on the CPU: its verdicts over per-GPU hashes (a GPU whose bits differ fails the check and is
named; GPUs of another kind are compared among themselves in default mode, and the difference between kinds is
recorded), the one-GPU host's NOT_APPLICABLE (never a pass, left out of the run's verdict), and the status in every
renderer. The measurement itself needs two GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, workload

from harness.config import load_config
from harness.gates import base, determinism_gpus
from harness.gates.base import GateContext
from harness.gates.determinism_gpus import Device, verdicts
from harness.render import render_html, render_markdown
from harness.render.terminal import render
from harness.results import GateResult, RunResult, Status, combine

H100 = [Device(0, "NVIDIA H100 80GB HBM3", 132), Device(1, "NVIDIA H100 80GB HBM3", 132)]


def test_the_same_bits_everywhere_pass() -> None:
    checks, info = verdicts("w", H100, {0: "a", 1: "a"}, {(0, 0): "d", (0, 66): "d", (1, 0): "d", (1, 66): "d"})
    assert [c.status for c in checks] == [Status.PASS, Status.PASS] and info["default_same_across_kinds"]


def test_a_gpu_with_other_bits_fails_and_is_named() -> None:
    checks, _ = verdicts("w", H100, {0: "a", 1: "b"}, {(0, 0): "d", (1, 0): "d"})
    assert checks[0].status is Status.FAIL and "GPU 1 differ from GPU 0" in checks[0].message
    checks, _ = verdicts("w", H100, {0: "a", 1: "a"}, {(0, 0): "d", (1, 0): "d", (1, 66): "e"})
    assert checks[-1].status is Status.FAIL and "GPU 1 sm_margin 66" in checks[-1].message


def test_gpus_of_another_kind_are_judged_among_themselves_in_default_mode() -> None:
    other = Device(2, "NVIDIA H200", 132)
    devices = [*H100, other]
    checks, info = verdicts("w", devices, {0: "a", 1: "a", 2: "z"}, {(i, 0): "d" for i in (0, 1, 2)})
    assert [c.metric for c in checks] == ["bit_identical_default[NVIDIA H100 80GB HBM3 (132 SMs)]",
                                          "bit_identical_default[NVIDIA H200 (132 SMs)]",
                                          "bit_identical_deterministic"]
    assert all(c.status is Status.PASS for c in checks)
    assert info["default_same_across_kinds"] is False  # recorded, not judged


def _ctx(tmp_path: Path) -> GateContext:
    config = load_config(REPO / "gates")
    spec = next(g for g in config.gates_through(7) if g.name == "determinism-gpus")
    (tmp_path / "logs").mkdir(parents=True, exist_ok=True)
    return GateContext(spec=spec, config=config, run_dir=tmp_path, repo_root=REPO, seed=1)


def test_one_gpu_is_not_applicable_never_a_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "flashcore_for", lambda ctx: object())
    monkeypatch.setattr(determinism_gpus, "devices_here", lambda: H100[:1])
    result = determinism_gpus.CrossGpuDeterminismGate().run(_ctx(tmp_path))
    assert result.status is Status.NOT_APPLICABLE and "1 GPU visible" in result.message
    assert "not a pass" in result.message


def test_two_gpus_are_measured_and_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "flashcore_for", lambda ctx: object())
    monkeypatch.setattr(determinism_gpus, "devices_here", lambda: H100)
    monkeypatch.setattr(determinism_gpus.gpu, "free_memory", lambda: None)
    seen = []

    def fake(fc, wl, seed, devices, margins):  # type: ignore[no-untyped-def]
        seen.append((wl.name, seed, tuple(margins)))
        planted = "x" if wl.name == "odd-grid" else "a"  # GPU 1 differs on one workload
        return {0: "a", 1: planted}, {(d.index, m): "d" for d in devices for m in margins}

    monkeypatch.setattr(determinism_gpus, "measure", fake)
    result = determinism_gpus.CrossGpuDeterminismGate().run(_ctx(tmp_path))
    assert result.status is Status.FAIL and [w for w, _, _ in seen] == ["prefill-d128", "gqa", "decode-b1-gqa",
                                                                      "odd-grid"]
    assert all(m == (0, 66) for _, _, m in seen)
    failed = [c for c in result.checks if c.status is Status.FAIL]
    assert [c.workload for c in failed] == ["odd-grid"]


def test_not_applicable_is_left_out_of_the_verdict_and_shown_everywhere() -> None:
    assert combine([Status.PASS, Status.NOT_APPLICABLE]) is Status.PASS
    assert combine([Status.FAIL, Status.NOT_APPLICABLE]) is Status.FAIL
    assert combine([Status.NOT_APPLICABLE]) is Status.NOT_APPLICABLE  # nothing checked: not a pass
    na = GateResult("determinism-gpus", 7, Status.NOT_APPLICABLE, message="1 GPU visible")
    run = RunResult("r", 7, (GateResult("build", 1, Status.PASS), na), {}, "", 1.0)
    assert run.status is Status.PASS and run.exit_code == 0
    assert RunResult("r", 7, (na,), {}, "", 1.0).exit_code == 1
    assert 'class="badge not_applicable">N/A' in render_html(run)
    assert "➖" in render_markdown(run) and "N/A" in render(run, color=False)


def test_a_call_is_hashed_from_poisoned_buffers_it_fills() -> None:
    torch = pytest.importorskip("torch")
    wl = workload("w")

    class Fake:  # writes a fixed pattern into out (all of it) and lse (all but the last row when told)
        @staticmethod
        def attention(q, k, v, causal, out, lse, skip_lse_row=False):  # type: ignore[no-untyped-def]
            out.fill_(0.5)
            (lse[..., :-1] if skip_lse_row else lse).fill_(1.0)

    inputs = tuple(torch.zeros(1) for _ in range(3))
    full = determinism_gpus.hashed_call(Fake, wl, inputs, "cpu")
    assert full == determinism_gpus.hashed_call(Fake, wl, inputs, "cpu")
    assert determinism_gpus.hashed_call(Fake, wl, inputs, "cpu", skip_lse_row=True) != full  # poison is hashed too
