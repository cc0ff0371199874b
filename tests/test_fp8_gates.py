"""FP8 (e4m3) workloads in the gates, on the CPU: the schema's rules, the inputs and the call each backend makes, the
accuracy rule (FA3's FP8 bound) and a planted wrong result turning it red, the driver's flags."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from harness.bench import backends
from harness.config import load_config
from harness.driver_args import driver_args
from harness.gates import correctness
from harness.results import Status
from harness.schema import FP8_HEAD_DIMS, Workload, workload_problems
from harness.support import fp8, gpu, serving
from harness.support.reference import ErrorStats

WL = Workload(name="f", batch=2, heads_q=4, heads_kv=2, seqlen_q=40, seqlen_k=70, head_dim=128, dtype="e4m3",
              causal=True, kind="edge", why="test")
P = correctness.CorrectnessParams(workloads=("f",), seeds=1, fp16_max_abs=2.0e-3, bf16_error_factor=2.0,
                                  bf16_error_slack=1.0e-5, fp8_error_factor=2.0, fp8_error_slack=1.0e-5,
                                  fp8_lse_max_abs=2.0e-2,
                                  lse_max_abs=1.0e-3, reference_chunk_mib=64)


def fp8_names() -> tuple[str, str, str]:
    return ("q_descale", "k_descale", "v_descale")


def test_fp8_head_dims_are_the_apis() -> None:
    from flashcore import api

    assert tuple(api.FP8_HEAD_DIMS) == FP8_HEAD_DIMS


@pytest.mark.parametrize(("change", "key"), [
    ({"head_dim": 96}, "head_dim"),
    ({"layout": "kvcache", "seqlens_k": (10, 20)}, "layout"),
    ({"window_left": 16}, "window_left"),
    ({"softcap": 30.0}, "softcap"),
])
def test_fp8_workloads_are_what_attention_fp8_runs(change: dict[str, Any], key: str) -> None:
    assert workload_problems(WL) == []
    assert key in [k for k, _ in workload_problems(dataclasses.replace(WL, **change))]


def test_an_fp8_workload_is_not_plain_and_writes_bf16() -> None:
    assert WL.fp8 and not WL.plain and WL.out_dtype == "bf16"
    out, lse = gpu.poisoned_outputs(WL, "cpu")
    assert out.dtype == torch.bfloat16 and out.shape == (2, 40, 4, 128)
    assert gpu.count_unwritten(out, lse, WL.out_dtype) == (out.numel(), lse.numel())


def test_the_repository_fp8_workloads_reach_correctness_determinism_sanitizer_and_perf(gates_dir: Path) -> None:
    config = load_config(gates_dir)
    gates = {g.name: g.params for p in config.phases for g in p.gates}
    small, bench = set(config.sets["fp8"]), set(config.sets["fp8-bench"])
    assert small and bench and all(config.workloads[n].fp8 for n in small | bench)
    assert small | bench <= set(gates["correctness"].workloads)
    assert small <= set(gates["determinism"].workloads) and small <= set(gates["sanitizer"].workloads)
    assert set(gates["perf-fp8"].workloads) == bench and gates["perf-fp8"].gated == ("fa3",)
    assert gates["perf-fp8"].ceiling == "fp8-matmul"
    assert {config.workloads[n].head_dim for n in bench} == set(FP8_HEAD_DIMS)
    assert min(config.workloads[n].seqlen_q for n in bench) >= 4096  # the S >= 4K


def test_inputs_are_fresh_e4m3_with_descales_per_batch_and_kv_head() -> None:
    a, b = serving.inputs_for(WL, 1, "cpu"), serving.inputs_for(WL, 2, "cpu")
    assert isinstance(a, serving.Batch) and a.descales is not None
    assert a.q.dtype == torch.float8_e4m3fn and a.k.shape == (2, 70, 2, 128)
    assert all(d.shape == (2, 2) and d.dtype == torch.float32 for d in a.descales)
    lo, hi = fp8.DESCALE_RANGE
    assert all(bool(((d >= lo) & (d < hi)).all()) for d in a.descales)
    assert not torch.equal(a.q.float(), b.q.float())  # a fresh draw per seed
    assert a.q.float().abs().sum() > 0  # never zeros


def test_flashcore_and_fa3_get_the_same_descales() -> None:
    batch = serving.inputs_for(WL, 1, "cpu")
    seen: dict[str, dict[str, Any]] = {}

    def record(name: str) -> Any:
        return lambda *args, **kw: seen.setdefault(name, kw)

    fc = SimpleNamespace(attention_fp8=record("flashcore"))
    batch.flashcore(fc, "OUT", "LSE", debug_fault=4)()
    batch.fa3(SimpleNamespace(flash_attn_func=record("fa3")))()
    for name in ("flashcore", "fa3"):
        assert seen[name]["causal"] is True
        assert all(seen[name][k] is d for k, d in zip(fp8_names(), batch.descales, strict=True))
    assert (seen["flashcore"]["out"], seen["flashcore"]["debug_fault"]) == ("OUT", 4)
    assert "window_size" not in seen["fa3"] and "softcap" not in seen["fa3"]


def test_sdpa_backends_say_they_have_no_fp8() -> None:
    batch = serving.inputs_for(WL, 1, "cpu")
    with pytest.raises(backends.Unavailable, match="no FP8"):
        backends.prepare_serving("cudnn", batch)


def test_driver_gets_the_e4m3_dtype() -> None:
    args = driver_args(WL)
    assert args[args.index("--dtype") + 1] == "e4m3" and "--causal" in args


def _measured(batch: serving.Batch, out: torch.Tensor, lse: torch.Tensor) -> correctness.Measured:
    return correctness.judge_serving(batch, out, lse, seed=1)


def test_the_reference_itself_passes_and_a_planted_wrong_result_fails() -> None:
    """Ours = the E4M3-P torch result (what a correct kernel computes, to its rounding): PASS. The same with one
    output row off by 0.25: FAIL, by FA3's FP8 bound (twice the baseline's error, ~0.07 at these short rows)."""
    from flashcore import reference as truth

    batch = serving.inputs_for(WL, 3, "cpu")
    assert batch.descales is not None
    q, k, v = (truth.dequantize(x, s, WL.heads_kv)
               for x, s in zip((batch.q, batch.k, batch.v), batch.descales, strict=True))
    ours, lse = truth.dense(q, k, v, causal=True, scale=128 ** -0.5, p_dtype=torch.float8_e4m3fn)
    out = ours.to(torch.bfloat16)
    good = _measured(batch, out, lse)
    checks = correctness.verdicts("f", "e4m3", good, P)
    assert {c.metric: c.status for c in checks} == {"unwritten_elements": Status.PASS, "nonfinite_elements":
                                                     Status.PASS, "err_vs_fp32": Status.PASS,
                                                     "lse_max_abs": Status.PASS}
    rule = next(c for c in checks if c.metric == "err_vs_fp32")
    assert "E4M3-P baseline" in rule.message and good.stats.err_sdpa > 0
    bad = out.clone()
    bad[0, 5] += 0.25
    failed = correctness.verdict_output("f", "e4m3", _measured(batch, bad, lse), P)
    assert failed.status is Status.FAIL


def test_fp8_rule_uses_its_own_factor_and_slack() -> None:
    m = correctness.Measured(1, 0, 0, 0, ErrorStats(err_ours=0.021, err_sdpa=0.01, diff_sdpa=0.0, lse_err=0.0,
                                                    lse_bad_rows=0))
    assert correctness.verdict_output("f", "e4m3", m, P).status is Status.FAIL  # 0.021 > 2 x 0.01 + 1e-5
    loose = dataclasses.replace(P, fp8_error_factor=3.0)
    assert correctness.verdict_output("f", "e4m3", m, loose).status is Status.PASS
    assert correctness.verdict_output("f", "bf16", m, loose).status is Status.FAIL  # bf16 keeps its own
    assert correctness.baseline_name(WL) == fp8.BASELINE


def test_a_planted_fault_reaches_attention_fp8(monkeypatch: pytest.MonkeyPatch) -> None:
    """The correctness and determinism gates plant kernel faults through load_flashcore: FP8 workloads call
    attention_fp8, so it must carry the fault too (else a planted fault could never turn them red)."""
    import importlib

    fake = SimpleNamespace(attention=lambda *a, **kw: kw, attention_fp8=lambda *a, **kw: kw)
    monkeypatch.setattr(importlib, "import_module", lambda name: fake)
    planted = gpu.load_flashcore(1)
    assert planted.attention_fp8()["debug_fault"] == 1 and planted.attention()["debug_fault"] == 1


def test_fp8_lse_has_its_own_limit() -> None:
    m = correctness.Measured(1, 0, 0, 0, ErrorStats(err_ours=0.0, err_sdpa=0.01, diff_sdpa=0.0, lse_err=0.0103,
                                                    lse_bad_rows=0))
    assert correctness.verdict_lse("f", m, P, "e4m3").status is Status.PASS  # FA3's own FP8 LSE error
    assert correctness.verdict_lse("f", m, P, "bf16").status is Status.FAIL
    leaked = dataclasses.replace(m, stats=dataclasses.replace(m.stats, lse_err=0.057))  # a key leaked into 17
    assert correctness.verdict_lse("f", leaked, P, "e4m3").status is Status.FAIL
