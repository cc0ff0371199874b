"""The perf and scaling gates end to end on the CPU: the GPU measurement is replaced by a stand-in Measurer
returning SYNTHETIC paired rounds (tests/fixtures/bench/synthesize.py: throughputs near the ROADMAP anchors under
a clock that steps +-10 %, every backend alike), everything else is the real code: settings from the
repository's gates/*.yaml, pairing groups, verdicts, the stored-run comparison, the report section with its
charts."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from fixtures.bench.synthesize import MEDIAN_FACTOR, paired_rounds

from harness import env
from harness.bench import flops as fl
from harness.bench import plots, runner
from harness.bench.backends import SLOW_FAULT
from harness.bench.record import Measurement, not_available
from harness.bench.settings import load_bench_settings
from harness.config import load_config
from harness.gates import perf, scaling
from harness.gates.base import GateContext
from harness.render import render_html
from harness.results import GateResult, RunResult, Status
from harness.schema import Config, Workload
from harness.support import gpu

GPU = "NVIDIA H100 80GB HBM3"
ANCHORS = {"fa2": 351.0, "cudnn": 591.0, "efficient": 280.0, "fa3": 625.0}
DECODE = {"flashcore": 3.1, "fa2": 2.49, "cudnn": 3.08, "efficient": 2.2, "fa3": 3.05}
Rate = Callable[[Workload, str], float | None]


def rate(ours: float = 400.0) -> Rate:
    """Throughput per (workload, backend): TFLOPS, TB/s for decode; None = not available (FA3 on fp16)."""

    def f(wl: Workload, backend: str) -> float | None:
        if backend == "fa3" and wl.dtype == "fp16":
            return None
        if wl.kind == "memory-bound":
            return DECODE[backend]
        return ours if backend == "flashcore" else ANCHORS[backend]

    return f


class StandIn:
    """Measurer with the real one's interface: each group in its own synthetic rounds; planted faults act like
    the real ones (the slow path 1.3x slower; noise: bursts alongside FlashCore's calls from mid-rounds on)."""

    ROUNDS = 25

    def __init__(self, options: runner.Options, throughput: Rate) -> None:
        self.options, self.throughput = options, throughput
        self.groups: list[list[str]] = []

    def seed(self, wl: Workload) -> int:
        return 7

    def release(self) -> None:
        pass

    def measure_group(self, group: Sequence[Workload], backends: Sequence[str]) -> dict[tuple[str, str], Measurement]:
        self.groups.append([w.name for w in group])
        out: dict[tuple[str, str], Measurement] = {}
        calls: dict[tuple[Workload, str], float] = {}
        for wl in group:
            for b in backends:
                t = self.throughput(wl, b)
                if t is None:
                    out[(wl.name, b)] = not_available(wl, b, "fa3_fwd_interface (fa3-fwd 0.0.3) is built without "
                                                      "fp16 (only bf16)")
                    continue
                if b == "flashcore" and self.options.fault == SLOW_FAULT:
                    t /= 1.3
                work = fl.workload_kv_bytes(wl) if wl.kind == "memory-bound" else fl.workload_flops(wl)
                calls[(wl, b)] = work / (t * 1e12) * 1e3 / MEDIAN_FACTOR
        half = self.ROUNDS // 2
        burst = (lambda r, key: 1.4 if key[1] == "flashcore" and r >= half else 1.0) if self.options.noisy else None
        got = paired_rounds(calls, self.ROUNDS, burst=burst, jitter_amount=0.0)
        for key, m in got.items():
            planted = [*(["kernel debug_fault 4"] if self.options.fault == SLOW_FAULT else []),
                       *(["noise: side-stream matmul bursts"] if self.options.noisy else [])]
            out[key] = dataclasses.replace(m, implementation=f"stand-in {key[1]}",
                                           planted=", ".join(planted) if key[1] == "flashcore" else "")
        return {(w.name, b): out[(w.name, b)] for w in group for b in backends}


@pytest.fixture
def gpu_stand_in(monkeypatch: pytest.MonkeyPatch) -> Callable[[Rate], None]:
    monkeypatch.setattr(gpu, "cuda_unavailable_reason", lambda: None)
    monkeypatch.setattr(gpu, "load_flashcore", lambda fault=0: object())
    here = {"gpu": GPU, "gpu_sm_count": 132}
    monkeypatch.setattr(perf, "_gpu_now", lambda: here)
    collect = env.collect  # the measurements file (a stored run) records the stand-in GPU, as on the H100
    monkeypatch.setattr(env, "collect", lambda root: {**collect(root), **here})

    def install(throughput: Rate) -> None:
        monkeypatch.setattr(runner, "shared", lambda run_dir, options: StandIn(options, throughput))

    install(rate())
    return install


def context(config: Config, gate: str, run_dir: Path, fault: int = 0, **params: object) -> GateContext:
    spec = next(g for p in config.phases for g in p.gates if g.name == gate)
    spec = dataclasses.replace(spec, params=dataclasses.replace(spec.params, **params))
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    return GateContext(spec=spec, config=config, run_dir=run_dir, repo_root=run_dir, seed=3, fault=fault)


def checks_of(result: GateResult, metric: str) -> list[Status]:
    return [c.status for c in result.checks if c.metric == metric]


def html(result: GateResult) -> str:
    return render_html(RunResult("t", result.phase, (result,), {}, "", 0.0))


@pytest.fixture
def config(gates_dir: Path) -> Config:
    return load_config(gates_dir)


@pytest.fixture
def stored(config: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None]) -> Path:
    """A stored run: the gate's own measurements file of a clean run (what make bench-baseline would keep)."""
    first = perf.run_perf(context(config, "perf-fa2", tmp_path / "first"))
    return tmp_path / "first" / first.details["measurements_file"]


def test_faster_than_fa2_and_stable_passes(config: Config, tmp_path: Path, stored: Path) -> None:
    result = perf.run_perf(context(config, "perf-fa2", tmp_path / "run"), stored_path=stored)
    assert result.status is Status.PASS, result.message
    workloads = {w["name"] for w in result.details["workloads"]}
    assert {"prefill-d128", "sweep-s2048", "sweep-s32768-causal"} <= workloads  # prefill set + the sweep
    assert "decode" not in workloads  # memory-bound: gated by ncu-dram, shown by perf-cudnn, not against FA2
    # the 5 prefill workloads of the stored run + 14 sweep points, two of them those workloads (S = 8K)
    assert len(workloads) == 17
    assert {"long-128k", "long-128k-causal"} <= workloads  # batch-1 points past 32K tokens
    per_workload = {c.metric for c in result.checks if c.workload == "prefill-d128"}
    assert per_workload == {"rel_std[speed_vs_fa2]", "speed_vs_fa2", "slowdown_vs_stored"}
    assert not any(c.metric.endswith("fa3") for c in result.checks)  # shown only
    ratio = next(c for c in result.checks if c.workload == "prefill-d128" and c.metric == "speed_vs_fa2")
    assert ratio.measured == pytest.approx(400 / 351, rel=1e-6)
    assert "paired" in ratio.message and "absolute" in ratio.message
    # FA3 on the fp16 workload: listed as not available, with why
    assert {"workload": "prefill-d128-fp16", "backend": "fa3", "label": "FA3",
            "why": "fa3_fwd_interface (fa3-fwd 0.0.3) is built without fp16 (only bf16)"} \
        in result.details["not_available"]
    assert result.logs[-1] == "logs/perf-fa2.bench.json" and (tmp_path / "run" / result.logs[-1]).is_file()


def test_sweep_points_of_one_causal_mode_share_their_rounds(config: Config, tmp_path: Path,
                                                          gpu_stand_in: Callable[[Rate], None],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[StandIn] = []

    def shared(run_dir: Path, options: runner.Options) -> StandIn:
        made.append(StandIn(options, rate()))
        return made[-1]

    monkeypatch.setattr(runner, "shared", shared)
    perf.run_perf(context(config, "perf-fa2", tmp_path / "run", regression=False))
    groups = made[0].groups
    assert ["sweep-s2048", "sweep-s4096", "prefill-d128", "sweep-s16384", "sweep-s32768", "long-64k",
            "long-128k"] in groups
    assert ["prefill-d64"] in groups and len(groups) == 5  # 3 prefill workloads alone + 2 sweep modes


def test_report_section_has_tables_charts_and_the_missing(config: Config, tmp_path: Path, stored: Path) -> None:
    result = perf.run_perf(context(config, "perf-fa2", tmp_path / "run"), stored_path=stored)
    text = html(result)
    assert text.count('<table class="bench"') == 17 and 'data-workload="prefill-d64"' in text  # one per workload
    row = text[text.index('data-workload="prefill-d128"'):]
    row = row[row.index('data-backend="fa3"'):row.index("</tr>", row.index('data-backend="fa3"'))]
    assert "625" in row and "0.640" in row  # FA3 at its anchor; FlashCore speed / FA3's = 400 / 625
    for chart in ("ratio", "seqlen"):
        start = text.index(f'data-chart="{chart}"')
        assert text[start:start + 400].count("<svg") == 1  # inline SVG, not escaped
    section = text[text.index('id="gate-perf-fa2"'):text.index("<summary>details</summary>")]
    assert "&lt;svg" not in section and "<?xml" not in section  # (the raw details dump below escapes it)
    assert "Not available here" in text and "built without fp16" in text


def test_slower_than_fa2_fails(config: Config, tmp_path: Path, stored: Path,
                               gpu_stand_in: Callable[[Rate], None]) -> None:
    gpu_stand_in(rate(ours=300.0))  # FA2 is 351
    result = perf.run_perf(context(config, "perf-fa2", tmp_path / "run", regression=False))
    assert result.status is Status.FAIL
    prefill = next(c for c in result.checks if c.workload == "prefill-d128" and c.metric == "speed_vs_fa2")
    assert prefill.status is Status.FAIL and prefill.measured == pytest.approx(300 / 351)
    assert "speed_vs_fa2" in result.message


def test_perf_cudnn_judges_cudnn(config: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None]) -> None:
    gpu_stand_in(rate(ours=500.0))  # faster than FA2 (351), slower than cuDNN (591)
    result = perf.run_perf(context(config, "perf-cudnn", tmp_path / "run"))
    assert result.status is Status.FAIL
    assert set(checks_of(result, "speed_vs_cudnn")) == {Status.FAIL}
    assert checks_of(result, "speed_vs_fa2") == []
    # no stored run of this GPU model under the test's repo_root: the regression checks do not apply, said once
    assert set(checks_of(result, "slowdown_vs_stored")) == {Status.NOT_APPLICABLE}
    assert "make prepare" in result.details["run_notice"]
    geomean = next(c for c in result.checks if c.metric == "geomean_speed_vs_cudnn")
    assert geomean.status is Status.FAIL and geomean.measured == pytest.approx(500 / 591, rel=1e-3)
    assert "worst" in geomean.message and "over 10 workloads" in geomean.message


def test_report_workloads_are_measured_and_shown_never_judged(config: Config, tmp_path: Path,
                                                             gpu_stand_in: Callable[[Rate], None]) -> None:
    gpu_stand_in(rate(ours=700.0))  # faster than cuDNN on prefill; decode (3.1 vs 3.08 TB/s) would pass too
    result = perf.run_perf(context(config, "perf-cudnn", tmp_path / "run"))
    assert result.status is Status.PASS, result.message
    shown = ["decode", "decode-b1-gqa", "long-64k", "long-64k-causal", "long-128k", "long-128k-causal"]
    assert result.details["report_only"] == shown  # the long ones are sweep points: named here, never judged
    names = {w["name"] for w in result.details["workloads"]}
    assert {"decode", "long-128k", "sweep-s32768"} <= names  # their tables are in the report
    assert not any(c.workload in shown for c in result.checks)
    assert any(c.workload == "sweep-s32768" for c in result.checks)  # the other sweep points stay judged


def fa3_rate(ratio: float, worst: str | None = None, worst_ratio: float = 0.0) -> Rate:
    """FlashCore at `ratio` x FA3's anchor on every workload (`worst` at worst_ratio)."""
    base = rate()

    def f(wl: Workload, backend: str) -> float | None:
        if backend != "flashcore":
            return base(wl, backend)
        return ANCHORS["fa3"] * (worst_ratio if wl.name == worst else ratio)

    return f


@pytest.mark.parametrize(("ratio", "worst", "worst_ratio", "status", "failing"), [
    (1.02, None, 0.0, Status.PASS, set()),
    (0.97, "prefill-s1k-causal", 0.91, Status.PASS, set()),  # geomean >= 0.955, worst >= 0.90
    (0.98, "prefill-s1k-causal", 0.85, Status.FAIL, {"speed_vs_fa3"}),  # one workload below 0.90, geomean 0.965
    (0.94, None, 0.0, Status.FAIL, {"geomean_speed_vs_fa3"}),  # every workload >= 0.90, geomean < 0.955
])
def test_perf_fa3_judges_each_workload_and_the_geometric_mean(
        config: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None], ratio: float, worst: str | None,
        worst_ratio: float, status: Status, failing: set[str]) -> None:
    gpu_stand_in(fa3_rate(ratio, worst, worst_ratio))
    result = perf.run_perf(context(config, "perf-fa3", tmp_path / "run"))
    assert result.status is status, result.message
    assert {c.metric for c in result.checks if c.status is Status.FAIL} == failing
    assert not any(c.workload == "prefill-d128-fp16" for c in result.checks)  # the FA3 wheel has no fp16
    geomean = next(c for c in result.checks if c.metric == "geomean_speed_vs_fa3")
    if worst:
        assert f"worst {worst} {worst_ratio:.4g}" in geomean.message


def test_perf_fa3_without_fa3_is_an_error_with_the_install_hint(config: Config, tmp_path: Path,
                                                               gpu_stand_in: Callable[[Rate], None]) -> None:
    base = rate(ours=700.0)
    gpu_stand_in(lambda wl, b: None if b == "fa3" else base(wl, b))
    result = perf.run_perf(context(config, "perf-fa3", tmp_path / "run"))
    assert result.status is Status.ERROR
    assert all(c.status is Status.ERROR for c in result.checks if "fa3" in c.metric)
    geomean = next(c for c in result.checks if c.metric == "geomean_speed_vs_fa3")
    assert "no geometric mean without every workload" in geomean.message


def test_planted_slow_kernel_turns_perf_fa3_red(config: Config, tmp_path: Path,
                                                gpu_stand_in: Callable[[Rate], None]) -> None:
    gpu_stand_in(fa3_rate(1.0))  # at FA3's speed: passes clean, and the planted 1.3x slower path must fail
    assert perf.run_perf(context(config, "perf-fa3", tmp_path / "clean")).status is Status.PASS
    result = perf.run_perf(context(config, "perf-fa3", tmp_path / "slow", fault=SLOW_FAULT))
    assert result.status is Status.FAIL
    assert set(checks_of(result, "speed_vs_fa3")) == {Status.FAIL}
    assert checks_of(result, "geomean_speed_vs_fa3") == [Status.FAIL]


def test_planted_slow_path_fails_the_regression_check(config: Config, tmp_path: Path, stored: Path) -> None:
    result = perf.run_perf(context(config, "perf-fa2", tmp_path / "slow", fault=SLOW_FAULT), stored_path=stored)
    assert result.status is Status.FAIL
    assert set(checks_of(result, "slowdown_vs_stored")) == {Status.FAIL}
    slow = next(c for c in result.checks if c.metric == "slowdown_vs_stored")
    assert slow.measured == pytest.approx(1.3)
    assert result.details["planted"] == ["kernel debug_fault 4"]
    assert "Planted (test-only): kernel debug_fault 4" in html(result)


def test_planted_noise_fails_the_spread_and_draws_no_speed_verdict(config: Config, tmp_path: Path,
                                                                  stored: Path) -> None:
    result = perf.run_perf(context(config, "perf-fa2", tmp_path / "noisy"), noisy=True, stored_path=stored)
    assert result.status is Status.FAIL
    assert set(checks_of(result, "rel_std[speed_vs_fa2]")) == {Status.FAIL}
    assert set(checks_of(result, "speed_vs_fa2")) == {Status.NOT_RUN}
    assert set(checks_of(result, "slowdown_vs_stored")) == {Status.NOT_RUN}
    assert "rel_std[speed_vs_fa2]" in result.message


def test_clock_drift_alone_passes_although_every_absolute_spread_is_high(config: Config, tmp_path: Path,
                                                                         stored: Path) -> None:
    """The stand-in's clock steps +-10 %: every backend's absolute spread is far above 2 % (what the old gate
    judged and refused), the paired ratios' spread is ~0, and the report shows both."""
    result = perf.run_perf(context(config, "perf-fa2", tmp_path / "run"), stored_path=stored)
    assert result.status is Status.PASS
    rows = [r for w in result.details["workloads"] for r in w["rows"] if r["available"]]
    assert min(r["rel_std"] for r in rows) > 0.02
    assert max(r["ratio_rel_std"] for r in rows if r["ratio_rel_std"] is not None) < 0.001
    text = html(result)
    assert "Clocks not locked" in text and "SM clock over the rounds" in text and "not judged" in text


def test_no_stored_run_for_this_gpu_is_not_applicable_and_the_ratios_still_judge(
        config: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None]) -> None:
    result = perf.run_perf(context(config, "perf-fa2", tmp_path / "run"))  # repo_root has no gates/baselines
    assert set(checks_of(result, "slowdown_vs_stored")) == {Status.NOT_APPLICABLE}
    assert set(checks_of(result, "speed_vs_fa2")) == {Status.PASS} and result.status is Status.PASS
    assert all("no stored run for NVIDIA H100 80GB HBM3 (132 SMs)" in c.message for c in result.checks
               if c.metric == "slowdown_vs_stored")
    assert result.details["run_notice"].count("make prepare") == 1


def test_unreadable_stored_run_of_this_gpu_is_an_error_not_a_pass(
        config: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None]) -> None:
    ctx = context(config, "perf-fa2", tmp_path / "run")
    (ctx.repo_root / "gates/baselines").mkdir(parents=True, exist_ok=True)
    (ctx.repo_root / "gates/baselines/bench-h100.json").write_text("{cut short")
    result = perf.run_perf(ctx)
    assert result.status is Status.ERROR and set(checks_of(result, "slowdown_vs_stored")) == {Status.ERROR}
    assert "cannot be read" in html(result)


def test_gated_baseline_missing_is_an_error(config: Config, tmp_path: Path,
                                            gpu_stand_in: Callable[[Rate], None]) -> None:
    gpu_stand_in(lambda wl, b: None if b == "fa2" else rate()(wl, b))
    result = perf.run_perf(context(config, "perf-fa2", tmp_path / "run", regression=False))
    assert result.status is Status.ERROR
    assert set(checks_of(result, "speed_vs_fa2")) == {Status.ERROR}


def test_without_matplotlib_the_report_keeps_its_tables(config: Config, tmp_path: Path, stored: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_matplotlib(width: float, height: float) -> None:
        raise plots.PlotUnavailable("matplotlib cannot be imported (ModuleNotFoundError): tables only")

    monkeypatch.setattr(plots, "_figure", no_matplotlib)
    result = perf.run_perf(context(config, "perf-fa2", tmp_path / "run"), stored_path=stored)
    assert result.status is Status.PASS and result.details["plots"]["ratio_svg"] is None
    text = html(result)
    assert "<svg" not in text and "no chart (matplotlib cannot be imported" in text
    assert text.count('<table class="bench"') == 17


def test_unknown_backend_in_yaml_is_an_error(config: Config, tmp_path: Path,
                                             gpu_stand_in: Callable[[Rate], None]) -> None:
    result = perf.run_perf(context(config, "perf-fa2", tmp_path / "run", gated=("fa4",)))
    assert result.status is Status.ERROR and "phases.3.gates.perf-fa2.gated[0]" in result.message


def test_no_gpu_is_not_run(config: Config, tmp_path: Path) -> None:
    result = perf.PerfFa2Gate().run(context(config, "perf-fa2", tmp_path / "run"))
    assert result.status is Status.NOT_RUN


# ---- scaling ---------------------------------------------------------------------------------------------


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


@pytest.mark.parametrize(("case", "expected"), [
    ("perf-clean", {"perf-fa2": Status.PASS, "perf-fa2/spread": Status.PASS, "perf-fa2/regression": Status.PASS}),
    ("perf-slow", {"perf-fa2/regression": Status.FAIL}),
    ("perf-noisy", {"perf-fa2/spread": Status.FAIL}),
])
def test_selftest_perf_cases_behave_as_planted(config: Config, tmp_path: Path, gpu_stand_in: Callable[[Rate], None],
                                                case: str, expected: dict[str, Status]) -> None:
    from harness.selftest import CASES, judge

    c = next(c for c in CASES if c.name == case)
    statuses = c.run(config, tmp_path / case, True)
    assert {k: statuses[k] for k in expected} == expected
    control = c.run(config, tmp_path / f"{case}-control", False) if c.must_fail else None  # a clean re-run
    assert judge(c, statuses, control)[0]
    assert (tmp_path / ("perf-fa2-clean" if case == "perf-clean" else case) / "index.html").is_file()  # its report


def test_long_context_pairs_are_held_to_their_own_spread_limit(config: Config) -> None:
    """perf-fa2 holds the batch-1 long-context points to long_context_max_rel_std (4 %: 50-500 ms calls under the
    power cap, phases.yaml), every other workload to max_rel_std (2 %): the same 3 % spread passes on one, fails
    on the other; a burst of interference fails both."""
    p = next(g for ph in config.phases for g in ph.gates if g.name == "perf-fa2").params
    assert (p.max_rel_std, p.long_context_max_rel_std) == (0.02, 0.04)
    long_wl, prefill = config.workloads["long-64k-causal"], config.workloads["prefill-d128"]
    assert p.spread_limit(long_wl) == 0.04 and p.spread_limit(prefill) == 0.02
    assert dataclasses.replace(p, long_context_max_rel_std=0.0).spread_limit(long_wl) == 0.02  # 0: max_rel_std

    def spread_checks(wl: Workload, slow_groups: dict[int, float]) -> dict[str, Status]:
        rounds = 25  # 5 groups of 5; FlashCore slower by the given factor in the rounds of some groups
        calls = {(wl, "flashcore"): 50.0, (wl, "fa2"): 115.0}
        got = paired_rounds(calls, rounds, jitter_amount=0.0,
                            burst=lambda r, key: slow_groups.get(r // 5, 1.0) if key[1] == "flashcore" else 1.0)
        ms = {b: got[(wl.name, b)] for b in ("flashcore", "fa2")}
        checks = perf.perf_checks(wl, ms, dataclasses.replace(p, regression=False), None, None, {},
                                  load_bench_settings(config).judged)
        return {c.metric: c.status for c in checks}

    three_pct = {0: 1.035, 2: 0.965}  # group medians 1.035, 1, 0.965, 1, 1: a 2.5 % spread
    assert spread_checks(long_wl, three_pct) == {"rel_std[speed_vs_fa2]": Status.PASS, "speed_vs_fa2": Status.PASS}
    assert spread_checks(prefill, three_pct)["rel_std[speed_vs_fa2]"] is Status.FAIL
    burst = {3: 1.4, 4: 1.4}  # a neighbour's job in the second half of the rounds
    assert spread_checks(long_wl, burst) == {"rel_std[speed_vs_fa2]": Status.FAIL, "speed_vs_fa2": Status.NOT_RUN}


@pytest.fixture
def fp8_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.bench import ceiling

    monkeypatch.setattr(ceiling, "measure", lambda kind, n, reps=20, device="cuda": ceiling.Ceiling(
        kind, n, 1250.0, f"stand-in {kind} {n}^3"))


def test_planted_slow_fp8_kernel_turns_perf_fp8_red(config: Config, tmp_path: Path, fp8_ceiling: None,
                                                    gpu_stand_in: Callable[[Rate], None]) -> None:
    gpu_stand_in(fa3_rate(1.0))  # at FA3's FP8 speed: passes clean; the planted 1.3x slower path must fail
    clean = perf.run_perf(context(config, "perf-fp8", tmp_path / "clean"))
    assert clean.status is Status.PASS, clean.message
    assert {w["name"] for w in clean.details["workloads"]} == set(config.sets["fp8-bench"])
    assert all(config.workloads[n].dtype == "e4m3" for n in config.sets["fp8-bench"])
    result = perf.run_perf(context(config, "perf-fp8", tmp_path / "slow", fault=SLOW_FAULT))
    assert result.status is Status.FAIL
    assert set(checks_of(result, "speed_vs_fa3")) == {Status.FAIL}  # 0.77x < min_ratio 0.80
    assert checks_of(result, "geomean_speed_vs_fa3") == [Status.FAIL]


def test_perf_fp8_shows_each_workload_against_the_measured_matmul_ceiling(
        config: Config, tmp_path: Path, fp8_ceiling: None, gpu_stand_in: Callable[[Rate], None]) -> None:
    gpu_stand_in(fa3_rate(1.0))
    result = perf.run_perf(context(config, "perf-fp8", tmp_path / "run"))
    c = result.details["ceiling"]
    assert (c["kind"], c["tflops"]) == ("fp8-matmul", 1250.0)
    assert c["fraction"]["fp8-s8k-d128"] == pytest.approx(ANCHORS["fa3"] / 1250.0, rel=0.02)
    text = html(result)
    assert "stand-in fp8-matmul 8192^3 measured in this run at 1250.0 TFLOPS" in text
    assert "fp8-s8k-d128 0.50" in text


def test_a_ceiling_that_cannot_run_is_shown_and_leaves_the_verdicts(
        config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu_stand_in: Callable[[Rate], None]) -> None:
    from harness.bench import ceiling

    def broken(kind: str, n: int, reps: int = 20, device: str = "cuda") -> ceiling.Ceiling:
        raise RuntimeError("no _scaled_mm on this torch")

    monkeypatch.setattr(ceiling, "measure", broken)
    gpu_stand_in(fa3_rate(1.0))
    result = perf.run_perf(context(config, "perf-fp8", tmp_path / "run"))
    assert result.status is Status.PASS
    assert result.details["ceiling"]["tflops"] is None
    assert "not measured" in html(result) and "no _scaled_mm on this torch" in html(result)


def test_perf_fa3_and_serving_reports_show_their_tables(config: Config, tmp_path: Path,
                                                        gpu_stand_in: Callable[[Rate], None]) -> None:
    gpu_stand_in(fa3_rate(1.0))
    for gate in ("perf-fa3", "perf-serving"):
        text = html(perf.run_perf(context(config, gate, tmp_path / gate)))
        assert "Every repetition's time, round and SM clock" in text, gate  # the section with its tables
        assert "judged per workload: FlashCore speed" in text, gate
