"""Correctness gate: the pure verdicts on synthetic numbers (pass, fail, error, the exact threshold edge), the
fp32 reference on the CPU, and the whole measure -> verdict path with stand-in kernels (correct and faulty)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from conftest import fake_flashcore, make_context, workload

from harness.gates import correctness
from harness.gates.correctness import CorrectnessParams, Measured, verdict_lse, verdict_output, verdict_written
from harness.results import Status, combine
from harness.support import gpu, reference
from harness.support.reference import ErrorStats

P = CorrectnessParams(workloads=("w",), seeds=1, fp16_max_abs=2.0e-3, bf16_error_factor=2.0, bf16_error_slack=1.0e-5,
                      fp8_error_factor=2.0, fp8_error_slack=1.0e-5,
                      fp8_lse_max_abs=2.0e-2,
                      lse_max_abs=1.0e-3, reference_chunk_mib=64)


def measured(err_ours: float = 1e-3, err_sdpa: float = 1e-3, diff_sdpa: float = 1e-3, lse_err: float = 1e-5,
             lse_bad_rows: int = 0, unwritten: int = 0, nonfinite: int = 0, lse_unwritten: int = 0) -> Measured:
    return Measured(7, unwritten, nonfinite, lse_unwritten, ErrorStats(err_ours, err_sdpa, diff_sdpa, lse_err,
                                                                          lse_bad_rows))


# ---- verdicts -------------------------------------------------------------------------------------


def test_fp16_rule_is_strictly_below_the_threshold() -> None:
    assert verdict_output("w", "fp16", measured(diff_sdpa=1.9e-3), P).status is Status.PASS
    at_edge = verdict_output("w", "fp16", measured(diff_sdpa=2.0e-3), P)
    assert (at_edge.status, at_edge.comparison, at_edge.threshold) == (Status.FAIL, "<", 2.0e-3)
    over = verdict_output("w", "fp16", measured(diff_sdpa=3.0e-3), P)
    assert over.status is Status.FAIL and over.margin == pytest.approx(-1.0e-3)


def test_fp16_rule_ignores_the_fp32_errors() -> None:
    # fp16 is judged against SDPA only; large errors against fp32 on both sides do not matter
    assert verdict_output("w", "fp16", measured(err_ours=5e-3, err_sdpa=1e-4, diff_sdpa=1e-3), P).status is Status.PASS


def test_bf16_rule_scales_with_sdpa_error() -> None:
    ok = verdict_output("w", "bf16", measured(err_ours=7.9e-3, err_sdpa=4e-3), P)
    assert ok.status is Status.PASS
    assert ok.threshold == pytest.approx(2.0 * 4e-3 + 1e-5)
    assert ok.margin == pytest.approx(8.01e-3 - 7.9e-3)
    bad = verdict_output("w", "bf16", measured(err_ours=8.1e-3, err_sdpa=4e-3), P)
    assert bad.status is Status.FAIL and bad.margin is not None and bad.margin < 0


def test_bf16_rule_at_the_edge_passes() -> None:
    threshold = 2.0 * 3e-3 + 1.0e-5
    assert verdict_output("w", "bf16", measured(err_ours=threshold, err_sdpa=3e-3), P).status is Status.PASS
    assert verdict_output("w", "bf16", measured(err_ours=math.nextafter(threshold, 1.0), err_sdpa=3e-3),
                          P).status is Status.FAIL


def test_bf16_slack_covers_an_exact_sdpa() -> None:
    # SDPA exact (err 0): ours may be off by the slack, no more
    assert verdict_output("w", "bf16", measured(err_ours=1.0e-5, err_sdpa=0.0), P).status is Status.PASS
    assert verdict_output("w", "bf16", measured(err_ours=1.1e-5, err_sdpa=0.0), P).status is Status.FAIL


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_nan_error_never_passes(dtype: str) -> None:
    c = verdict_output("w", dtype, measured(err_ours=math.nan, diff_sdpa=math.nan), P)
    assert c.status is Status.FAIL
    assert c.measured is None and c.margin is None  # JSON has no NaN; the message keeps it
    assert "nan" in c.message


def test_bf16_without_a_finite_sdpa_baseline_is_an_error() -> None:
    assert verdict_output("w", "bf16", measured(err_sdpa=math.nan), P).status is Status.ERROR
    assert verdict_output("w", "bf16", measured(err_sdpa=math.inf), P).status is Status.ERROR


def test_written_checks() -> None:
    assert combine([c.status for c in verdict_written("w", measured())]) is Status.PASS
    unwritten, nonfinite = verdict_written("w", measured(unwritten=64))
    assert (unwritten.status, unwritten.measured, nonfinite.status) == (Status.FAIL, 64, Status.PASS)
    assert verdict_written("w", measured(lse_unwritten=1))[0].status is Status.FAIL
    assert verdict_written("w", measured(nonfinite=1))[1].status is Status.FAIL


def test_lse_check() -> None:
    assert verdict_lse("w", measured(lse_err=1.0e-3), P).status is Status.PASS  # at the edge
    assert verdict_lse("w", measured(lse_err=1.01e-3), P).status is Status.FAIL
    bad_rows = verdict_lse("w", measured(lse_err=0.0, lse_bad_rows=3), P)
    assert bad_rows.status is Status.FAIL and "3 rows" in bad_rows.message
    assert verdict_lse("w", measured(lse_err=math.nan), P).status is Status.FAIL


# ---- reference ------------------------------------------------------------------------------------


def test_bottom_right_causal_mask() -> None:
    # query i sees key j iff j <= i + (Sk - Sq)
    assert reference.visible_mask(2, 4, "cpu").tolist() == [[True, True, True, False], [True, True, True, True]]
    assert reference.visible_mask(3, 2, "cpu").tolist() == [[False, False], [True, False], [True, True]]
    assert reference.empty_rows(1000, 300, True) == 700
    assert reference.empty_rows(1000, 300, False) == 0
    assert reference.empty_rows(300, 1000, True) == 0


def _uniform_inputs(sq: int, sk: int, hq: int = 2, hkv: int = 1, d: int = 64, dtype=torch.float32):
    """q = 0 makes attention uniform over the visible keys: the output is the mean of their values."""
    q = torch.zeros(1, sq, hq, d, dtype=dtype)
    k = torch.randn(1, sk, hkv, d).to(dtype)
    v = torch.arange(sk, dtype=torch.float32)[None, :, None, None].expand(1, sk, hkv, d).to(dtype).contiguous()
    return q, k, v


def test_reference_masks_bottom_right_and_zeroes_empty_rows() -> None:
    q, k, v = _uniform_inputs(sq=5, sk=3)
    ours = torch.zeros_like(q)
    lse = torch.zeros(1, 2, 5)
    expected = torch.tensor([0.0, 0.0, 0.0, 0.5, 1.0])  # rows 0-1 see no key; row 2 sees key 0; ...
    ours[0, :, :, :] = expected[:, None, None]
    lse[0, :, :2] = -math.inf
    lse[0, :, 2:] = torch.log(torch.tensor([1.0, 2.0, 3.0]))
    stats = reference.compare(q, k, v, True, ours, lse, ours, budget_bytes=1 << 20)
    assert stats.err_ours == pytest.approx(0.0, abs=1e-6)
    assert stats.lse_err == pytest.approx(0.0, abs=1e-6)
    assert stats.lse_bad_rows == 0


def test_reference_counts_bad_lse_rows() -> None:
    q, k, v = _uniform_inputs(sq=5, sk=3)
    out = torch.zeros_like(q)
    lse = torch.zeros(1, 2, 5)  # rows 0-1 should be -inf (2 heads x 2 rows bad), row 4 NaN in head 1
    lse[0, 1, 4] = math.nan
    stats = reference.compare(q, k, v, True, out, lse, out, budget_bytes=1 << 20)
    assert stats.lse_bad_rows == 5


def test_reference_is_the_same_in_any_chunking() -> None:
    wl = workload("w", b=2, hq=4, hkv=2, sq=33, sk=40, d=64, causal=True)
    q, k, v = gpu.make_inputs(wl, seed=3, device="cpu")
    sdpa_out = reference.sdpa(q, k, v, True)
    ours = sdpa_out.clone()
    ours[0, 5, 1, 7] += 0.25  # one wrong element, in the middle of the second chunk of one-row chunks
    lse = torch.zeros(2, 4, 33)
    one_row = reference.compare(q, k, v, True, ours, lse, sdpa_out, budget_bytes=1)
    all_rows = reference.compare(q, k, v, True, ours, lse, sdpa_out, budget_bytes=1 << 30)
    for a, b in zip(dataclasses.astuple(one_row), dataclasses.astuple(all_rows), strict=True):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-7)  # chunk shapes change fp32 rounding, nothing else
    assert one_row.diff_sdpa == pytest.approx(0.25, rel=0.05)


def test_reference_propagates_nan() -> None:
    wl = workload("w", sq=8, sk=8)
    q, k, v = gpu.make_inputs(wl, seed=1, device="cpu")
    sdpa_out = reference.sdpa(q, k, v, False)
    ours = sdpa_out.clone()
    ours[1, 7, 1, 63] = math.nan
    stats = reference.compare(q, k, v, False, ours, torch.zeros(2, 2, 8), sdpa_out, budget_bytes=1 << 20)
    assert math.isnan(stats.err_ours) and not math.isnan(stats.err_sdpa)


def test_chunking_keeps_the_fp32_working_set_under_budget() -> None:
    heads, rows = reference.chunking(8192, 8192, 128, 2 << 30)
    assert rows == 8192 and heads >= 1 and heads * 8192 * 8192 * 4 <= 2 << 30
    assert reference.chunking(1, 8192, 128, 2 << 30)[0] < 64 * 32  # decode: K/V dominate, so it chunks too
    assert reference.chunking(8192, 8192, 256, 1) == (1, 1)
    # S = 128K: one head's scores alone are 64 GB, so one head goes in blocks of query rows
    heads, rows = reference.chunking(131072, 131072, 128, 2 << 30)
    assert heads == 1 and 1000 < rows < 131072 and rows * 131072 * 5 <= 2 << 30


def test_visible_rows_are_rows_of_the_mask() -> None:
    full = reference.visible_mask(7, 5, "cpu")
    assert torch.equal(reference.visible_rows(2, 6, 7, 5, "cpu"), full[2:6])


def test_row_blocks_give_the_reference_of_whole_heads() -> None:
    wl = workload("w", b=1, hq=2, hkv=1, sq=70, sk=90, d=64, causal=True)
    q, k, v = gpu.make_inputs(wl, seed=5, device="cpu")
    sdpa_out = reference.sdpa(q, k, v, True)
    ours = sdpa_out.clone()
    ours[0, 69, 1, 3] += 0.5  # the last row of the last block
    lse = torch.zeros(1, 2, 70)
    _, rows = reference.chunking(70, 90, 64, 60_000)
    assert 1 < rows < 70  # the budget below splits each head into row blocks
    blocks = reference.compare(q, k, v, True, ours, lse, sdpa_out, budget_bytes=60_000)
    whole = reference.compare(q, k, v, True, ours, lse, sdpa_out, budget_bytes=1 << 30)
    for a, b in zip(dataclasses.astuple(blocks), dataclasses.astuple(whole), strict=True):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-7)
    assert blocks.diff_sdpa == pytest.approx(0.5, rel=0.05)


# ---- measure -> verdict with stand-in kernels -----------------------------------------------------

WORKLOADS = (
    workload("s17-causal", b=3, hq=5, hkv=5, sq=17, sk=17, d=128, dtype="bf16", causal=True),
    workload("sq40-sk13-causal", b=2, hq=4, hkv=4, sq=40, sk=13, d=64, dtype="fp16", causal=True),
    workload("sq13-sk40-causal", b=1, hq=4, hkv=2, sq=13, sk=40, d=64, dtype="bf16", causal=True),
    workload("gqa", b=1, hq=8, hkv=2, sq=33, sk=33, d=64, dtype="fp16", causal=False),
)


def _params(names: tuple[str, ...]) -> CorrectnessParams:
    return CorrectnessParams(**{**P.__dict__, "workloads": names})


def _check(tmp_path: Path, fault: str = "", workloads=WORKLOADS, seed: int = 99):
    ctx = make_context(tmp_path, "correctness", _params(tuple(w.name for w in workloads)), workloads, seed=seed)
    steps: list[str] = []
    ctx.step = steps.append
    return correctness.check_workloads(ctx, fake_flashcore(fault), "cpu"), steps


def test_correct_kernel_passes_every_workload(tmp_path: Path) -> None:
    result, steps = _check(tmp_path)
    assert result.status is Status.PASS, result.message
    assert len(result.checks) == 4 * len(WORKLOADS)
    assert steps[0] == "s17-causal (1/4)"
    row = result.details["workloads"]["s17-causal"]
    assert {"seed", "err_ours", "err_sdpa", "threshold", "margin", "lse_err"} <= set(row)
    assert row["margin"] > 0 and row["threshold"] == pytest.approx(2 * row["err_sdpa"] + 1e-5)


def test_seeds_are_fresh_per_workload_and_per_run(tmp_path: Path) -> None:
    a, _ = _check(tmp_path / "a", seed=1)
    b, _ = _check(tmp_path / "b", seed=2)
    seeds_a = [w["seed"] for w in a.details["workloads"].values()]
    seeds_b = [w["seed"] for w in b.details["workloads"].values()]
    assert len(set(seeds_a)) == len(WORKLOADS)
    assert not set(seeds_a) & set(seeds_b)
    assert a.details["base_seed"] == 1


def test_leaked_masked_key_fails(tmp_path: Path) -> None:
    result, _ = _check(tmp_path, "leak")
    assert result.status is Status.FAIL
    failed = {(c.workload, c.metric) for c in result.checks if c.status is Status.FAIL}
    assert ("s17-causal", "err_vs_fp32") in failed and ("s17-causal", "lse_max_abs") in failed
    assert ("sq40-sk13-causal", "max_abs_vs_sdpa") in failed
    assert not any(w == "gqa" for w, _ in failed)  # not causal: the fault cannot show


def test_unwritten_row_fails(tmp_path: Path) -> None:
    result, _ = _check(tmp_path, "unwritten")
    assert result.status is Status.FAIL
    unwritten = {c.workload: c.measured for c in result.checks if c.metric == "unwritten_elements"}
    assert unwritten["s17-causal"] == 3 * 5 * 128 + 3 * 5  # one query row of every (batch, head): out + LSE


def test_written_nan_fails(tmp_path: Path) -> None:
    result, _ = _check(tmp_path, "nan", workloads=WORKLOADS[:1])
    bad = {c.metric: c for c in result.checks if c.status is not Status.PASS}
    assert bad["nonfinite_elements"].measured == 1
    assert "err_vs_fp32" in bad and "unwritten_elements" not in bad


def test_rejected_workload_fails_and_crash_is_an_error(tmp_path: Path) -> None:
    rejected, _ = _check(tmp_path / "r", "reject")
    assert rejected.status is Status.FAIL
    assert [c.metric for c in rejected.checks] == ["run"] * len(WORKLOADS)  # every workload still tried
    crashed, _ = _check(tmp_path / "c", "crash")
    assert crashed.status is Status.ERROR
    assert "illegal memory access" in (tmp_path / "c" / "logs/correctness.log").read_text()


def test_gate_without_gpu_is_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = correctness.CorrectnessGate().run(make_context(tmp_path, "correctness", _params(("s17-causal",)),
                                                            WORKLOADS[:1]))
    assert result.status is Status.NOT_RUN
    assert result.message == gpu.NO_GPU_LINE


def test_gate_without_flashcore_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "cuda_unavailable_reason", lambda: None)
    monkeypatch.setattr(gpu.importlib, "import_module", _raise_import)
    result = correctness.CorrectnessGate().run(make_context(tmp_path, "correctness", _params(("s17-causal",)),
                                                            WORKLOADS[:1]))
    assert result.status is Status.ERROR
    assert "cannot import flashcore" in result.message


def _raise_import(name: str) -> None:
    raise ImportError(f"No module named {name!r}")


# ---- on the GPU, with the real kernel -------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("fault", [1, 3])  # 1: key seqlen_k leaks in; 3: first row of each query tile unwritten
def test_real_kernel_passes_and_a_planted_fault_fails(tmp_path: Path, fault: int) -> None:
    import flashcore

    # ragged, non-causal: a causal mask would hide the tail-mask fault (key Sk is never visible under it)
    edge = (workload("s17", b=3, hq=5, hkv=5, sq=17, sk=17, d=128),
            workload("odd", b=1, hq=3, hkv=3, sq=77, sk=77, d=64, dtype="fp16"),
            workload("sq1000-sk300-causal", b=2, hq=4, hkv=4, sq=1000, sk=300, d=128, dtype="fp16", causal=True))
    ctx = make_context(tmp_path / "ok", "correctness", _params(tuple(w.name for w in edge)), edge)
    good = correctness.check_workloads(ctx, flashcore, "cuda")
    assert good.status is Status.PASS, good.message

    faulty = fake_flashcore()
    faulty.attention = lambda *a, **kw: flashcore.attention(*a, **kw, debug_fault=fault)  # type: ignore[attr-defined]
    ctx = make_context(tmp_path / "fault", "correctness", _params(tuple(w.name for w in edge)), edge)
    bad = correctness.check_workloads(ctx, faulty, "cuda")
    assert bad.status is Status.FAIL, bad.message
    failed = {c.metric for c in bad.checks if c.status is Status.FAIL}
    assert ("unwritten_elements" in failed) == (fault == 3)


# ---- pooled input draws for small workloads ------------------------------------------------------------


def test_small_workloads_get_pooled_draws_big_ones_one() -> None:
    p = CorrectnessParams(workloads=("w",), seeds=1, fp16_max_abs=2.0e-3, bf16_error_factor=2.0,
                          bf16_error_slack=1.0e-5, fp8_error_factor=2.0, fp8_error_slack=1.0e-5,
                          fp8_lse_max_abs=2.0e-2, lse_max_abs=1.0e-3,
                          reference_chunk_mib=64,
                          min_elements=65536, max_draws=64)
    tiny = workload("t", b=2, hq=2, hkv=2, sq=1, sk=300, d=128)  # 512 output elements
    small = workload("s", b=1, hq=4, hkv=4, sq=64, sk=64, d=64)  # 16384
    big = workload("b", b=4, hq=16, hkv=16, sq=8192, sk=8192, d=128)
    assert (p.draws_for(tiny), p.draws_for(small), p.draws_for(big)) == (64, 4, 1)
    assert P.draws_for(tiny) == 1  # the defaults judge one draw


def test_pool_adds_counts_and_keeps_the_worst_error_and_nan() -> None:
    a = measured(err_ours=1e-3, err_sdpa=5e-4, unwritten=1, lse_bad_rows=2)
    b = measured(err_ours=2e-4, err_sdpa=9e-4, nonfinite=3, lse_bad_rows=1)
    m = correctness.pool(a, b)
    assert (m.seed, m.unwritten, m.nonfinite, m.stats.lse_bad_rows) == (7, 1, 3, 3)
    assert (m.stats.err_ours, m.stats.err_sdpa) == (1e-3, 9e-4)
    assert math.isnan(correctness.pool(a, measured(err_ours=math.nan)).stats.err_ours)
