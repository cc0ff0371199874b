"""The GPU gates' worker process: it runs one gate at a time for the engine, which replaces it when a gate runs
past its time limit or the worker dies (harness/watchdog.py).

The worker is started with multiprocessing's "spawn" (a fresh interpreter: a CUDA context must not be forked, the
reason harness/shard.py's per-GPU workers are fresh interpreters too) and inherits the engine's environment, so
under `GPUS=all` each shard's worker uses its shard's GPU. One worker serves gate after gate until one fails it,
so the perf gates still share one measurement (harness/bench/runner.py) and torch is imported once per run, not
once per gate. The worker sends each progress step (`ctx.step`: the workload it is on) to the engine, so a hung
gate's ERROR names that workload. After each gate it checks that its CUDA context still works: one lost to a
trap cannot run the next gate, so the worker then exits and the next gate gets a fresh one.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from types import MappingProxyType
from typing import Any

from flashcore.faults import Fault
from harness.gates.base import Gate, GateContext
from harness.results import GateResult
from harness.schema import Config, GateSpec


def read_only(items: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    return MappingProxyType(items)


# Config's workload and set tables are read-only mappings, which pickle cannot name: they travel as plain dicts.
ForkingPickler.register(MappingProxyType, lambda m: (read_only, (dict(m),)))


@dataclass(frozen=True)
class Job:
    """One gate for the worker: the class travels by reference (module and name), the rest by value."""

    gate_cls: type[Gate]
    spec: GateSpec
    config: Config
    run_dir: Path
    repo_root: Path
    seed: int
    fault: int
    gpu_reason: str | None
    plant: str = ""  # a test-only change to flashcore made in the worker (harness/planted_checks.py planted)
    peers: tuple[GateSpec, ...] = ()  # the run's gates (GateContext.peers)


@dataclass(frozen=True)
class Outcome:
    """What came back: the gate's result, or None with why (timed out, or the worker ended without one)."""

    result: GateResult | None
    step: str  # the last progress step the worker reported
    elapsed_s: float
    timed_out: bool = False
    exit_code: int | None = None
    why: str = ""


# ---- the worker's side ------------------------------------------------------------------------------------------


def _planted(job: Job) -> contextlib.AbstractContextManager[object]:
    """The job's planted fault, made in this process where the gate runs (never in the engine's)."""
    if job.fault == Fault.HANG:
        from harness.planted_hang import planted_hang

        return planted_hang(job.repo_root)
    if job.plant:
        from harness.planted_checks import planted

        return planted(job.plant)
    return contextlib.nullcontext()


def cuda_lost() -> str:
    """Why this process's CUDA context can no longer run work ("" when it can, or was never made)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return ""
    try:
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - any failure here means the context is gone
        return f"its CUDA context is lost ({type(e).__name__}: {e})"
    return ""


def serve(conn: Connection) -> None:
    """The worker's loop: a Job in, ("step", text)* then ("result", GateResult, lost) out; None or EOF ends it."""
    from harness.gate_run import run_gate_class

    lock = threading.Lock()  # a gate may report steps from a helper thread

    def step(what: str) -> None:
        with lock:
            conn.send(("step", what))

    conn.send(("ready", os.getpid()))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        except Exception as e:  # noqa: BLE001 - a gate class this interpreter cannot import: that gate's ERROR
            with lock:
                conn.send(("result", None, f"the worker could not load the gate ({type(e).__name__}: {e})"))
            continue
        if job is None:
            return
        kernel_fault = 0 if job.fault == Fault.HANG else job.fault
        ctx = GateContext(spec=job.spec, config=job.config, run_dir=job.run_dir, repo_root=job.repo_root,
                          seed=job.seed, step=step, fault=kernel_fault, peers=job.peers)
        with _planted(job):
            result = run_gate_class(job.gate_cls, job.spec, ctx, job.gpu_reason)
        lost = cuda_lost()
        with lock:
            conn.send(("result", result, lost))
        if lost:
            return


# ---- the engine's side ------------------------------------------------------------------------------------------


class GateWorker:
    """The engine's handle on its current worker: started on first use, replaced after a hang or a death."""

    def __init__(self, startup_s: float, poll_s: float = 0.5) -> None:
        self.startup_s = startup_s
        self.poll_s = poll_s
        self._proc: Any = None
        self._conn: Connection | None = None

    def run(self, job: Job, limit_s: float, on_step: Callable[[str], None]) -> Outcome:
        """Run `job` in the worker, waiting at most `limit_s` for its result (the worker's start not counted)."""
        why = self._ensure_started()
        if why:
            return Outcome(None, "", 0.0, why=why, exit_code=self._exit_code())
        assert self._conn is not None
        t0 = time.monotonic()
        try:
            self._conn.send(job)
        except Exception as e:  # noqa: BLE001 - an unpicklable job is this gate's ERROR, not the run's end
            return Outcome(None, "", 0.0, why=f"the gate could not be sent to its worker ({type(e).__name__}: {e})")
        step = ""
        while (left := limit_s - (time.monotonic() - t0)) > 0:
            if not self._conn.poll(min(left, self.poll_s)):
                if not self._proc.is_alive() and not self._conn.poll():
                    return self._ended(step, t0)
                continue
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                return self._ended(step, t0)
            if msg[0] == "step":
                step = str(msg[1])
                on_step(step)
            elif msg[0] == "result":
                if msg[2]:
                    self.close()  # the worker exits on its own; the next gate gets a fresh one
                return Outcome(msg[1], step, time.monotonic() - t0, why=str(msg[2]))
        self.kill()
        return Outcome(None, step, time.monotonic() - t0, timed_out=True)

    def _ensure_started(self) -> str:
        """"" once a worker is ready, else why none is."""
        if self._proc is not None and self._proc.is_alive():
            return ""
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=serve, args=(child,), name="gate-worker", daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        if parent.poll(self.startup_s):
            try:
                if parent.recv()[0] == "ready":
                    return ""
            except (EOFError, OSError):
                pass
        self.kill()
        return f"the gate worker did not start within {self.startup_s:.0f} s (gates/watchdog.yaml startup_s)"

    def _ended(self, step: str, t0: float) -> Outcome:
        self.kill()
        return Outcome(None, step, time.monotonic() - t0, exit_code=self._exit_code())

    def _exit_code(self) -> int | None:
        return None if self._proc is None else self._proc.exitcode

    def kill(self) -> None:
        """End the worker now (SIGKILL: a process blocked in a CUDA call ignores anything milder)."""
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        self._reap()

    def close(self) -> None:
        """Let the worker finish and exit; killed when it does not within a few seconds."""
        if self._conn is not None and self._proc is not None and self._proc.is_alive():
            with contextlib.suppress(OSError):
                self._conn.send(None)
            self._proc.join(10)
        self.kill()

    def _reap(self) -> None:
        if self._proc is not None:
            self._proc.join(10)
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> GateWorker:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

