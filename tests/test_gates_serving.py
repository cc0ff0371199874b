"""The gates on serving workloads (issue 15) on the CPU: the inputs of each layout, flashcore.serving's CPU path
judged by the correctness rule against the fp32 reference and the 16-bit torch baseline, planted faults (a leaked
key, an unwritten sequence, a noisy repeat) turning correctness and determinism red, the driver's flags, FLOPs and
the benchmark backends."""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import pytest
import torch
from conftest import workload

import flashcore
from harness.bench import backends, flops
from harness.driver_args import driver_args
from harness.gates import correctness, determinism
from harness.gates.correctness import CorrectnessParams
from harness.gates.determinism import DeterminismParams
from harness.results import Status
from harness.schema import Workload, workload_problems
from harness.support import gpu, serving

P = CorrectnessParams(workloads=("w",), seeds=1, fp16_max_abs=2.0e-3, bf16_error_factor=2.0, bf16_error_slack=1.0e-5,
                      fp8_error_factor=2.0, fp8_error_slack=1.0e-5, fp8_lse_max_abs=2.0e-2,
                      lse_max_abs=1.0e-3, reference_chunk_mib=64)


def serve(name: str, **fields: Any) -> Workload:
    base = workload(name, b=fields.pop("b", 3), hq=fields.pop("hq", 4), hkv=fields.pop("hkv", 2),
                    sq=fields.pop("sq", 33), sk=fields.pop("sk", 80), d=fields.pop("d", 64),
                    causal=fields.pop("causal", True))
    wl = dataclasses.replace(base, **fields)
    assert workload_problems(wl) == []
    return wl


LAYOUTS = {
    "varlen": serve("varlen", layout="varlen", sq=33, sk=80, seqlens_q=(0, 1, 33), seqlens_k=(5, 1, 80)),
    "kvcache": serve("kvcache", layout="kvcache", sq=2, sk=96, seqlens_k=(0, 17, 96)),
    "paged": serve("paged", layout="paged", sq=3, sk=96, page_size=16, seqlens_k=(1, 40, 96)),
    "window": serve("window", sq=50, sk=50, window_left=7, window_right=0),
    "softcap": serve("softcap", sq=40, sk=40, softcap=5.0, q_scale=4.0),
    "varlen-window-softcap": serve("vws", layout="varlen", causal=False, sq=40, sk=40, seqlens_q=(40, 9, 0),
                                   seqlens_k=(40, 9, 3), window_left=5, window_right=3, softcap=10.0),
    "d192-v128": serve("d192", layout="kvcache", d=192, head_dim_v=128, sq=4, sk=64, seqlens_k=(64, 3, 30)),
}


def cpu_run(fc: Any, wl: Workload, batch: serving.Batch, **options: Any) -> tuple[torch.Tensor, torch.Tensor]:
    out, lse = gpu.poisoned_outputs(wl, "cpu")
    serving.run(fc, wl, batch, out, lse, fallback="sdpa", **options)
    return out, lse


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_each_layout_passes_the_correctness_rule(name: str) -> None:
    wl = LAYOUTS[name]
    batch = serving.make(wl, 11, "cpu", nan_tails=True)
    out, lse = cpu_run(flashcore, wl, batch)
    checks = correctness.verdicts(wl.name, wl.dtype, correctness.judge_serving(batch, out, lse, 11), P)
    assert [c.status for c in checks] == [Status.PASS] * 4, [c.message for c in checks]


def test_inputs_follow_the_layouts() -> None:
    v = serving.make(LAYOUTS["varlen"], 1, "cpu")
    assert v.q.shape == (34, 4, 64) and v.k.shape == (86, 2, 64) and v.cu_q.tolist() == [0, 0, 1, 34]
    p = serving.make(LAYOUTS["paged"], 1, "cpu", nan_tails=True)
    assert p.k.shape == (18, 16, 2, 64) and p.page_table is not None and p.page_table.shape == (3, 6)
    assert sorted(p.page_table.flatten().tolist()) == list(range(18))  # every page once, shuffled
    keys = [k for _, _, k, _ in p.sequences()]
    assert [k.shape[0] for k in keys] == [1, 40, 96] and all(bool(torch.isfinite(k).all()) for k in keys)
    assert bool(torch.isnan(p.k).any())  # the NaN tails live in the pages past the lengths
    assert gpu.output_shapes(LAYOUTS["varlen"]) == ((34, 4, 64), (4, 34))
    assert gpu.output_shapes(LAYOUTS["d192-v128"]) == ((3, 4, 4, 128), (3, 4, 4))


def faulty(fault: str) -> types.ModuleType:
    """flashcore with its serving entry points broken: "leak" widens the window by one key, "unwritten" leaves the
    last sequence's output rows alone, "noise" changes one element on every other call."""
    calls: list[int] = []

    def wrap(fn: Any) -> Any:
        def call(*args: Any, **kw: Any) -> Any:
            calls.append(1)
            if fault == "leak":
                left, right = kw.get("window_size", (-1, -1))
                kw["window_size"] = (left + 1 if left >= 0 else left, right)
            out = kw["out"]
            keep = out[-1].clone()
            got = fn(*args, **kw)
            if fault == "unwritten":
                out[-1] = keep
            if fault == "noise" and len(calls) % 2 == 0:
                out.view(-1)[0] += 1.0
            return got
        return call

    fake = types.ModuleType("faulty_flashcore")
    fake.serving = types.SimpleNamespace(varlen=wrap(flashcore.serving.varlen),  # type: ignore[attr-defined]
                                         kvcache=wrap(flashcore.serving.kvcache), dense=wrap(flashcore.serving.dense))
    return fake


def judged(batch: serving.Batch, out: torch.Tensor, lse: torch.Tensor) -> list[Any]:
    wl = batch.wl
    return correctness.verdicts(wl.name, wl.dtype, correctness.judge_serving(batch, out, lse, 0), P)


def test_a_leaked_key_fails_correctness() -> None:
    wl = LAYOUTS["window"]
    batch = serving.make(wl, 3, "cpu")
    out, lse = cpu_run(faulty("leak"), wl, batch)
    checks = {c.metric: c for c in judged(batch, out, lse)}
    assert checks["err_vs_fp32"].status is Status.FAIL and checks["lse_max_abs"].status is Status.FAIL


def test_an_unwritten_sequence_fails_correctness() -> None:
    wl = LAYOUTS["kvcache"]
    batch = serving.make(wl, 4, "cpu")
    out, lse = cpu_run(faulty("unwritten"), wl, batch)
    checks = {c.metric: c for c in judged(batch, out, lse)}
    assert checks["unwritten_elements"].status is Status.FAIL and (checks["unwritten_elements"].measured or 0) > 0


@pytest.mark.parametrize(("fault", "mismatches"), [("", 0), ("noise", 1)])
def test_determinism_on_a_paged_cache(fault: str, mismatches: int) -> None:
    wl = LAYOUTS["paged"]
    fc = faulty(fault) if fault else flashcore
    stats = determinism.repeat_bits(fc, wl, serving.make(wl, 5, "cpu", nan_tails=True), 5, 3, "cpu",
                                    lambda r: {"fallback": "sdpa"})
    verdict = determinism.verdict_determinism(wl.name, stats, DeterminismParams(workloads=("w",), repeats=3))
    assert stats.mismatches == mismatches
    assert verdict.status is (Status.FAIL if mismatches else Status.PASS)


def test_the_baseline_rounds_like_a_16_bit_kernel() -> None:
    """The baseline's error against fp32 is bf16-sized: neither zero (it would make the rule impossible) nor large."""
    wl = LAYOUTS["softcap"]
    batch = serving.make(wl, 9, "cpu")
    out, lse = cpu_run(flashcore, wl, batch)
    stats = serving.compare(batch, out, lse)
    assert 1e-4 < stats.err_sdpa < 5e-2 and stats.err_ours <= stats.err_sdpa


def test_driver_flags_carry_every_serving_field() -> None:
    args = driver_args(LAYOUTS["varlen-window-softcap"])
    text = " ".join(args)
    assert "--layout varlen --seqlens-q 40,9,0 --seqlens-k 40,9,3" in text
    assert "--window 5,3" in text and "--softcap 10.0" in text and "--causal" not in args
    paged = " ".join(driver_args(LAYOUTS["paged"]))
    assert "--layout paged --seqlens-k 1,40,96 --page-size 16" in paged
    assert "--head-dim-v 128" in " ".join(driver_args(LAYOUTS["d192-v128"]))
    assert "--layout" not in driver_args(workload("plain"))


def test_flops_and_bytes_count_each_sequence() -> None:
    wl = LAYOUTS["varlen"]
    want = sum(flops.attention_flops(1, 4, sq, sk, 64, True) for sq, sk in ((0, 5), (1, 1), (33, 80)))
    assert flops.workload_flops(wl) == pytest.approx(want)
    cache = LAYOUTS["kvcache"]
    assert flops.workload_kv_bytes(cache) == (0 + 17 + 96) * 2 * 64 * 2 * 2
    d192 = LAYOUTS["d192-v128"]
    per = sum(flops.attention_flops(1, 4, 4, sk, 1, True) for sk in (64, 3, 30))
    assert flops.workload_flops(d192) == pytest.approx(per * (192 + 128) / 2)


def test_only_flashcore_and_fa3_run_serving_workloads() -> None:
    batch = serving.make(LAYOUTS["varlen"], 1, "cpu")
    with pytest.raises(backends.Unavailable, match="only flashcore and fa3"):
        backends.prepare_serving("cudnn", batch)
    with pytest.raises(backends.Unavailable, match="planted kernel faults reach flashcore.attention and attention_fp8"):
        backends.prepare_serving("flashcore", batch, fault=4)
