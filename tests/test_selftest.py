"""The selftest's judgement: a case holds only when its fault turns its gate red AND its clean control stays green
(an always-red gate fails its self-test); every gate declares a planted fault; gates/selftest.yaml's trims, shares
and names; plants made in the gate worker, where the gate runs."""

from __future__ import annotations

import dataclasses
import io
import os
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import pytest
from conftest import REPO, make_context, workload
from test_api_gate import TABLE, cpu_cases, stand_in

from flashcore import validate
from harness.config import load_config
from harness.engine import run_phase
from harness.gates import api as api_gate
from harness.gates import registry
from harness.gates.base import Gate, GateContext, SelfTest
from harness.planted_checks import check_disabled, planted
from harness.results import Check, GateResult, Status
from harness.schema import Config, ConfigError, GateSpec, PhaseSpec
from harness.selftest import (
    PLANTS,
    Case,
    check_settings,
    declared_cases,
    expected_s,
    judge,
    plan,
    run_case,
    runner_for,
    select,
    share_of,
)
from harness.selftest_settings import load_selftest_settings
from harness.support.api_cases import load_cases
from harness.watchdog import WatchdogSettings

SETTINGS = load_selftest_settings(REPO / "gates")
CASES = declared_cases(SETTINGS)


def _case(must_fail: str | None, statuses: dict[str, Status] | None = None,
          control: dict[str, Status] | None = None) -> Case:
    def run(config: Config, out: Path, planted: bool) -> dict[str, Status]:
        return dict((statuses if planted else control) or {})

    return Case("c", "g", run, must_fail, "")


def test_a_case_holds_only_when_the_fault_is_red_and_the_control_green() -> None:
    assert judge(_case("correctness"), {"correctness": Status.FAIL}, {"correctness": Status.PASS})[0]
    ok, why = judge(_case("correctness"), {"correctness": Status.PASS}, {"correctness": Status.PASS})
    assert not ok and "expected fail" in why
    assert not judge(_case("correctness"), {"correctness": Status.ERROR}, {"correctness": Status.PASS})[0]
    assert not judge(_case("determinism"), {"correctness": Status.FAIL}, {"correctness": Status.PASS})[0]


def test_an_always_red_gate_fails_its_selftest() -> None:
    ok, why = judge(_case("correctness"), {"correctness": Status.FAIL}, {"correctness": Status.FAIL})
    assert not ok and "control fail (expected pass)" in why
    assert not judge(_case("correctness"), {"correctness": Status.FAIL}, None)[0]  # no control: no pass


def test_a_clean_case_needs_every_gate_to_pass() -> None:
    assert judge(_case(None), {"build": Status.PASS, "correctness": Status.PASS}, None)[0]
    assert not judge(_case(None), {"build": Status.PASS, "determinism": Status.NOT_RUN}, None)[0]
    assert not judge(_case(None), {}, None)[0]


def test_run_case_runs_the_control_beside_the_fault(tmp_path: Path) -> None:
    case = _case("g", {"g": Status.FAIL}, {"g": Status.PASS})
    row = run_case(case, load_config(REPO / "gates"), tmp_path)
    assert row.ok and row.text == "g: fault fail (red), control pass (green)" and row.control_s >= 0
    always_red = _case("g", {"g": Status.FAIL}, {"g": Status.FAIL})
    assert not run_case(always_red, load_config(REPO / "gates"), tmp_path / "2").ok


# ---- declarations ---------------------------------------------------------------------------------------------


def test_every_registered_gate_declares_its_planted_faults_or_where_they_are_planted() -> None:
    """A gate joins the selftest in its own module (harness/gates/base.py SelfTest) or in gates/selftest.yaml; one
    without a planted GPU case says where its fault is planted (on the CPU). Declared on the class itself: a
    subclass inherits nothing."""
    in_yaml = {gate for gate, _ in SETTINGS.cases}
    for name in registry.names():
        gate = registry.get(name)
        assert gate is not None
        own = gate.__dict__
        assert own.get("selftests") or own.get("selftest_none") or name in in_yaml, name


def test_declared_cases_and_their_plants() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    assert {"tail-mask", "skip-row", "nondeterministic", "spill", "slow-loads", "strict-flag-ignored",
            "api-no-layout-check", "perf-slow", "perf-noisy", "memcheck-oob", "hang"} <= set(names)
    for name in registry.names():
        gate = registry.get(name)
        assert gate is not None and all(t.plant in PLANTS for t in gate.selftests), name
    with pytest.raises(ValueError, match="unknown plant 'laser'"):
        runner_for("build", SelfTest("x", "laser"), SETTINGS)
    with pytest.raises(ValueError, match="no timed plant 'laser'"):
        runner_for("perf-fa2", SelfTest("x", "perf", "laser"), SETTINGS)
    by_name = {c.name: c for c in CASES}
    assert by_name["perf-clean"].must_fail is None and by_name["perf-slow"].must_fail == "perf-fa2/regression"
    assert by_name["long-skip-row"].must_fail == "correctness-long" and by_name["memcheck-clean"].must_fail is None
    assert by_name["hang"].must_fail == "correctness/watchdog"
    assert by_name["tail-mask"].control == by_name["skip-row"].control  # one control run for both
    assert by_name["perf-slow"].serial and not by_name["tail-mask"].serial
    timed = [c for c in CASES if c.gate.startswith("perf-") or c.gate in ("autotune-gain", "scaling")]
    assert all(c.serial for c in timed) and by_name["slow-loads"].serial  # timed or profiled: alone
    perf_fa2 = "timed:perf-fa2:prefill-d128,prefill-d64,prefill-d256"
    assert by_name["perf-slow"].control == by_name["perf-noisy"].control == perf_fa2


def test_the_repository_selftest_file_names_real_cases_and_workloads() -> None:
    config = load_config(REPO / "gates")
    check_settings(SETTINGS, CASES, config)
    assert SETTINGS.trim["tail-mask"] == ("s1", "odd-grid") and SETTINGS.parallel >= 2


@pytest.mark.parametrize("edit, key", [
    (lambda s: s.replace("tail-mask: [s1, odd-grid]", "tail-maks: [s1]"), "trim.tail-maks"),
    (lambda s: s.replace("tail-mask: [s1, odd-grid]", "tail-mask: [s1, no-such]"), "trim.tail-mask"),
    (lambda s: s.replace("serial: [ncu-dram,", "serial: [perf-fa9,"), "serial"),
    (lambda s: s.replace("parallel: 4", "parallel: 0"), "parallel"),
    (lambda s: s.replace("limit_s: 60", "limit_s: -1"), "limit_s"),
    (lambda s: s.replace("[spill, tail-mask,", "[tail-mask,"), "shares"),  # a case in no share
    (lambda s: s.replace("[spill, tail-mask,", "[spill, scaling-collapse, tail-mask,"), "shares"),  # in two
    (lambda s: s.replace("[spill, tail-mask,", "[spill, no-such-case, tail-mask,"), "shares"),
    (lambda s: s.replace("share_limit_s: 450", "share_limit_s: 100"), "shares[0]"),  # expected over the limit
    (lambda s: s.replace("  spill: 240", "  spil: 240"), "estimates_s"),
    (lambda s: s.replace("    min_reps: 40", "    min_repz: 40"), "bench.timing.min_repz"),
    (lambda s: s.replace("    min_reps: 40", "    min_reps: 10"), "bench.judged.min_rounds"),  # below the minimum
    (lambda s: s.replace("  sweep:\n", "  suite:\n"), "bench.suite"),
])  # fmt: skip
def test_a_bad_selftest_file_names_the_key(gates_dir: Path, edit: object, key: str) -> None:
    path = gates_dir / "selftest.yaml"
    path.write_text(edit(path.read_text()))  # type: ignore[operator]
    with pytest.raises(ConfigError) as e:
        settings = load_selftest_settings(gates_dir)
        check_settings(settings, declared_cases(settings), load_config(gates_dir))
    assert e.value.key == key


# ---- selection and shares ---------------------------------------------------------------------------------------


def test_cases_can_be_chosen_by_name() -> None:
    assert [c.name for c in select(CASES, "api-no-layout-check, hang")] == ["api-no-layout-check", "hang"]
    assert len(select(CASES, None)) == len(CASES)
    with pytest.raises(SystemExit, match="unknown case"):
        select(CASES, "hang,nope")


def test_the_named_shares_run_every_case_exactly_once_and_each_fits_its_call() -> None:
    n = len(SETTINGS.shares)
    shares = [share_of(list(CASES), f"{i}/{n}", SETTINGS.shares) for i in range(1, n + 1)]
    names = [c.name for s in shares for c in s]
    assert sorted(names) == sorted(c.name for c in CASES) and len(names) == len(set(names))
    for share in shares:
        assert expected_s(share, SETTINGS) <= SETTINGS.share_limit_s <= 600, [c.name for c in share]
    assert n >= 2  # the whole self-test is expected over one 10-minute call
    assert expected_s(list(CASES), SETTINGS) > SETTINGS.share_limit_s


def test_every_gate_of_phases_yaml_has_a_case_that_must_turn_it_red() -> None:
    gates = {g.name for p in load_config(REPO / "gates").phases for g in p.gates}
    red = {c.gate for c in CASES if c.must_fail is not None}
    assert gates - red == set()
    assert all(c.must_fail.split("/")[0] == c.gate for c in CASES if c.must_fail), "a case turns its own gate red"


def test_a_share_prints_its_cases_and_expected_time() -> None:
    chosen = share_of(list(CASES), "2/2", SETTINGS.shares)
    text = plan(chosen, "2/2", SETTINGS)
    assert text.startswith(f"selftest share 2/2: {len(chosen)} cases of ") and "then alone: " in text
    assert all(c.name in text for c in chosen) and f"~{expected_s(chosen, SETTINGS):.0f} s" in text


@pytest.mark.parametrize("share", ["0/2", "3/2", "1-2", "a/b", "1/3"])
def test_a_bad_share_is_refused(share: str) -> None:
    with pytest.raises(SystemExit, match="--share"):
        share_of(list(CASES), share, SETTINGS.shares)


# ---- plants made in the gate worker ---------------------------------------------------------------------------


@dataclass(frozen=True)
class NoParams:
    pass


class LayoutCheckGate(Gate):
    """PASS when flashcore.validate.layout is the real check where the gate runs, FAIL when it is the no-op."""

    Params = NoParams
    needs_gpu = True  # the engine watches GPU gates only (the test tells it a GPU is there)

    def run(self, ctx: GateContext) -> GateResult:
        from flashcore import validate as v

        real = v.layout.__name__ == "layout"
        return ctx.result([Check("layout", "real_check", None, None, Status.PASS if real else Status.FAIL, "==",
                                 message=f"pid {os.getpid()}")])


def test_a_flashcore_plant_is_made_in_the_worker_where_the_gate_runs(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._REGISTRY, "fake-layout", LayoutCheckGate)
    monkeypatch.setattr("harness.engine.cuda_unavailable_reason", lambda: None)
    config = Config(REPO / "gates", MappingProxyType({"w": workload("w")}), MappingProxyType({}),
                    (PhaseSpec(1, "p1", (GateSpec("fake-layout", 1, NoParams()),)),))
    limits = WatchdogSettings(1.0, 60.0, 120.0, {"fake-layout": 1.0})

    def run(plant: str) -> GateResult:
        return run_phase(config, 1, run_id="t", run_dir=tmp_path / (plant or "clean"), environment={},
                         repo_root=tmp_path, seed=0, stream=io.StringIO(), live=False, limits=limits,
                         plant=plant).gates[0]

    planted_run, clean = run("validate-off:layout"), run("")
    assert planted_run.status is Status.FAIL and clean.status is Status.PASS
    assert planted_run.checks[0].message != f"pid {os.getpid()}"  # it ran in the worker
    assert validate.layout.__name__ == "layout"  # and this process was never touched


def test_an_unknown_plant_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown plant"):
        planted("laser:beam")
    with pytest.raises(ValueError, match="unknown plant"):
        planted("validate-off")


def test_check_disabled_plants_a_no_op_and_always_restores_the_check() -> None:
    real = validate.layout
    with check_disabled("layout"):
        assert validate.layout is not real and validate.layout("q", object()) is None
    assert validate.layout is real
    with pytest.raises(RuntimeError), check_disabled("layout"):
        raise RuntimeError("a gate crashed")
    assert validate.layout is real
    with pytest.raises(ValueError, match="no such function"), check_disabled("no_such_check"):
        pass


def test_the_api_gate_is_red_with_the_layout_check_off_and_green_with_it(tmp_path: Path) -> None:
    """The api case's two runs, with the api gate's loop on CPU tensors (test_api_gate's stand-in: the real host
    checks, then SDPA): planted, the gate must FAIL (not ERROR); the control, the same loop, PASS."""
    full = cpu_cases(load_cases(TABLE))
    table = dataclasses.replace(full, cases=tuple(c for c in full.cases if c.kind == "reject" or c.name == "s1"))
    judge_p = api_gate.judge_params(load_config(REPO / "gates").gates_through(7), "correctness")
    assert judge_p is not None

    def gate(run_dir: Path) -> GateResult:
        fc, fake_api = stand_in()
        return api_gate.check_cases(make_context(run_dir, "api", None), fc, fake_api, table, judge_p, devices=1,
                                    device="cpu")

    with planted("validate-off:layout"):
        red = gate(tmp_path / "planted")
    green = gate(tmp_path / "clean")
    checks = {c.workload: c for c in red.checks}
    assert red.status is Status.FAIL and checks["q-misaligned"].status is Status.FAIL
    assert "accepted: no error" in checks["q-misaligned"].message
    assert Status.ERROR not in {c.status for c in red.checks}
    assert green.status is Status.PASS
    case = next(c for c in CASES if c.name == "api-no-layout-check")
    assert judge(case, {"api": red.status}, {"api": green.status})[0]


# ---- CPU-planted cases: crafted input to the gate's real verdict ------------------------------------------------


@pytest.mark.parametrize("name", [t.name for _, t in SETTINGS.cases if t.plant == "cpu"])
def test_each_cpu_planted_case_is_red_beside_a_green_control(name: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the project's suppressions file
    case = next(c for c in CASES if c.name == name)
    row = run_case(case, load_config(REPO / "gates"), tmp_path)
    assert row.ok, row.text


def test_the_cpu_cases_cover_the_gates_the_gpu_cannot_plant() -> None:
    cpu = {gate for gate, t in SETTINGS.cases if t.plant == "cpu"}
    assert cpu == {"ncu-sm", "ncu-sm-pipeline", "ncu-stalls", "sanitizer-all", "autotune-table", "structure-tma",
                   "structure-wgmma", "determinism-gpus"}
    assert len([c for c in CASES if c.gate in cpu]) >= len(cpu)


def test_an_unmeasured_stall_table_is_the_stall_gates_red(tmp_path: Path) -> None:
    """ncu-stalls sets no threshold: its red is the ERROR of a profile whose stall reasons are all n/a."""
    from harness.ncu.parse import parse_csv
    from harness.planted_cpu import RUNNERS
    from harness.selftest_runs import spec_of

    config = load_config(REPO / "gates")
    assert RUNNERS["ncu-stalls"](config, tmp_path / "planted", True) == {"ncu-stalls/unmeasured": Status.FAIL}
    assert RUNNERS["ncu-stalls"](config, tmp_path / "clean", False) == {"ncu-stalls/unmeasured": Status.PASS}
    launches = parse_csv((tmp_path / "planted" / "ncu-stalls.csv").read_text()).launches
    assert len(launches) == spec_of(config, "ncu-stalls").params.launch_count  # as many as the gate profiles
    for launch in launches:
        stalls = {k: v for k, v in launch.metrics.items() if "warps_issue_stalled" in k}
        assert stalls and set(stalls.values()) == {None}


def test_a_crafted_profile_keeps_the_csv_readable() -> None:
    from harness.ncu.parse import parse_csv
    from harness.planted_cpu import FIXTURES, with_metric

    metric = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
    csv = parse_csv(with_metric((FIXTURES / "ncu" / "ours-prefill.csv").read_text(), metric, 12.5, 3))
    assert len(csv.launches) == 3 and {k.metrics.get(metric) for k in csv.launches} == {12.5}


def _spread_case(runs: list[dict[str, Status]], must_fail: str | None = "perf-fa2") -> tuple[object, list[bool]]:
    """A stand-in perf case: the fault run is red; the clean runs answer `runs` in turn. `planted` records every
    run's kind."""
    from harness.selftest import Case

    seen: list[bool] = []
    red = {"perf-fa2": Status.FAIL, "perf-fa2/spread": Status.FAIL, "perf-fa2/regression": Status.NOT_RUN}

    def run(config: Config, path: Path, plant: bool) -> dict[str, Status]:
        seen.append(plant)
        return dict(red) if plant and must_fail is not None else runs.pop(0)

    return Case("perf-noisy-stand-in", "perf-fa2", run, must_fail, "stand-in", control="stand-in"), seen


NOISE = {"perf-fa2": Status.FAIL, "perf-fa2/spread": Status.FAIL, "perf-fa2/regression": Status.NOT_RUN}
GREEN = {"perf-fa2": Status.PASS, "perf-fa2/spread": Status.PASS, "perf-fa2/regression": Status.PASS}
SLOW = {"perf-fa2": Status.FAIL, "perf-fa2/spread": Status.PASS, "perf-fa2/regression": Status.FAIL}


def test_a_control_red_by_its_spread_alone_is_measured_once_more(tmp_path: Path) -> None:
    from harness.selftest import run_case

    case, seen = _spread_case([dict(NOISE), dict(GREEN)])
    row = run_case(case, None, tmp_path / "a", reruns=1)  # type: ignore[arg-type]
    assert row.ok and "measured 2 times" in row.text and seen == [True, False, False]


def test_a_control_red_by_spread_on_every_rerun_stays_wrong(tmp_path: Path) -> None:
    from harness.selftest import run_case

    case, seen = _spread_case([dict(NOISE), dict(NOISE)])
    row = run_case(case, None, tmp_path / "b", reruns=1)  # type: ignore[arg-type]
    assert not row.ok and seen == [True, False, False]  # one re-run, then the verdict stands


def test_a_control_red_for_another_reason_is_not_rerun(tmp_path: Path) -> None:
    from harness.selftest import run_case

    case, seen = _spread_case([dict(SLOW), dict(GREEN)])
    row = run_case(case, None, tmp_path / "c", reruns=3)  # type: ignore[arg-type]
    assert not row.ok and seen == [True, False]  # a slow clean kernel is a finding, never measured away


def test_a_fault_run_red_by_spread_is_never_rerun(tmp_path: Path) -> None:
    from harness.selftest import run_case

    case, seen = _spread_case([dict(GREEN)])  # the planted noise's fault run is red by spread: that is the fault
    row = run_case(case, None, tmp_path / "d", reruns=3)  # type: ignore[arg-type]
    assert row.ok and seen == [True, False] and "measured" not in row.text


def test_a_clean_case_red_by_spread_is_measured_again(tmp_path: Path) -> None:
    from harness.selftest import run_case

    case, seen = _spread_case([dict(NOISE), dict(GREEN)], must_fail=None)
    assert run_case(case, None, tmp_path / "e", reruns=1).ok and len(seen) == 2  # type: ignore[arg-type]
    case, seen = _spread_case([dict(NOISE), dict(GREEN)], must_fail=None)
    assert not run_case(case, None, tmp_path / "f", reruns=0).ok and len(seen) == 1  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, 4, True, "1"])
def test_spread_reruns_out_of_range_names_the_key(tmp_path: Path, value: object) -> None:
    import shutil

    gates = tmp_path / "gates"
    shutil.copytree(REPO / "gates", gates)
    text = (gates / "selftest.yaml").read_text()
    (gates / "selftest.yaml").write_text(text.replace("spread_reruns: 1", f"spread_reruns: {value!r}"))
    with pytest.raises(ConfigError) as e:
        load_selftest_settings(gates)
    assert "spread_reruns" in str(e.value)
