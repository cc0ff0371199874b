"""The selftest's judgement: a planted case is OK only when its named gate FAILs; the clean case only when all pass."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import REPO, make_context
from test_api_gate import TABLE, cpu_cases, stand_in

from flashcore import validate
from harness.config import load_config
from harness.gates import api as api_gate
from harness.gates.base import GateContext
from harness.planted_checks import check_disabled
from harness.results import GateResult, Status
from harness.schema import GateSpec
from harness.selftest import CASES, Case, judge
from harness.support.api_cases import load_cases


def _case(must_fail: str | None) -> Case:
    return Case("c", lambda config, out: {}, must_fail, "")


def test_planted_case_needs_its_gate_to_fail() -> None:
    assert judge(_case("correctness"), {"build": Status.PASS, "correctness": Status.FAIL})[0]
    ok, why = judge(_case("correctness"), {"correctness": Status.PASS})
    assert not ok and "expected fail" in why
    assert not judge(_case("correctness"), {"correctness": Status.ERROR})[0]  # an error is not a caught fault
    assert not judge(_case("determinism"), {"correctness": Status.FAIL})[0]  # missing gate


def test_clean_case_needs_every_gate_to_pass() -> None:
    assert judge(_case(None), {"build": Status.PASS, "correctness": Status.PASS})[0]
    assert not judge(_case(None), {"build": Status.PASS, "determinism": Status.NOT_RUN})[0]


def test_every_phase1_gate_has_a_planted_fault() -> None:
    assert {c.must_fail for c in CASES} >= {"build", "correctness", "determinism", None}


# ---- the api gate's planted case (a host-side check of flashcore/validate.py made a no-op) -------------------


def api_case() -> Case:
    (case,) = [c for c in CASES if c.must_fail == "api"]
    return case


def test_the_api_gate_has_a_planted_case() -> None:
    case = api_case()
    assert case.name == "api-no-layout-check" and "flashcore.validate.layout" in case.why


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


def test_the_planted_case_fails_the_api_gate_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The selftest case end to end, with the api gate's loop on CPU tensors (test_api_gate's stand-in: the real
    host checks, then SDPA): with the layout check planted as a no-op the gate must FAIL (not ERROR); the same
    loop with the real check passes. Every CPU-meaningful reject case, and one accept case (the plant does not
    touch valid inputs; the accept cases are test_api_gate's)."""
    full = cpu_cases(load_cases(TABLE))
    table = dataclasses.replace(full, cases=tuple(c for c in full.cases if c.kind == "reject" or c.name == "s1"))
    judge_p = api_gate.judge_params(load_config(REPO / "gates").gates_through(7), "correctness")
    assert judge_p is not None
    seen: list[bool] = []

    def cpu_gate(spec: GateSpec, ctx: GateContext, gpu_reason: str | None) -> GateResult:
        seen.append(validate.layout is real)
        fc, fake_api = stand_in()
        return api_gate.check_cases(ctx, fc, fake_api, table, judge_p, devices=1, device="cpu")

    real = validate.layout
    monkeypatch.setattr("harness.engine.run_gate", cpu_gate)
    statuses = api_case().run(load_config(REPO / "gates"), tmp_path / "planted")
    assert judge(api_case(), statuses) == (True, "api failed as planted")
    assert seen == [False] and validate.layout is real
    result = json.loads((tmp_path / "planted" / "results.json").read_text())
    checks = {c["workload"]: c for c in result["gates"][0]["checks"]}
    assert checks["q-misaligned"]["status"] == "fail" and "accepted: no error" in checks["q-misaligned"]["message"]
    assert "error" not in {c["status"] for c in checks.values()}
    assert "PLANTED no-op flashcore.validate.layout (test-only): api must fail" in result["notice"]
    clean = cpu_gate(GateSpec("api", 7, None), make_context(tmp_path / "clean", "api", None), None)
    assert clean.status is Status.PASS and seen == [False, True]


def test_cases_can_be_chosen_by_name() -> None:
    from harness.selftest import select

    assert [c.name for c in select("api-no-layout-check, clean")] == ["api-no-layout-check", "clean"]
    assert len(select(None)) == len(CASES)
    with pytest.raises(SystemExit, match="unknown case"):
        select("clean,nope")


# ---- each gate declares its own planted faults --------------------------------------------------------------


def test_every_gate_declares_its_planted_faults_or_why_it_has_none() -> None:
    """A new gate joins the selftest in its own module (harness/gates/base.py SelfTest); one without a planted GPU
    case says where its fault is planted instead. Declared on the class itself: a subclass inherits nothing."""
    from harness.gates import registry

    for name in registry.names():
        gate = registry.get(name)
        assert gate is not None
        own = gate.__dict__
        assert own.get("selftests") or own.get("selftest_none"), f"{name}: no selftests and no selftest_none"


def test_declared_cases_are_the_selftest_and_each_plant_is_known() -> None:
    from harness.gates import registry
    from harness.gates.base import SelfTest
    from harness.selftest import PLANTS, runner_for

    names = [c.name for c in CASES]
    assert len(names) == len(set(names)) and names[0] == "clean"
    assert set(names) == {"clean", "tail-mask", "skip-row", "long-skip-row", "hf-skip-row", "random-skip-row",
                          "nondeterministic",
                          "spill", "slow-loads", "strict-flag-ignored", "api-no-layout-check", "perf-clean",
                          "perf-slow", "perf-noisy", "memcheck-oob", "memcheck-leak", "racecheck-race",
                          "synccheck-divergent", "synccheck-mbar", "initcheck-uninit", "memcheck-clean",
                          "racecheck-clean", "synccheck-clean", "initcheck-clean"}
    for name in registry.names():
        gate = registry.get(name)
        assert gate is not None
        assert all(t.plant in PLANTS for t in gate.selftests), name
    with pytest.raises(ValueError, match="unknown plant 'laser'"):
        runner_for("build", SelfTest("x", "laser"))
    by_name = {c.name: c for c in CASES}
    assert by_name["perf-clean"].must_fail is None and by_name["perf-slow"].must_fail == "perf-fa2/regression"
    assert by_name["long-skip-row"].must_fail == "correctness-long" and by_name["memcheck-clean"].must_fail is None
