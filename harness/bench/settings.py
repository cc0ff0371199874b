"""`gates/bench.yaml`: how to time, what the suite runs, the scaling sweep, the stored run, the anchors.

Parsed once into frozen dataclasses with the same strictness as the gate files (`harness.config`): an
unknown, missing or wrongly typed key is a `ConfigError` naming the file, the key and the value. The perf and
scaling gates and the pytest-benchmark suite all read this one file, so a stored run and a gate run are
timed the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.bench.stored import check_pattern
from harness.schema import DTYPES, HEAD_DIMS, Config, ConfigError, Workload, param, parse_dataclass, read_yaml

BENCH_FILE = "bench.yaml"
# Backend ids, in report order: FlashCore first, then the baselines.
BACKENDS = {
    "flashcore": "FlashCore",
    "fa2": "FA2 (SDPA flash)",
    "cudnn": "cuDNN (SDPA)",
    "efficient": "mem-efficient (SDPA)",
    "fa3": "FA3",
    "flashcore-det": "FlashCore deterministic",  # its ratio to FlashCore is the cost of deterministic=True
    "flashcore-default": "FlashCore default tiles",  # without the tuned table: FlashCore's ratio to it is the gain
}
OURS = "flashcore"
BASELINES = tuple(b for b in BACKENDS if b != OURS)
UNITS = ("tflops", "tbps")


@dataclass(frozen=True)
class TimingParams:
    warmup: int = param(ge=1)  # calls before the timed ones (module load, cuDNN plans); their median sizes the loop
    warmup_ms: float = param(ge=0)  # then untimed rounds (the timed rounds' own calls and order) for this much GPU time
    min_reps: int = param(ge=3)
    spread_groups: int = param(ge=1)  # judged spread = rel. std of the medians of this many consecutive groups
    max_reps: int = param(ge=3)
    target_ms: float = param(gt=0)  # timed GPU time aimed at per measurement: big shapes get fewer reps
    flush_mib: int = param(ge=0)  # L2 flush buffer written before every repetition (H100 L2: 50 MB)
    head_start_ms: float = param(ge=0)  # GPU spin before the timed rounds, so host launches run ahead
    clock_probe_us: float = param(ge=0)  # fixed-cycle spin before each call: the SM clock of that call (0: off)
    # calls estimated at least this long get the spin after them too; their clock is the mean of both readings
    # (a power-capped clock falls within a call of 0.1-0.2 s; 0: never)
    clock_probe_after_ms: float = param(ge=0)
    record_kernels: bool = param()  # name the GPU kernels each backend launched (torch profiler, one call)
    mirrored: bool = param()  # each round runs a workload's calls twice, A B C then C B A (paired.round_order)
    # Sequential rounds (harness/bench/extend.py): a workload whose judged paired ratio spreads more than
    # extend_above x its limit after the rounds above gets more rounds, up to what extend_target_ms,
    # extend_min_reps and extend_max_reps give it alone (the cap)
    extend_above: float = param(gt=0, le=1)
    extend_target_ms: float = param(gt=0)
    extend_min_reps: int = param(ge=3)
    extend_max_reps: int = param(ge=3)

    @property
    def calls_per_round(self) -> int:
        return 2 if self.mirrored else 1

    def reps_for(self, estimate_ms: float) -> int:
        """Repetitions for a call of about `estimate_ms`: target_ms of GPU time, within [min_reps, max_reps]."""
        return _reps(estimate_ms, self.target_ms, self.min_reps, self.max_reps)

    def rounds_for(self, estimates_ms: Sequence[float]) -> int:
        """Rounds for calls timed together (`calls_per_round` calls of each per round): the GPU time they would
        get one after another (reps_for each) divided by the time of one round, so that each call runs within
        [min_reps, max_reps] times in all (rounded up to whole rounds). Never more repetitions in all, nor more
        GPU time, than timing them one after another (but for that rounding)."""
        return self._rounds(estimates_ms, self.target_ms, self.min_reps, self.max_reps)

    def cap_rounds_for(self, estimates_ms: Sequence[float]) -> int:
        """The rounds an extended workload reaches in all (base and extension): rounds_for at the extend_ values."""
        return self._rounds(estimates_ms, self.extend_target_ms, self.extend_min_reps, self.extend_max_reps)

    def warmup_rounds(self, estimates_ms: Sequence[float]) -> int:
        """Untimed rounds before the timed ones: warmup_ms of GPU time (calls and clock probes), at least one."""
        per_round = self.calls_per_round * sum(e + self.clock_probe_us / 1000 for e in estimates_ms)
        if self.warmup_ms <= 0 or not estimates_ms:
            return 0
        return max(1, math.ceil(self.warmup_ms / max(per_round, 1e-3)))

    def _rounds(self, estimates_ms: Sequence[float], target_ms: float, min_reps: int, max_reps: int) -> int:
        k = self.calls_per_round
        lo, hi = -(-min_reps // k), -(-max_reps // k)
        per_round = k * sum(estimates_ms)
        if per_round <= 0:
            return hi
        budget = sum(_reps(e, target_ms, min_reps, max_reps) * e for e in estimates_ms)
        return max(lo, min(hi, int(budget / per_round + 1e-9)))


def _reps(estimate_ms: float, target_ms: float, min_reps: int, max_reps: int) -> int:
    want = int(target_ms / estimate_ms) + 1 if estimate_ms > 0 else max_reps
    return max(min_reps, min(max_reps, want))


@dataclass(frozen=True)
class SuiteParams:
    workloads: tuple[str, ...] = param()  # workload or set names of workloads.yaml
    sweep: bool = param()  # also every point of the scaling sweep
    backends: tuple[str, ...] = param()


@dataclass(frozen=True)
class SweepParams:
    """TFLOPS against sequence length at a fixed number of tokens per batch (batch = tokens / seqlen; a seqlen
    above `tokens` runs at batch 1)."""

    tokens: int = param(gt=0)
    heads: int = param(gt=0)
    head_dim: int = param(choices=HEAD_DIMS)
    dtype: str = param(choices=DTYPES)
    seqlens: tuple[int, ...] = param()
    causal: tuple[bool, ...] = param()


@dataclass(frozen=True)
class StoredRunParams:
    # repository-relative glob of the committed stored runs, one per GPU model (harness/bench/stored.py)
    files: str = param()
    reference_backend: str = param(choices=BASELINES)  # FlashCore's speed is stored relative to this backend
    reference_backend_memory_bound: str = param(choices=BASELINES)  # ... on memory-bound workloads
    reference_backend_not_plain: str = param(choices=BASELINES)  # ... on FP8 and serving layouts (SDPA runs neither)
    max_rel_std: float = param(gt=0, le=0.1)  # --update-baseline refuses a run whose paired ratio is noisier than this
    long_context_max_rel_std: float = param(gt=0, le=0.1)  # ... on workloads of kind long-context
    remeasure: int = param(ge=0, le=5)  # --update-baseline times a workload refused for its spread again, this often

    def spread_limit(self, wl: Workload) -> float:
        """The spread a stored ratio of `wl` may have (the perf gates' per-kind rule, gates/phases.yaml)."""
        return self.long_context_max_rel_std if wl.kind == "long-context" else self.max_rel_std

    def reference_for(self, wl: Workload) -> str:
        """The backend FlashCore's speed is compared with, in the same rounds, for the regression check."""
        if not wl.plain:
            return self.reference_backend_not_plain
        return self.reference_backend_memory_bound if wl.kind == "memory-bound" else self.reference_backend


@dataclass(frozen=True)
class JudgedParams:
    """How much a paired ratio must rest on before any verdict is drawn from it, today and in the stored run."""

    min_rounds: int = param(ge=4)
    min_spread_groups: int = param(ge=2)  # one group's spread is per-round jitter, not run to run
    stored_min_rounds: int = param(ge=4)
    stored_min_spread_groups: int = param(ge=2)


@dataclass(frozen=True)
class Anchor:
    """One row of ROADMAP's anchors: the baselines measured on the project's lent H100."""

    batch: int = param(gt=0)
    heads: int = param(gt=0)
    seqlen_q: int = param(gt=0)
    seqlen_k: int = param(gt=0)
    head_dim: int = param(choices=HEAD_DIMS)
    dtype: str = param(choices=DTYPES)
    causal: bool = param()
    unit: str = param(choices=UNITS)
    fa2: float = param(gt=0)
    cudnn: float = param(gt=0)
    fa3: float = param(gt=0)

    def matches(self, wl: Workload) -> bool:
        return (wl.batch, wl.heads_q, wl.heads_kv, wl.seqlen_q, wl.seqlen_k, wl.head_dim, wl.dtype, wl.causal) == (
            self.batch, self.heads, self.heads, self.seqlen_q, self.seqlen_k, self.head_dim, self.dtype, self.causal)

    def value(self, backend: str) -> float | None:
        return float(getattr(self, backend)) if backend in ("fa2", "cudnn", "fa3") else None


@dataclass(frozen=True)
class BenchSettings:
    file: Path
    timing: TimingParams
    suite: SuiteParams
    sweep: SweepParams
    stored_run: StoredRunParams
    judged: JudgedParams
    anchors: Mapping[str, Anchor]
    sweep_workloads: tuple[Workload, ...]  # generated from `sweep`, or the workloads.yaml entry of that shape
    suite_workloads: tuple[Workload, ...]  # what `make bench` runs, in order, no duplicates
    skip_unread: tuple[str, ...] = ()  # workloads on which a gate run times no pair that no check reads

    def anchor_for(self, wl: Workload) -> Anchor | None:
        return next((a for a in self.anchors.values() if a.matches(wl)), None)

    def pairing_groups(self, workloads: Sequence[Workload]) -> list[tuple[Workload, ...]]:
        """Workloads timed in the same interleaved rounds: the scaling sweep's points of one causal mode
        (so the scaling gate's ratio between two sequence lengths is paired too), every other workload alone.
        A group sits at the place of its first member, its points in sweep order; only the given workloads
        are grouped."""
        sweep = {w.name: i for i, w in enumerate(self.sweep_workloads)}
        groups: dict[str, list[Workload]] = {}
        for wl in workloads:
            key = f"sweep-{'causal' if wl.causal else 'non-causal'}" if wl.name in sweep else wl.name
            groups.setdefault(key, []).append(wl)
        return [tuple(sorted(g, key=lambda w: sweep.get(w.name, 0))) for g in groups.values()]


_SHAPE = ("batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "dtype", "causal")


def _same_shape(a: Workload, b: Workload) -> bool:
    return all(getattr(a, f) == getattr(b, f) for f in _SHAPE)


def sweep_workloads(file: Path, sweep: SweepParams, named: Mapping[str, Workload]) -> tuple[Workload, ...]:
    """One workload per (seqlen, causal): the workloads.yaml entry of that exact shape when there is one (so the
    point is measured once under its usual name), else `sweep-s<seqlen>[-causal]`."""
    out: list[Workload] = []
    for causal in sweep.causal:
        for i, s in enumerate(sweep.seqlens):
            batch = max(1, sweep.tokens // s)
            if s <= sweep.tokens and batch * s != sweep.tokens:
                raise ConfigError(file, f"sweep.seqlens[{i}]", s,
                                  f"must divide sweep.tokens ({sweep.tokens}) or exceed it (batch 1)")
            name = f"sweep-s{s}" + ("-causal" if causal else "")
            wl = Workload(name, batch, sweep.heads, sweep.heads, s, s, sweep.head_dim, sweep.dtype, causal,
                          "compute-bound", f"scaling sweep: {batch * s} tokens per batch")
            existing = next((w for w in named.values() if _same_shape(w, wl)), None)
            if existing is None and name in named:
                raise ConfigError(file, f"sweep.seqlens[{i}]", s,
                                  f"generated name {name!r} is already a workload of another shape")
            out.append(existing or wl)
    return tuple(out)


def expand(file: Path, key: str, names: tuple[str, ...], config: Config) -> tuple[Workload, ...]:
    """Workload and set names of workloads.yaml -> workloads, in order, without duplicates."""
    out: dict[str, Workload] = {}
    for i, n in enumerate(names):
        if n in config.sets:
            out.update({m: config.workloads[m] for m in config.sets[n]})
        elif n in config.workloads:
            out[n] = config.workloads[n]
        else:
            raise ConfigError(file, f"{key}[{i}]", n, "unknown workload or set of workloads.yaml")
    return tuple(out.values())


def check_backends(file: Path | str, key: str, names: tuple[str, ...], allowed: tuple[str, ...]) -> None:
    for i, n in enumerate(names):
        if n not in allowed:
            raise ConfigError(file, f"{key}[{i}]", n, f"unknown backend; known: {', '.join(allowed)}")


def mapping(file: Path, key: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(file, key, value, "must be a mapping (key: value lines)")
    return value


def load_bench_settings(config: Config, file: Path | None = None) -> BenchSettings:
    """Parse `<gates_dir>/bench.yaml` (or `file`) against the already loaded workloads."""
    file = Path(file) if file is not None else config.gates_dir / BENCH_FILE
    data = read_yaml(file, ("timing", "suite", "sweep", "stored_run", "judged", "anchors", "skip_unread"))
    for key in ("timing", "suite", "sweep", "stored_run", "judged"):
        if key not in data:
            raise ConfigError(file, key, None, "required")
    timing = parse_dataclass(TimingParams, data["timing"], file, "timing")
    if timing.min_reps < 2 * timing.spread_groups:
        raise ConfigError(file, "timing.min_reps", timing.min_reps,
                          f"must be >= 2 x spread_groups ({timing.spread_groups}) for a median per group")
    if timing.clock_probe_after_ms > 0 and timing.clock_probe_us == 0:
        raise ConfigError(file, "timing.clock_probe_after_ms", timing.clock_probe_after_ms,
                          "probes after long calls need the probe itself: set timing.clock_probe_us > 0, or 0 here")
    if timing.max_reps < timing.min_reps:
        raise ConfigError(file, "timing.max_reps", timing.max_reps, f"must be >= min_reps ({timing.min_reps})")
    for key in ("target_ms", "min_reps", "max_reps"):  # the cap: never fewer rounds than the base
        if getattr(timing, f"extend_{key}") < getattr(timing, key):
            raise ConfigError(file, f"timing.extend_{key}", getattr(timing, f"extend_{key}"),
                              f"must be >= timing.{key} ({getattr(timing, key)}): the cap is below the base")
    if timing.extend_max_reps < timing.extend_min_reps:
        raise ConfigError(file, "timing.extend_max_reps", timing.extend_max_reps,
                          f"must be >= extend_min_reps ({timing.extend_min_reps})")
    suite = parse_dataclass(SuiteParams, data["suite"], file, "suite")
    check_backends(file, "suite.backends", suite.backends, tuple(BACKENDS))
    sweep = parse_dataclass(SweepParams, data["sweep"], file, "sweep")
    stored = parse_dataclass(StoredRunParams, data["stored_run"], file, "stored_run")
    bad_pattern = check_pattern(stored.files)
    if bad_pattern:
        raise ConfigError(file, "stored_run.files", stored.files, bad_pattern)
    judged = parse_judged(file, data["judged"], timing)
    anchors = {
        str(name): parse_dataclass(Anchor, raw, file, f"anchors.{name}")
        for name, raw in mapping(file, "anchors", data.get("anchors") or {}).items()
    }
    swept = sweep_workloads(file, sweep, config.workloads)
    listed = expand(file, "suite.workloads", suite.workloads, config)
    suite_wls = {w.name: w for w in (*listed, *(swept if suite.sweep else ()))}
    skip = data.get("skip_unread", [])
    if not isinstance(skip, list) or not all(isinstance(n, str) for n in skip):
        raise ConfigError(file, "skip_unread", skip, "a list of workload or set names")
    return BenchSettings(file=file, timing=timing, suite=suite, sweep=sweep, stored_run=stored, judged=judged,
                         anchors=MappingProxyType(anchors), sweep_workloads=swept,
                         suite_workloads=tuple(suite_wls.values()),
                         skip_unread=tuple(w.name for w in expand(file, "skip_unread", tuple(skip), config)))


def parse_judged(file: Path, raw: Any, timing: TimingParams) -> JudgedParams:
    """The minimums, which today's timing settings must be able to meet (else every verdict would be an ERROR)."""
    judged = parse_dataclass(JudgedParams, raw, file, "judged")
    for prefix in ("", "stored_"):
        rounds, groups = getattr(judged, f"{prefix}min_rounds"), getattr(judged, f"{prefix}min_spread_groups")
        if rounds < 2 * groups:
            raise ConfigError(file, f"judged.{prefix}min_rounds", rounds,
                              f"must be >= 2 x {prefix}min_spread_groups ({groups}) for a median per group")
    if -(-timing.min_reps // timing.calls_per_round) < judged.min_rounds:
        raise ConfigError(file, "judged.min_rounds", judged.min_rounds,
                          f"timing.min_reps ({timing.min_reps}) gives fewer rounds: no run could be judged")
    if timing.spread_groups < judged.min_spread_groups:
        raise ConfigError(file, "judged.min_spread_groups", judged.min_spread_groups,
                          f"above timing.spread_groups ({timing.spread_groups}): no run could be judged")
    return judged


def timing_dict(t: TimingParams) -> dict[str, Any]:
    return {f.name: getattr(t, f.name) for f in fields(t)}
