"""What one benchmark measured (`Measurement`), and the JSON files that carry measurements (pure; no torch).

The per-repetition GPU times are the record; median, spread, throughput and the paired ratios
(harness/bench/paired.py) are derived from them on read, so the pytest-benchmark JSON
(`extra_info["measurement"]`), a gate's `logs/<gate>.bench.json` and the stored run (`gates/baselines/*.json`)
hold the same numbers in the same form and every reader recomputes the same way.

Pairing: the backends of a workload (and the points of one scaling sweep) are timed in interleaved rounds
(harness/bench/timing.py). Each repetition keeps its round index (`rounds`) and the SM clock measured right
before it (`clock_mhz`); measurements with the same `pairing` id in one file were timed in the same rounds, so
per-round pairs can be rebuilt. Records written before pairing (schema flashcore.measurement/1) have no rounds:
they read back as unpaired, and no paired ratio is drawn from them.

Files read by `read_run`:
- a stored run / a gate's measurements: {"schema": "flashcore.bench-run/1", "environment", "timing",
  "measurements": [Measurement.to_dict(), ...]}
- a pytest-benchmark JSON (`--benchmark-json`): measurements from each benchmark's
  `extra_info["measurement"]`, plus `flashcore.not_available` (backends that could not run are skipped tests,
  which pytest-benchmark leaves out of its own list) and `machine_info.flashcore` (the environment).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bench import flops as fl
from harness.bench.stats import Summary, summarize
from harness.schema import Workload
from harness.stored_file import XzError, stored_text

RUN_SCHEMA = "flashcore.bench-run/1"
MEASUREMENT_SCHEMA = "flashcore.measurement/2"  # /1 (no rounds) still reads
_DERIVED = ("schema", "summary", "throughput", "unit")
CRASHED = "crashed while timed"  # the start of `why` when a backend raised during its rounds


@dataclass(frozen=True)
class Measurement:
    """One (workload, backend): its per-repetition GPU times, or why it could not run."""

    workload: str
    backend: str
    spec: Workload  # the workload's shape, kept so a stored run can be checked against today's YAML
    available: bool
    why: str = ""  # not available: why (import failed, backend refused the shape, ...)
    times_ms: tuple[float, ...] = ()
    seed: int | None = None
    clocks: Mapping[str, Any] = field(default_factory=dict)  # NVML clocks and power read right after the rounds
    implementation: str = ""  # what ran: "flashcore", "SDPBackend.CUDNN_ATTENTION", the FA3 module, ...
    kernels: tuple[str, ...] = ()  # GPU kernels it launched (torch profiler): proof of which code ran
    planted: str = ""  # test-only planted fault or noise; "" in real runs
    spread_groups: int = 1  # timing.spread_groups when measured (1: per-repetition spread, older records)
    rounds: tuple[int, ...] = ()  # round index of each repetition; () = unpaired (an older record)
    pairing: str = ""  # id of the interleaved rounds it was timed in: equal ids (in one file) = same rounds
    clock_mhz: tuple[float, ...] = ()  # SM clock right before each repetition (fixed-cycle spin); () = not probed
    clocks_start: Mapping[str, Any] = field(default_factory=dict)  # NVML clocks and power read before the rounds
    base_rounds: int = 0  # the rounds every call of its pairing ran; its rounds from this index on are extension
    # rounds (harness/bench/extend.py); 0: not known (an older record)
    clock_after_mhz: tuple[float, ...] = ()  # SM clock right after each repetition (calls long enough for the
    # clock to move within them, gates/bench.yaml clock_probe_after_ms); () = not probed after

    def call_clock_mhz(self) -> tuple[float, ...]:
        """Each repetition's SM clock: the probe before it, or the mean of the probes before and after it."""
        if self.clock_after_mhz and self.clock_mhz:
            return tuple((b + a) / 2 for b, a in zip(self.clock_mhz, self.clock_after_mhz, strict=True))
        return self.clock_mhz

    def __post_init__(self) -> None:
        if self.rounds and len(self.rounds) != len(self.times_ms):
            raise ValueError(f"{len(self.rounds)} round indices for {len(self.times_ms)} repetitions")
        if self.clock_mhz and len(self.clock_mhz) != len(self.times_ms):
            raise ValueError(f"{len(self.clock_mhz)} clock readings for {len(self.times_ms)} repetitions")
        if self.clock_after_mhz and len(self.clock_after_mhz) != len(self.clock_mhz):
            raise ValueError(f"{len(self.clock_after_mhz)} clock readings after for {len(self.clock_mhz)} before")

    @property
    def paired(self) -> bool:
        """Timed in interleaved rounds (a round index per repetition)."""
        return self.available and bool(self.rounds) and bool(self.pairing)

    @property
    def extended(self) -> bool:
        """It got extension rounds after the base ones."""
        return bool(self.base_rounds) and any(r >= self.base_rounds for r in self.rounds)

    @property
    def summary(self) -> Summary | None:
        if not self.available or len(self.times_ms) < 2 * self.spread_groups:
            return None
        return summarize(self.times_ms, self.spread_groups)

    @property
    def median_ms(self) -> float | None:
        s = self.summary
        return s.median_ms if s else None

    @property
    def unit(self) -> str:
        """Memory-bound workloads are judged by K/V bandwidth (TB/s), the others by TFLOPS."""
        return "TB/s" if self.spec.kind == "memory-bound" else "TFLOPS"

    @property
    def throughput(self) -> float | None:
        """TFLOPS (or TB/s of K and V for memory-bound workloads) at the median time."""
        t = self.median_ms
        if t is None:
            return None
        if self.unit == "TB/s":
            return fl.tbps(fl.workload_kv_bytes(self.spec), t)
        return fl.tflops(fl.workload_flops(self.spec), t)

    @property
    def tflops(self) -> float | None:
        t = self.median_ms
        return fl.tflops(fl.workload_flops(self.spec), t) if t is not None else None

    def to_dict(self) -> dict[str, Any]:
        s = self.summary
        return {
            "schema": MEASUREMENT_SCHEMA,
            "workload": self.workload,
            "backend": self.backend,
            "spec": {f.name: getattr(self.spec, f.name) for f in dataclasses.fields(Workload)},
            "available": self.available,
            "why": self.why,
            "times_ms": [round(t, 6) for t in self.times_ms],
            "seed": self.seed,
            "clocks": dict(self.clocks),
            "implementation": self.implementation,
            "kernels": list(self.kernels),
            "planted": self.planted,
            "spread_groups": self.spread_groups,
            "pairing": self.pairing,
            "rounds": list(self.rounds),
            "clock_mhz": [round(c, 1) for c in self.clock_mhz],
            "clocks_start": dict(self.clocks_start),
            "base_rounds": self.base_rounds,
            "clock_after_mhz": [round(c, 1) for c in self.clock_after_mhz],
            # derived, for a person reading the JSON; recomputed from times_ms on read
            "summary": s.to_dict() if s else None,
            "throughput": self.throughput,
            "unit": self.unit,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Measurement:
        """Inverse of to_dict; raises RecordError on a malformed entry."""
        try:
            fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d["spec"].items()}
            spec = Workload(**fields)
            times = tuple(float(t) for t in d.get("times_ms") or ())
            if any(not math.isfinite(t) for t in times):
                raise ValueError("non-finite time")
            rounds = tuple(int(r) for r in d.get("rounds") or ())
            clock = tuple(float(c) for c in d.get("clock_mhz") or ())
            clock_after = tuple(float(c) for c in d.get("clock_after_mhz") or ())
            return cls(workload=str(d["workload"]), backend=str(d["backend"]), spec=spec,
                       available=bool(d["available"]), why=str(d.get("why") or ""), times_ms=times,
                       seed=d.get("seed"), clocks=dict(d.get("clocks") or {}),
                       implementation=str(d.get("implementation") or ""),
                       kernels=tuple(d.get("kernels") or ()), planted=str(d.get("planted") or ""),
                       spread_groups=int(d.get("spread_groups") or 1), rounds=rounds,
                       pairing=str(d.get("pairing") or ""), clock_mhz=clock,
                       clocks_start=dict(d.get("clocks_start") or {}), base_rounds=int(d.get("base_rounds") or 0),
                       clock_after_mhz=clock_after)
        except (KeyError, TypeError, ValueError) as e:
            raise RecordError(f"malformed measurement {dict(d).get('workload')!r}/{dict(d).get('backend')!r}: "
                              f"{type(e).__name__}: {e}") from None


def not_available(wl: Workload, backend: str, why: str, seed: int | None = None) -> Measurement:
    return Measurement(wl.name, backend, wl, available=False, why=why, seed=seed)


class RecordError(ValueError):
    """A measurements file that cannot be read: missing, not JSON, wrong schema, malformed entry."""


@dataclass(frozen=True)
class Run:
    """A set of measurements with where they came from."""

    path: str
    environment: Mapping[str, Any]
    measurements: Mapping[tuple[str, str], Measurement]  # (workload, backend) -> measurement
    timing: Mapping[str, Any] = field(default_factory=dict)

    def get(self, workload: str, backend: str) -> Measurement | None:
        return self.measurements.get((workload, backend))

    @property
    def gpu(self) -> str | None:
        value = self.environment.get("gpu")
        return str(value) if value else None

    @property
    def commit(self) -> str | None:
        value = self.environment.get("git_commit")
        return str(value) if value else None


def run_dict(measurements: Iterable[Measurement], environment: Mapping[str, Any],
             timing: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The JSON form of a run (a stored run, or a gate's measurements)."""
    return {
        "schema": RUN_SCHEMA,
        "source": source,
        "environment": dict(environment),
        "timing": dict(timing),
        "measurements": [m.to_dict() for m in measurements],
    }


def _index(items: Iterable[Measurement]) -> dict[tuple[str, str], Measurement]:
    return {(m.workload, m.backend): m for m in items}


def parse_run(data: Any, path: str) -> Run:
    """A Run from either JSON form (see the module docstring)."""
    if not isinstance(data, Mapping):
        raise RecordError(f"{path}: not a JSON object")
    if data.get("schema") == RUN_SCHEMA:
        items = [Measurement.from_dict(m) for m in data.get("measurements") or []]
        return Run(path, dict(data.get("environment") or {}), _index(items), dict(data.get("timing") or {}))
    if isinstance(data.get("benchmarks"), list):
        items = []
        for bench in data["benchmarks"]:
            raw = (bench.get("extra_info") or {}).get("measurement")
            if raw is not None:
                items.append(Measurement.from_dict(raw))
        ours = data.get("flashcore") or {}
        items += [Measurement.from_dict(m) for m in ours.get("not_available") or []]
        env = (data.get("machine_info") or {}).get("flashcore") or {}
        return Run(path, dict(env), _index(items), dict(ours.get("timing") or {}))
    raise RecordError(f"{path}: neither a {RUN_SCHEMA} file nor a pytest-benchmark JSON")


def read_run(path: Path) -> Run:
    try:
        text = stored_text(Path(path))  # a run's logs are xz-compressed once it is over (harness/run_files.py)
    except XzError as e:
        raise RecordError(f"{path}: not valid xz data: {e}") from None
    except FileNotFoundError:
        raise RecordError(f"{path}: no such file") from None
    except OSError as e:
        raise RecordError(f"{path}: cannot be read: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: not valid JSON: {e}") from None
    return parse_run(data, str(path))
