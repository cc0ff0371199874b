"""Which (workload, backend) pairs a gate run leaves untimed: on the workloads gates/bench.yaml `skip_unread` names,
every baseline that no check of gates/phases.yaml reads there; and which paired ratios the checks judge, with
their spread limits, so the rounds can be extended where one is noisy (harness/bench/extend.py) (pure; no torch).

Why: the scaling sweep's batch-1 points (64K and 128K tokens, 50-410 ms a call) cost most of the perf group's GPU
time, and on them the cuDNN and FA3 columns are shown, never judged (perf-cudnn and perf-fa3 list them in
`report_workloads`; perf-fa2 judges FA2 there, scaling FlashCore against itself). A check reads a pair when the
gate's params say so (`reads`: FlashCore, each gated baseline and the regression's reference on each judged
workload); every gate of the configuration counts, whether or not this run runs it, so every run times the same
pairs and a gate never finds a pair it reads untimed. FlashCore is always timed (it is no baseline). `make bench`
and the stored run time everything (they use no selection).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from harness.bench.extend import Watch, strictest
from harness.bench.settings import BASELINES

if TYPE_CHECKING:
    from harness.bench.settings import BenchSettings
    from harness.schema import Config

UNTIMED = "not timed in a gate run: no check reads it on this workload (gates/bench.yaml skip_unread)"


class ReadsPairs(Protocol):
    def reads(self, config: Config, settings: BenchSettings) -> set[tuple[str, str]]: ...


class WatchesRatios(Protocol):
    def watches(self, config: Config, settings: BenchSettings) -> list[Watch]: ...


def watches(config: Config, settings: BenchSettings) -> tuple[Watch, ...]:
    """The paired ratios some check of some gate of the configuration judges (gates whose params declare
    `watches`), each at the strictest limit: every run extends by the same rule, whichever gate times a group first."""
    out: list[Watch] = []
    for spec in (g for p in config.phases for g in p.gates):
        judged = getattr(spec.params, "watches", None)
        if callable(judged):
            out += judged(config, settings)
    return strictest(out)


def read_pairs(config: Config, settings: BenchSettings) -> set[tuple[str, str]]:
    """The pairs some check of some gate of the configuration reads (gates whose params declare `reads`)."""
    out: set[tuple[str, str]] = set()
    for spec in (g for p in config.phases for g in p.gates):
        reads = getattr(spec.params, "reads", None)
        if callable(reads):
            out |= reads(config, settings)
    return out


def untimed(config: Config, settings: BenchSettings) -> frozenset[tuple[str, str]]:
    """The (workload, backend) pairs a gate run does not time: on the `skip_unread` workloads, each baseline that
    no check reads."""
    read = read_pairs(config, settings)
    return frozenset((w, b) for w in settings.skip_unread for b in BASELINES if (w, b) not in read)
