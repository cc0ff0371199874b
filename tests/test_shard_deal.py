"""The shared stage's dealer on several GPUs (harness/shard_plan.py `plan`): what goes first."""

from __future__ import annotations

import dataclasses

from test_shard_plan import FAKE, GATES

from harness.shard_plan import PART_SEP, Worker, gate_of, stages


def test_the_split_parts_are_dealt_before_the_free_gates() -> None:
    """The parts can only go one per worker of the other GPUs; dealt last, they landed on whatever the free gates
    had left there while the lone measuring worker idled (planned 34 s against 55-73 s on two H200s). Dealt first,
    the lone worker takes a free gate and the longest worker is shorter."""
    settings = dataclasses.replace(FAKE, workers_per_gpu=2)
    seconds = {"correctness": 60.0, "sanitizer": 50.0, "sanitizer-all": 120.0}
    got = stages(GATES, [0, 1], settings, seconds)[-1]

    def load(ts: list[str]) -> float:
        return sum(settings.weight(gate_of(t), seconds) / (2 if PART_SEP in t else 1) for t in ts)

    assert "correctness" in got[Worker(0)]
    assert all(any(gate_of(t) == "sanitizer-all" for t in ts) for w, ts in got.items() if w.gpu == 1)
    assert max(load(ts) for ts in got.values()) <= 110.0  # dealt after the free gates: 120 (60 + a 60 s part)
