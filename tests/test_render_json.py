"""results.json: strict JSON that round-trips RunResult.to_dict()."""

import dataclasses
import json
import math

import pytest
from test_render_samples import SAMPLES, one_fail

from harness.render import render_json
from harness.results import Check, Status


@pytest.mark.parametrize("name", SAMPLES)
def test_json_round_trips_to_dict(name: str) -> None:
    run = SAMPLES[name]()
    data = json.loads(render_json(run))
    assert data == json.loads(json.dumps(run.to_dict()))
    assert data["status"] == run.status.value
    assert [g["name"] for g in data["gates"]] == [g.name for g in run.gates]


def test_non_finite_numbers_stay_strict_json() -> None:
    run = one_fail()
    bad = Check(workload="w", metric="max_abs_err", threshold=2e-3, measured=math.nan, status=Status.FAIL)
    gate = dataclasses.replace(run.gates[1], checks=(bad,), details={"inf": math.inf})
    text = render_json(dataclasses.replace(run, gates=(run.gates[0], gate)))
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert data["gates"][1]["checks"][0]["measured"] == "nan"
    assert data["gates"][1]["details"]["inf"] == "inf"
