"""Sequential rounds (harness/bench/extend.py, timing.py, runner.py) on the CPU: base rounds for every workload,
extension rounds for the workloads whose judged ratios spread too much, up to the cap; against the SIMULATED GPU of
tests/bench_sim.py (its clock held still here, so only the planted noise moves a ratio). Nothing here ran on a GPU."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest
from bench_sim import SimulatedGpu, simulate, simulated_backends
from conftest import workload

from harness.bench import extend, paired, report, runner, selection, timing
from harness.bench.record import Measurement
from harness.bench.settings import JudgedParams, TimingParams, load_bench_settings
from harness.config import load_config
from harness.gates.perf import measurement_line
from harness.results import Status
from harness.support import perf_verdict as pv

T = TimingParams(warmup=2, warmup_ms=5.0, min_reps=20, spread_groups=5, max_reps=50, target_ms=100.0, flush_mib=0,
                 head_start_ms=1.0, clock_probe_us=50.0,
                 clock_probe_after_ms=0.0, record_kernels=False, mirrored=False, extend_above=0.6,
                 extend_target_ms=200.0, extend_min_reps=40, extend_max_reps=150)
JUDGED = JudgedParams(min_rounds=20, min_spread_groups=5, stored_min_rounds=20, stored_min_spread_groups=5)
# a: 2 and 3 ms calls; b: ~1 and ~1.5 ms (bench_sim's speeds x (1 + S / 8192))
A, B = workload("a", sq=8192, sk=8192), workload("b", sq=8, sk=8)
SPEEDS = {"flashcore": 1.0, "fa2": 1.5}
EST = [2.0, 3.0, 1.0 * (1 + 8 / 8192), 1.5 * (1 + 8 / 8192)]
BASE = T.rounds_for(EST)  # 43: every workload's base rounds
CAP_B = T.cap_rounds_for(EST[2:])  # 140: b's calls alone at the cap
WATCHES = (extend.Watch(("a", "flashcore"), ("a", "fa2"), 0.02), extend.Watch(("b", "flashcore"), ("b", "fa2"), 0.02))


class PlantedNoise:
    """timing.Noise's stand-in: adds `share` of b's FlashCore call to it in the rounds `when` picks (a neighbour's
    burst on the simulated timeline); records the rounds and base sizes it was shown."""

    def __init__(self, gpu: SimulatedGpu, share: float, when: str) -> None:
        self.gpu, self.share, self.when = gpu, share, when
        self.seen: list[tuple[int, int]] = []

    def __call__(self, r: int, rounds: int, key: tuple[str, str], estimate_ms: float) -> None:
        self.seen.append((r, rounds))
        hit = r < 9 if self.when == "first group" else r >= rounds // 2
        if key == ("b", "flashcore") and hit:
            self.gpu.extra_ms = self.share * estimate_ms


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> SimulatedGpu:
    sim = simulate(monkeypatch)
    sim.step_ms = 1e12  # a still clock: the paired ratios move only with the planted noise
    simulated_backends(monkeypatch, sim, SPEEDS)
    return sim


def measure(gpu: SimulatedGpu, monkeypatch: pytest.MonkeyPatch, noise: PlantedNoise | None = None,
            watches: tuple[extend.Watch, ...] | None = WATCHES) -> dict[tuple[str, str], Measurement]:
    if noise is not None:
        monkeypatch.setattr(timing, "Noise", lambda device: noise)
    opts = runner.Options(T, base_seed=1, noisy=noise is not None, device="cpu", watches=watches)
    return runner.Measurer(opts).measure_group([A, B], ["flashcore", "fa2"])


def spread(got: dict[tuple[str, str], Measurement], wl: str, below: int | None = None) -> float:
    ours, base = got[(wl, "flashcore")], got[(wl, "fa2")]
    if below is not None:  # the ratio as the base rounds alone gave it
        keep = [i for i, r in enumerate(ours.rounds) if r < below]
        ours = dataclasses.replace(ours, times_ms=tuple(ours.times_ms[i] for i in keep),
                                   rounds=tuple(ours.rounds[i] for i in keep),
                                   clock_mhz=tuple(ours.clock_mhz[i] for i in keep))
    r = paired.speed_ratio(ours, base)
    assert r is not None
    return r.rel_std


def test_base_rounds_only_when_every_judged_ratio_is_tight(gpu: SimulatedGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    got = measure(gpu, monkeypatch)
    assert BASE == 43 and all(m.rounds == tuple(range(BASE)) and m.base_rounds == BASE for m in got.values())
    assert not any(m.extended for m in got.values())
    assert spread(got, "a") < 0.001 and spread(got, "b") < 0.001
    warm = T.warmup_rounds(EST)
    assert Counter(gpu.calls)["b/flashcore"] == T.warmup + warm + BASE  # no second set of rounds
    table = report.workload_table(B, [got[("b", "flashcore")], got[("b", "fa2")]])
    assert (table["rounds"], table["base_rounds"], table["extended"]) == (BASE, BASE, False)


def test_one_noisy_ratio_extends_only_its_workload(gpu: SimulatedGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    # b's FlashCore 4 % slower in the first 9 rounds: over 43 rounds its group medians spread ~1.6 % (> 0.6 x 2 %)
    got = measure(gpu, monkeypatch, PlantedNoise(gpu, 0.04, "first group"))
    a_fc, b_fc, b_fa2 = got[("a", "flashcore")], got[("b", "flashcore")], got[("b", "fa2")]
    assert spread(got, "b", below=BASE) > T.extend_above * 0.02
    assert a_fc.rounds == got[("a", "fa2")].rounds == tuple(range(BASE)) and not a_fc.extended
    assert b_fc.rounds == b_fa2.rounds == tuple(range(CAP_B)) and b_fc.extended and b_fa2.extended
    assert CAP_B == 140 and spread(got, "b") < 0.005  # judged over all its rounds: the first 9 are outvoted
    table = report.workload_table(B, [b_fc, b_fa2])
    assert (table["rounds"], table["base_rounds"], table["extended"]) == (CAP_B, BASE, True)
    assert pv.verdict_ratio_spread("b", b_fc, b_fa2, 0.02, JUDGED).status is Status.PASS
    assert f"over {CAP_B} rounds ({BASE} base, the rest extension rounds) of a+b" in measurement_line(b_fc)
    assert f"over {BASE} rounds of a+b" in measurement_line(a_fc)  # the gate's log says which got more


def test_extension_rounds_keep_the_interleaving_rule(gpu: SimulatedGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    got = measure(gpu, monkeypatch, PlantedNoise(gpu, 0.04, "first group"))
    per_round = Counter((r, m.backend) for m in got.values() for r in m.rounds if r >= BASE)
    assert set(per_round.values()) == {1} and len(per_round) == 2 * (CAP_B - BASE)  # one call of each, per round
    assert {m.workload for m in got.values() if any(r >= BASE for r in m.rounds)} == {"b"}
    tail = gpu.calls[-2 * (CAP_B - BASE):]  # the extension's timed rounds, in queue order
    for i, r in enumerate(range(BASE, CAP_B)):  # the starting backend rotates on with the round number
        first = ["b/flashcore", "b/fa2"][r % 2]
        assert tail[2 * i] == first and set(tail[2 * i:2 * i + 2]) == {"b/flashcore", "b/fa2"}


def test_a_ratio_noisy_past_the_cap_still_fails_its_gate(gpu: SimulatedGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    noise = PlantedNoise(gpu, 0.3, "second half")  # like timing.Noise: from the base's middle on, extension too
    got = measure(gpu, monkeypatch, noise)
    b_fc, b_fa2 = got[("b", "flashcore")], got[("b", "fa2")]
    assert b_fc.extended and b_fc.rounds == tuple(range(CAP_B))
    assert {n for r, n in noise.seen} == {BASE} and max(r for r, _ in noise.seen) == CAP_B - 1
    check = pv.verdict_ratio_spread("b", b_fc, b_fa2, 0.02, JUDGED)
    assert check.status is Status.FAIL and check.measured is not None and check.measured > 0.1
    assert pv.verdict_ratio("b", b_fc, b_fa2, 1.0, 0.02, JUDGED).status is not Status.PASS  # no speed verdict
    control = pv.verdict_ratio_spread("a", got[("a", "flashcore")], got[("a", "fa2")], 0.02, JUDGED)
    assert control.status is Status.PASS and not got[("a", "flashcore")].extended


def test_without_named_checks_every_workload_gets_the_cap(gpu: SimulatedGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    got = measure(gpu, monkeypatch, watches=None)  # make bench, make tune, a stored run
    cap = T.cap_rounds_for(EST)
    assert cap > BASE and all(m.rounds == tuple(range(cap)) and not m.extended for m in got.values())


def test_a_cross_workload_ratio_extends_both_workloads(gpu: SimulatedGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    # the scaling gate's kind: FlashCore against itself at two lengths, per clock cycle
    watch = extend.Watch(("b", "flashcore"), ("a", "flashcore"), 0.02, per_clock=True)
    got = measure(gpu, monkeypatch, PlantedNoise(gpu, 0.04, "first group"), watches=(watch,))
    cap_a = T.cap_rounds_for(EST[:2])  # each workload up to its own cap, never the other's
    assert BASE < cap_a < CAP_B == T.cap_rounds_for(EST[2:]) and T.cap_rounds_for(EST) not in (cap_a, CAP_B)
    assert all(m.extended for m in got.values())
    assert got[("a", "flashcore")].rounds == got[("a", "fa2")].rounds == tuple(range(cap_a))
    assert got[("b", "flashcore")].rounds == got[("b", "fa2")].rounds == tuple(range(CAP_B))
    # the cross-workload ratio pairs the rounds both ran in: all of a's
    ratio = paired.ratio(got[("b", "flashcore")], got[("a", "flashcore")], per_clock=True)
    assert ratio is not None and len(paired.pairs(got[("b", "flashcore")], got[("a", "flashcore")]) or []) == cap_a


def test_a_long_round_never_caps_a_short_workload(gpu: SimulatedGpu, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two noisy workloads extended together: the short one reaches the rounds its calls alone give (CAP_B), not
    the fewer the long one's rounds would give both (the 128K sweep point once held 16K to 46 rounds)."""
    noise = PlantedNoise(gpu, 0.04, "first group")
    both = (*WATCHES, extend.Watch(("a", "flashcore"), ("b", "flashcore"), 0.0001, per_clock=True))
    got = measure(gpu, monkeypatch, noise, watches=both)
    assert got[("b", "fa2")].rounds == tuple(range(CAP_B)) and got[("a", "fa2")].rounds == tuple(
        range(T.cap_rounds_for(EST[:2])))


# ---- the decision, pure ------------------------------------------------------------------------------------------


def _paired(wl: str, backend: str, times: list[float]) -> Measurement:
    return Measurement(wl, backend, workload(wl), available=True, times_ms=tuple(times), spread_groups=5,
                       rounds=tuple(range(len(times))), pairing="p", base_rounds=len(times))


def test_the_decision_reads_each_watch_against_its_own_limit() -> None:
    steady, stepped = [1.0] * 40, [1.0] * 20 + [1.03] * 20  # a 3 % step: group medians spread ~1.6 %
    ms = {("a", "flashcore"): _paired("a", "flashcore", steady), ("a", "fa2"): _paired("a", "fa2", stepped),
          ("b", "flashcore"): _paired("b", "flashcore", steady), ("b", "fa2"): _paired("b", "fa2", stepped)}
    tight = extend.Watch(("a", "flashcore"), ("a", "fa2"), 0.02)
    loose = extend.Watch(("b", "flashcore"), ("b", "fa2"), 0.04)  # a long-context limit: 1.6 % is below 0.6 x 4 %
    assert extend.noisy(ms, [tight, loose], 0.6) == {"a"}
    gone = {**ms, ("a", "fa2"): Measurement("a", "fa2", workload("a"), available=False, why="crashed")}
    assert extend.noisy(gone, [tight], 0.6) == set()  # unreadable: no extension; the gate says why
    stricter = dataclasses.replace(loose, limit=0.02)  # the same ratio judged by a second gate at 2 %
    assert extend.strictest([loose, stricter]) == (stricter,)
    assert Measurement.from_dict(ms[("a", "fa2")].to_dict()).base_rounds == 40


def test_repository_watches_cover_every_judged_ratio() -> None:
    config = load_config(Path(__file__).resolve().parents[1] / "gates")
    settings = load_bench_settings(config)
    limits = {(w.num, w.den, w.per_clock): w.limit for w in selection.watches(config, settings)}
    assert limits[(("prefill-d128", "flashcore"), ("prefill-d128", "fa2"), False)] == 0.02
    assert limits[(("long-128k", "flashcore"), ("long-128k", "fa2"), False)] == 0.04  # long-context limit
    assert limits[(("prefill-d128", "flashcore"), ("prefill-d128", "cudnn"), False)] == 0.02  # perf-cudnn's
    assert limits[(("fp8-s8k-d64", "flashcore"), ("fp8-s8k-d64", "fa3"), False)] == 0.02  # perf-fp8's
    assert limits[(("check-d128", "flashcore"), ("check-d128", "flashcore-default"), False)] == 0.02  # autotune-gain
    assert limits[(("long-128k", "flashcore"), ("sweep-s4096", "flashcore"), True)] == 0.04  # scaling, per cycle
    assert (("decode", "flashcore"), ("decode", "fa2"), False) not in limits  # shown, judged by no check
    assert (("long-128k", "flashcore"), ("long-128k", "cudnn"), False) not in limits  # not timed in a gate run


def test_replay_of_a_fixed_budget_run_counts_extensions_and_failures() -> None:
    from harness.bench.record import Run
    from harness.bench.replay import replay

    quiet = [1.0] * 50
    late = [1.0] * 20 + [1.06] * 5 + [1.0] * 25  # a 6 % burst in rounds 20-24: the base's last group, 1 of 5 later
    loud = [1.0] * 15 + [1.1] * 35  # 10 % slower from round 15 on: noisy however many rounds
    ms = [_paired(w, b, t) for w, b, t in (("a", "flashcore", quiet), ("a", "fa2", late), ("b", "flashcore", quiet),
                                            ("b", "fa2", quiet), ("c", "flashcore", quiet), ("c", "fa2", loud))]
    ms = [dataclasses.replace(m, pairing=m.workload) for m in ms]
    run = Run("synthetic", {}, {(m.workload, m.backend): m for m in ms})
    watches = [extend.Watch((w, "flashcore"), (w, "fa2"), 0.02) for w in "abc"]
    row = replay(run, watches, 0.5, 0.6, 20)
    assert (row.ratios, row.extended, row.workloads) == (3, 2, ("a", "c"))
    assert (row.fail_all, row.fail_base, row.fail_rule) == (1, 2, 1)  # c fails as before; a is saved by its rounds
    # GPU time: rounds x the medians (c's FA2 call 1.1 ms): the base is half; a's and c's last 25 rounds extend
    assert row.base_s == pytest.approx(row.all_s / 2) and row.extension_s == pytest.approx(25 * 4.1 / 1000)


def test_the_report_says_which_workloads_got_extension_rounds() -> None:
    from harness.render import render_html
    from harness.render.stored import read_run as read_results

    run = read_results(Path(__file__).resolve().parents[1] / "reports/evidence/perf-gates-h200-bd6a76f.json.xz")
    gate = run.gates[0]  # perf-fa2, timed before sequential rounds: no extension keys, rendered as then
    assert "then extended" not in render_html(run) and "warm-up calls each (then at least" in render_html(run)
    details = dict(gate.details)
    t = {**details["timing"], "warmup_ms": 100.0, "min_reps": 20, "max_reps": 50, "target_ms": 500.0,
         "extend_above": 0.6, "extend_target_ms": 1000.0, "extend_min_reps": 40, "extend_max_reps": 150}
    first = {**details["workloads"][0], "rounds": 150, "base_rounds": 22, "extended": True}
    details.update(timing=t, workloads=[first, *details["workloads"][1:]])
    html = render_html(dataclasses.replace(run, gates=(dataclasses.replace(gate, details=details), *run.gates[1:])))
    assert "150 rounds (22 base, then extended: a judged ratio spread too much)" in html
    assert "then 100.0 ms of untimed rounds" in html and "spreads above 0.6 × its limit" in html
