"""The selftest's judgement: a planted case is OK only when its named gate FAILs; the clean case only when all pass."""

from __future__ import annotations

from harness.results import Status
from harness.selftest import CASES, Case, judge


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
