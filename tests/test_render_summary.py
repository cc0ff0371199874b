"""The first screen of the HTML report (harness/render/summary.py): failing checks, speed ratios, short names."""

from __future__ import annotations

from harness.render.summary import MAX_ATTENTION, attention, short_name, short_text, speed
from harness.results import Check, GateResult, RunResult, Status


def _run(*gates: GateResult) -> RunResult:
    return RunResult("r", 7, gates, {}, "t", 1.0)


def test_kernel_names_are_shortened_readably() -> None:
    assert short_name("_ZN9flashcore30attention_forward_wgmma_kernelILi256ENS_4Fp16EEEvNS_12KernelParamsE") == \
        "flashcore::attention_forward_wgmma_kernel<…>"
    assert short_name("void flashcore::attention_forward_wgmma_kernel<128, 128, flashcore::Bf16, false>"
                      "(flashcore::KernelParams, flashcore::TmaParams)") == \
        "flashcore::attention_forward_wgmma_kernel<128, 128, Bf16, false>"
    assert short_name("prefill-d128") == "prefill-d128" and short_name("_ZN") == "_ZN"


def test_long_messages_keep_their_first_line_cut() -> None:
    assert short_text("ok") == "ok" and short_text("") == ""
    cut = short_text("x" * 500)
    assert len(cut) == 180 and cut.endswith("…")
    assert short_text("first line\nsecond") == "first line…"


def test_attention_lists_errors_first_then_failures_and_counts_the_rest() -> None:
    fail = Check("w1", "speed", 1.0, 0.9, Status.FAIL, ">=", message="slow")
    error = Check("w2", "run", None, None, Status.ERROR, message="crashed")
    ok = Check("w3", "speed", 1.0, 1.2, Status.PASS, ">=")
    gates = (GateResult("perf", 3, Status.FAIL, (ok, fail)), GateResult("api", 7, Status.ERROR, (error,)),
             GateResult("build", 1, Status.ERROR, (), message="make build failed"))
    rows, more = attention(_run(*gates))
    assert [r["gate"] for r in rows] == ["api", "build", "perf"] and more == 0
    assert rows[2]["what"] == "w1 · speed: 0.9 (needs >= 1)" and rows[1]["message"] == "make build failed"
    many = GateResult("x", 1, Status.FAIL, tuple(Check(f"w{i}", "m", 1.0, 2.0, Status.FAIL) for i in range(50)))
    rows, more = attention(_run(many))
    assert len(rows) == MAX_ATTENTION and more == 50 - MAX_ATTENTION


def test_speed_takes_each_workload_once_from_the_perf_gates() -> None:
    rows = [{"backend": "flashcore", "throughput": 600.0}, {"backend": "fa3", "ours_speedup": 0.95},
            {"backend": "cudnn", "ours_speedup": 1.1}]
    details = {"workloads": [{"name": "p", "shape": "B1", "unit": "TFLOPS", "rows": rows}],
               "plots": {"ratio_svg": "<svg/>"}}
    again = {"workloads": [{"name": "p", "rows": [{"backend": "flashcore", "throughput": 1.0}]}]}
    got, chart = speed(_run(GateResult("perf-fa2", 3, Status.PASS, details=details),
                            GateResult("perf-fa3", 4, Status.PASS, details=again),
                            GateResult("build", 1, Status.PASS, details={"workloads": [{"name": "q"}]})))
    assert got == [{"name": "p", "shape": "B1", "unit": "TFLOPS", "ours": 600.0, "fa3": 0.95, "cudnn": 1.1,
                    "fa2": None}]
    assert chart == "<svg/>"
