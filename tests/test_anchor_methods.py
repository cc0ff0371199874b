"""bench/anchor_methods.py: its pure parts on the CPU (deviation, TFLOPS conversion, the JSON entries given fake
timings, the table), and one GPU run of the script on one anchor (needs an H100)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import load_bench

from harness.bench import backends, flops, timing
from harness.bench.settings import Anchor, TimingParams

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "anchor_methods.py"



am = load_bench("anchor_methods")
ANCHORS = {  # three rows of gates/bench.yaml `anchors:` (written out: the tests do not depend on gates/)
    "b4-s8k-d128": Anchor(4, 16, 8192, 8192, 128, "bf16", False, "tflops", 351, 591, 625),
    "b8-s4k-d128-causal": Anchor(8, 16, 4096, 4096, 128, "bf16", True, "tflops", 306, 537, 589),
    "decode-b64-h32-s8k": Anchor(64, 32, 1, 8192, 128, "bf16", False, "tbps", 2.49, 3.08, 3.05),
}


@pytest.fixture(autouse=True)
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """No NVML; nvidia-smi reads 1650 MHz, 700 W (before and after each method): the same on any machine."""
    monkeypatch.setattr(am, "read_clock", lambda smi: (1650.0, 700.0) if smi else None)


def test_deviation() -> None:
    assert am.deviation(110.0, 100.0) == pytest.approx(10.0)
    assert am.deviation(95.0, 100.0) == pytest.approx(-5.0)
    assert am.deviation(None, 100.0) is None
    assert am.deviation(100.0, None) is None


def test_rates_tflops_and_decode_tbps() -> None:
    wl = am.anchor_workload("b4-s8k-d128", ANCHORS["b4-s8k-d128"])
    assert wl.kind == "compute-bound" and (wl.batch, wl.heads_q, wl.seqlen_k, wl.head_dim) == (4, 16, 8192, 128)
    fl = 4.0 * 4 * 16 * 8192 * 8192 * 128
    assert am.rates([1.0, 2.0], wl) == pytest.approx([fl / 1e-3 / 1e12, fl / 2e-3 / 1e12])
    causal = am.anchor_workload("c", ANCHORS["b8-s4k-d128-causal"])
    assert am.rates([1.0], causal)[0] == pytest.approx(flops.workload_flops(causal) / 1e9)
    dec = am.anchor_workload("decode-b64-h32-s8k", ANCHORS["decode-b64-h32-s8k"])
    assert dec.kind == "memory-bound"
    assert am.rates([2.0], dec)[0] == pytest.approx(2 * 64 * 8192 * 32 * 128 * 2 / 2e-3 / 1e12)


def test_clock_summary() -> None:
    got = am.clock_summary("nvml", [(1500.0, 690.0), (1700.0, None), (1600.0, 700.0)])
    assert got == {"source": "nvml", "samples": 3, "sm_mhz": 1600.0, "sm_mhz_min": 1500.0, "sm_mhz_max": 1700.0,
                   "power_w": 695.0}
    assert am.clock_summary("nvidia-smi", [])["source"] == "none"


def _fake_runners(ms: float) -> dict[str, object]:
    def fail() -> tuple[list[float], list[float]]:
        raise ModuleNotFoundError("No module named 'triton'")

    return {"do_bench": fail, "by_hand": lambda: ([ms * 1.1, ms, ms * 0.9], []),
            "ours": lambda: ([ms, ms * 0.8, ms * 0.9], [1800.0, 1900.0, 1700.0])}


def test_measure_backend_entries_and_json_shape() -> None:
    wl = am.anchor_workload("b4-s8k-d128", ANCHORS["b4-s8k-d128"])
    ms = flops.workload_flops(wl) / 351e12 * 1e3  # exactly the FA2 anchor
    logged: list[str] = []
    got = am.measure_backend(wl, 351.0, _fake_runners(ms), logged.append)
    assert list(got) == list(am.METHODS)
    assert got["do_bench"] == {"ok": False, "why": "ModuleNotFoundError: No module named 'triton'"}
    hand, ours = got["by_hand"], got["ours"]
    assert hand["ok"] and hand["n"] == 3 and hand["median_ms"] == pytest.approx(ms)
    assert hand["value"] == pytest.approx(351.0) and hand["deviation_pct"] == pytest.approx(0.0, abs=1e-9)
    assert hand["probe_mhz"] is None and am.clock_of(hand) == 1650.0
    assert hand["clocks"] == {"source": "nvidia-smi", "samples": 2, "sm_mhz": 1650.0, "sm_mhz_min": 1650.0,
                              "sm_mhz_max": 1650.0, "power_w": 700.0}
    assert ours["median_ms"] == pytest.approx(0.9 * ms) and ours["deviation_pct"] == pytest.approx(100 / 0.9 - 100)
    assert ours["probe_mhz"] == 1800.0 and am.clock_of(ours) == 1800.0
    assert any("failed" in line for line in logged) and len(logged) == 3
    entry = {"anchor": wl.name, "shape": wl.label, "unit": "tflops", "seed": 1, "backends": [
        {"backend": "fa2", "anchor_value": 351.0, "available": True, "implementation": "x", "methods": got},
        {"backend": "fa3", "anchor_value": 625.0, "available": False, "why": "FA3 not importable: nope"}]}
    again = json.loads(json.dumps({"results": [entry]}))
    assert again["results"][0]["backends"][0]["methods"]["ours"]["times_ms"] == pytest.approx([ms, 0.8 * ms, 0.9 * ms])


def test_missing_runner_is_recorded() -> None:
    wl = am.anchor_workload("b4-s8k-d128", ANCHORS["b4-s8k-d128"])
    got = am.measure_backend(wl, 351.0, {"ours": lambda: ([1.0], [])})
    assert got["do_bench"]["ok"] is False and "KeyError" in got["do_bench"]["why"] and got["ours"]["ok"]


def test_table() -> None:
    wl = am.anchor_workload("b4-s8k-d128", ANCHORS["b4-s8k-d128"])
    ms = flops.workload_flops(wl) / 351e12 * 1e3
    methods = am.measure_backend(wl, 351.0, _fake_runners(ms))
    dec = am.anchor_workload("decode-b64-h32-s8k", ANCHORS["decode-b64-h32-s8k"])
    results = [
        {"anchor": wl.name, "unit": "tflops", "backends": [
            {"backend": "fa2", "anchor_value": 351.0, "available": True, "methods": methods},
            {"backend": "fa3", "anchor_value": 625.0, "available": False, "why": "FA3 not importable: nope"}]},
        {"anchor": dec.name, "unit": "tbps", "backends": [
            {"backend": "cudnn", "anchor_value": 3.08, "available": True,
             "methods": am.measure_backend(dec, 3.08, _fake_runners(2.8))}]},
    ]
    text = am.table(results)
    lines = text.splitlines()
    assert lines[0].split() == ["anchor", "backend", "ref", "do_bench", "dev%", "MHz", "by_hand", "dev%", "MHz",
                                "ours", "dev%", "MHz"]
    fa2 = lines[1].split()
    assert fa2[:4] == ["b4-s8k-d128", "fa2", "351.0", "failed"] and fa2[4:7] == ["351.0", "+0.0", "1650"]
    assert fa2[7:] == ["390.0", "+11.1", "1800"]
    assert lines[2].split() == ["b4-s8k-d128", "fa3", "625.0"] + ["n/a"] * 9
    cudnn = lines[3].split()
    assert cudnn[2] == "3.08" and cudnn[4] == f"{am.rates([2.8], dec)[0]:.2f}"
    assert len({len(x) for x in lines[:4]}) == 1  # aligned columns
    assert "b4-s8k-d128 fa3: not available: FA3 not importable: nope" in text
    assert "b4-s8k-d128 fa2 do_bench: ModuleNotFoundError: No module named 'triton'" in text


class Timeline:
    """A simulated GPU: CUDA events read a clock in ms that flushes and calls advance; nothing runs on a GPU."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now, self.log = 0.0, list[str]()
        sim = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.t = 0.0

            def record(self) -> None:
                self.t = sim.now

            def elapsed_time(self, end: Event) -> float:
                return end.t - self.t

        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
        monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: self.step("spin", cycles / 1980e3))
        monkeypatch.setattr(timing, "read_clocks", lambda: {"source": "simulated"})
        monkeypatch.setattr(timing, "max_sm_clock_mhz", lambda: 1980)

    def step(self, what: str, ms: float) -> None:
        self.log.append(what)
        self.now += ms


def test_by_hand_is_do_bench_s_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = Timeline(monkeypatch)
    times = am.by_hand(lambda: sim.step("fn", 4.0), lambda: sim.step("flush", 0.1))
    # one call, estimate 5 x (flush, fn) = 4.1 ms, warm-up int(25 / 4.1) = 6 calls unflushed, int(100 / 4.1) = 24 reps
    assert times == pytest.approx([4.0] * 24)
    assert sim.log == ["fn"] + ["flush", "fn"] * 5 + ["fn"] * 6 + ["flush", "fn"] * 24


def test_runners_on_a_simulated_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = Timeline(monkeypatch)
    tp = TimingParams(warmup=5, warmup_ms=30.0, min_reps=20, spread_groups=5, max_reps=100, target_ms=100.0,
                             flush_mib=0, head_start_ms=2.0, clock_probe_us=50.0,
                             clock_probe_after_ms=0.0, record_kernels=False, mirrored=False,
                             extend_above=0.6, extend_target_ms=100.0, extend_min_reps=20, extend_max_reps=100)
    run = am.runners_for(backends.Prepared(lambda: sim.step("fn", 2.0)), tp, lambda: sim.step("flush", 0.1),
                         timing.L2Flusher(0))
    hand, _ = run["by_hand"]()
    times, probe = run["ours"]()
    assert hand == pytest.approx([2.0] * int(100 / 2.1))
    assert times == pytest.approx([2.0] * tp.reps_for(2.0)) and probe == pytest.approx([1980.0] * len(times))


def test_main_writes_the_json_and_the_table(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The whole script on a simulated GPU: fa2 runs (do_bench fails without triton), fa3 is not available."""
    sim = Timeline(monkeypatch)
    tp = TimingParams(warmup=5, warmup_ms=30.0, min_reps=20, spread_groups=5, max_reps=100, target_ms=100.0,
                      flush_mib=256, head_start_ms=2.0, clock_probe_us=50.0,
                      clock_probe_after_ms=0.0, record_kernels=False, mirrored=False,
                      extend_above=0.6, extend_target_ms=100.0, extend_min_reps=20, extend_max_reps=100)
    monkeypatch.setattr(am, "load_config", lambda gates_dir: None)
    monkeypatch.setattr(am, "load_bench_settings", lambda config: SimpleNamespace(anchors=ANCHORS, timing=tp))
    monkeypatch.setattr(am.gpu, "cuda_unavailable_reason", lambda: None)
    monkeypatch.setattr(am.gpu, "make_inputs", lambda wl, seed, device: (torch.randn(1), torch.randn(1), None))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "simulated H100")
    monkeypatch.setattr(timing, "L2Flusher", lambda mib: (lambda: sim.step("flush", 0.1)))
    ms = flops.workload_flops(am.anchor_workload("b4-s8k-d128", ANCHORS["b4-s8k-d128"])) / 351e12 * 1e3

    def prepare(b: str, wl: object, q: object, k: object, v: object) -> backends.Prepared:
        if b == "fa3":
            raise backends.Unavailable("FA3 not importable: simulated")
        return backends.Prepared(lambda: sim.step(b, ms), implementation=f"simulated {b}")

    monkeypatch.setattr(am.backends, "prepare", prepare)
    monkeypatch.setattr(am.backends, "probe", lambda p: None)
    monkeypatch.setitem(sys.modules, "triton", None)  # not importable, here and on a GPU host alike
    assert am.main(["--out", str(tmp_path), "--anchors", "b4-s8k-d128", "--backends", "fa2,fa3", "--seed", "7"]) == 0
    doc = json.loads((tmp_path / "anchor_methods.json").read_text())
    assert set(doc) == {"methods", "timing", "base_seed", "gpu", "torch", "triton", "results"}
    assert doc["base_seed"] == 7 and doc["triton"].startswith("not importable") and doc["timing"]["flush_mib"] == 256
    (r,) = doc["results"]
    assert (r["anchor"], r["unit"], r["shape"]) == ("b4-s8k-d128", "tflops", "B4 H16/16 S8192x8192 D128 bf16")
    fa2, fa3 = r["backends"]
    assert fa3 == {"backend": "fa3", "anchor_value": 625.0, "available": False, "why": "FA3 not importable: simulated"}
    assert fa2["implementation"] == "simulated fa2" and not fa2["methods"]["do_bench"]["ok"]
    for m in ("by_hand", "ours"):
        assert fa2["methods"][m]["value"] == pytest.approx(351.0) and abs(fa2["methods"][m]["deviation_pct"]) < 1e-6
    out, err = capsys.readouterr()
    assert out.splitlines()[1].split()[:4] == ["b4-s8k-d128", "fa2", "351.0", "failed"]
    assert "[1/1] b4-s8k-d128 fa2 (anchor 351.0):" in err and "not available: FA3 not importable" in err


def test_help_runs_without_gpu() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0 and "--anchors" in out.stdout and "do_bench" in out.stdout


@pytest.mark.gpu
def test_one_anchor_on_the_gpu(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), "--anchors", "b4-s8k-d128",
                          "--backends", "fa2"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    doc = json.loads((tmp_path / "anchor_methods.json").read_text())
    fa2 = doc["results"][0]["backends"][0]
    assert fa2["available"] and fa2["methods"]["by_hand"]["ok"] and fa2["methods"]["ours"]["ok"]
    assert fa2["methods"]["ours"]["probe_mhz"] > 0
