"""Random dense and serving calls on the GPU (harness/support/random_calls.py and random_serving.py say what is
drawn, harness/support/random_judge.py how each call is judged; the thresholds are the random-shapes gate's in
gates/phases.yaml), on a fresh seed every run, so that the fixed cases of the other tests are not the only calls
the kernel ever sees.
The random-shapes gate runs the same draws in `make gate-phase7`; these tests take more of them and print each.

FLASHCORE_FUZZ_SEED=N repeats a run (the gate prints its seeds); FLASHCORE_FUZZ_DRAWS sets the draws per family.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

import flashcore
from flashcore.faults import Fault
from harness.config import load_config
from harness.gates.random_shapes import RandomShapesParams, judge_of
from harness.support import gpu
from harness.support.random_calls import Failure, run_dense
from harness.support.random_serving import run_serving

pytestmark = pytest.mark.gpu
SEED = int(os.environ.get("FLASHCORE_FUZZ_SEED") or secrets.randbits(31))
DRAWS = int(os.environ.get("FLASHCORE_FUZZ_DRAWS") or 300)
REPO = Path(__file__).resolve().parent.parent


def params() -> RandomShapesParams:
    spec = next(g for ph in load_config(REPO / "gates").phases for g in ph.gates if g.name == "random-shapes")
    return spec.params


def show(family: str, draws: int) -> Callable[[int, str, str | None], None]:
    def progress(i: int, what: str, problem: str | None) -> None:
        print(f"[random-{family}] {i + 1}/{draws} {what}: {problem or 'ok'}", flush=True)

    return progress


def verdict(family: str, failures: list[Failure]) -> None:
    lines = "\n".join(f"draw {f.index}: {f.what}: {f.problem}" for f in failures)
    assert not failures, f"FLASHCORE_FUZZ_SEED={SEED} ({len(failures)} of {DRAWS} {family} draws failed):\n{lines}"


def test_random_dense_calls_match_the_reference() -> None:
    p = params()
    verdict("dense", run_dense(flashcore, SEED, DRAWS, judge_of(p), p.max_scores, progress=show("dense", DRAWS)))


def test_random_serving_calls_match_the_reference() -> None:
    verdict("serving", run_serving(flashcore, SEED, DRAWS, judge_of(params()), progress=show("serving", DRAWS)))


@pytest.mark.parametrize(("fault", "at_least"), [("SKIP_ROW", 24), ("TAIL_MASK", 1)])
def test_planted_kernel_faults_fail_dense_draws(fault: str, at_least: int) -> None:
    # A fixed seed: a planted run must fail the same way every time. SKIP_ROW leaves a row of every query tile
    # unwritten (every draw); TAIL_MASK lets one key past Sk in (draws whose Sk is not a multiple of the tile's keys,
    # where the leaked weight beats the bound).
    p = params()
    fc = gpu.load_flashcore(int(Fault[fault]))
    assert len(run_dense(fc, 1, 24, judge_of(p), p.max_scores, progress=show("dense", 24))) >= at_least


def test_planted_wrong_serving_results_fail() -> None:
    # The serving entries take no kernel fault: the bugs are planted around the call (harness/support/random_serving.py
    # `plant`: each sequence's last key dropped, query heads reversed); a dropped key moves a long sequence's rows
    # less than the bound and one query head has nothing to reverse, so not every draw can tell.
    assert len(run_serving(flashcore, 1, 12, judge_of(params()), plant=True, progress=show("serving", 12))) >= 4
