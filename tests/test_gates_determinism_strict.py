"""determinism-strict: the plan verdict (pure) and the planted 'flag ignored' wrapper used by the selftest."""

from __future__ import annotations

import pytest

import flashcore
from harness.gates.determinism_strict import StrictParams, verdict_plans
from harness.planted_checks import flag_dropped
from harness.results import Status
from harness.selftest import CASES

P = StrictParams(workloads=("w",), repeats=21, sm_margins=(0, 66, 120))


def details(**plans: tuple[list[int], list[int]]) -> dict[str, dict[str, object]]:
    return {name: {"plans": {"deterministic": det, "default": dflt}} for name, (det, dflt) in plans.items()}


def test_plans_pass_when_the_default_split_count_moved_somewhere() -> None:
    check = verdict_plans(details(decode=([14, 14, 14], [14, 7, 3]), prefill=([1, 1, 1], [1, 1, 1])), P)
    assert check.status is Status.PASS and "decode" in check.message


def test_a_sweep_that_changed_no_plan_proves_nothing() -> None:
    check = verdict_plans(details(prefill=([1, 1, 1], [1, 1, 1])), P)
    assert check.status is Status.ERROR
    relaxed = StrictParams(workloads=("w",), repeats=21, sm_margins=(0, 66), require_varied_plans=False)
    assert verdict_plans(details(prefill=([1, 1], [1, 1])), relaxed).status is Status.PASS


def test_deterministic_mode_whose_plan_moves_fails() -> None:
    assert verdict_plans(details(decode=([14, 7, 3], [14, 7, 3])), P).status is Status.FAIL


def test_flag_dropped_removes_the_keyword_and_restores_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, object]] = []
    monkeypatch.setattr(flashcore, "attention", lambda *a, **kw: seen.append(kw))
    real = flashcore.attention
    with flag_dropped("deterministic"):
        flashcore.attention(1, 2, 3, deterministic=True, sm_margin=66)
    assert seen == [{"sm_margin": 66}] and flashcore.attention is real


def test_selftest_plants_the_ignored_flag() -> None:
    case = next(c for c in CASES if c.name == "strict-flag-ignored")
    assert case.must_fail == "determinism-strict"

