"""Synthetic RunResults shared by the renderer and browser tests (this module defines no tests)."""

from __future__ import annotations

from harness.results import Check, GateResult, RunResult, Status

ENV = {
    "gpu": "NVIDIA H100 80GB HBM3",
    "driver": "570.86.15",
    "cuda": "12.8",
    "torch": "2.13.0",
    "nvcc": "13.0.88",
    "git": {"commit": "0123abcd", "dirty": True},
    "clocks_mhz": [1980, 2619],
}

XSS = "<script>alert('x')</script> & friends"


def gate(name: str, phase: int, status: Status, *, message: str = "", checks: int = 2) -> GateResult:
    # A failing gate fails on its first check only; its other checks pass.
    rows = tuple(
        Check(
            workload=f"prefill-b4-h16-s{1024 * (i + 1)}-d128",
            metric="max_abs_err",
            threshold=2e-3,
            measured=3.1e-2 if i == 0 and status is Status.FAIL else 1.25e-4,
            status=status if i == 0 else Status.PASS,
            margin=-2.9e-2 if i == 0 and status is Status.FAIL else 1.875e-3,
        )
        for i in range(checks)
    )
    return GateResult(name=name, phase=phase, status=status, checks=rows, message=message,
                      elapsed_s=1.5 + phase, logs=(f"logs/{name}.txt",))


def run_of(*gates: GateResult, notice: str = "") -> RunResult:
    return RunResult(run_id="20250101-000000-abc", phase=max((g.phase for g in gates), default=1),
                     gates=gates, environment=ENV, started_at="2025-01-01T00:00:00Z", elapsed_s=75.0,
                     notice=notice)


def all_pass() -> RunResult:
    return run_of(gate("build", 1, Status.PASS, message="0 spills"), gate("correctness", 1, Status.PASS),
                  gate("determinism", 1, Status.PASS))


def one_fail() -> RunResult:
    return run_of(gate("build", 1, Status.PASS), gate("correctness", 1, Status.FAIL, message=XSS),
                  gate("determinism", 1, Status.PASS))


def one_error() -> RunResult:
    return run_of(gate("build", 1, Status.PASS),
                  gate("sanitizer", 1, Status.ERROR, message="compute-sanitizer not found", checks=0))


def not_run() -> RunResult:
    return run_of(gate("build", 1, Status.NOT_RUN, checks=0),
                  gate("correctness", 1, Status.NOT_RUN, checks=0), notice="no CUDA GPU: gates not run")


SAMPLES = {"pass": all_pass, "fail": one_fail, "error": one_error, "not_run": not_run}
