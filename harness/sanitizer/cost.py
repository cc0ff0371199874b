"""What compute-sanitizer runs cost, in seconds, from their tool and their workloads' sizes (gates/sanitizer-cost.yaml).

One process of the tool costs start_s[tool] (the tool attaching, the CUDA context, the module's instrumentation) plus,
for each workload it runs (a batch runs several: harness/sanitizer/batch.py), base_s[tool] + s_per_g_scores[tool] *
scores / 10^9, where `scores` is the attention's score elements (the
query-key pairs the kernel computes, over every batch and query head: B * Hq * Sq * Sk, causal counting the visible
pairs, a serving layout its own sequences). The coefficients are a least-squares fit per tool to the runs of a
measured gate run (`python -m harness.sanitizer.cost_fit`), each run timed under the stage's load, so the figures are
seconds of a run among the others. The model deals a sanitizer gate's workloads to its parts (harness/sanitizer/
parallel.py share) and orders each part's runs longest first (longest_first): the 20-70 s racechecks of the big
prefill shapes start first instead of last, where one of them alone was the part's tail.

Why score elements rather than multiply-adds: the tools check every shared-memory access and barrier of the
kernel's tiles, whose count follows the score tiles more than the head dim (racecheck on B4 H16 S8K: 24-43 s at head
dim 64, 128 and 256 in one run, in no order of the head dim); fitted to the same run, the score elements explain
more of the run times (R^2 0.67 against 0.55). The constant terms matter as much: a process's start makes even the
smallest shape cost 3-8 s alone, so one huge workload weighs a few small ones, never 10^5 of them (dealt by the
multiply-adds alone, one such workload once filled a part while the other part ran the other 70).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from harness.bench.flops import workload_flops
from harness.sanitizer.model import TOOLS
from harness.schema import ConfigError, Workload, read_yaml

COST_FILE = "gates/sanitizer-cost.yaml"  # relative to the repository root
_TOP_KEYS = ("evidence", "tools")
_TOOL_KEYS = ("start_s", "base_s", "s_per_g_scores")

Run = tuple[str, str]  # (tool, workload name)


def scores(wl: Workload) -> float:
    """Score elements of one forward call: FLOPs / (2 (d + dv)), i.e. B * Hq * pairs for a dense call (two GEMMs of
    2 * pairs * d FLOPs each), each serving sequence with its own lengths."""
    return workload_flops(wl) / (2 * (wl.head_dim + wl.dim_v))


@dataclass(frozen=True)
class ToolCost:
    start_s: float  # a process's seconds before any workload: the tool's start, the context, the instrumentation
    base_s: float  # a workload's seconds without any work: its buffers, inputs and launches
    s_per_g_scores: float  # seconds per 10^9 score elements


@dataclass(frozen=True)
class CostModel:
    tools: Mapping[str, ToolCost]
    evidence: str = ""  # the measured run the coefficients were fitted to

    def seconds(self, tool: str, wl: Workload) -> float:
        """A run of `wl` alone: its process's start and its own work."""
        return self.tools[tool].start_s + self.work(tool, wl)

    def work(self, tool: str, wl: Workload) -> float:
        """What `wl` adds to a process that runs it among others (a batch)."""
        c = self.tools[tool]
        return c.base_s + c.s_per_g_scores * scores(wl) / 1e9


def run_cost(model: CostModel, workloads: Mapping[str, Workload],
             shape: Callable[[str, Workload], Workload] | None = None) -> Callable[[str, str], float]:
    """(tool, workload name) -> the model's seconds for that run, of the shape `shape(tool, workload)` runs (the
    racecheck run's may be reduced: harness/sanitizer/shrink.py); the workload's own without `shape`."""
    if shape is None:
        return lambda tool, name: model.seconds(tool, workloads[name])
    return lambda tool, name: model.seconds(tool, shape(tool, workloads[name]))


def longest_first(plan: Sequence[Run], cost: Callable[[str, str], float]) -> list[int]:
    """The start order, as indices into `plan`: longest first by the model (LPT: with several at once, the long runs
    overlap the short ones instead of one long run finishing alone at the end); ties keep the plan's order."""
    return sorted(range(len(plan)), key=lambda i: -cost(*plan[i]))


def _number(file: Path, key: str, value: Any, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(file, key, value, "a finite number")
    if value < 0 or (positive and value == 0):
        raise ConfigError(file, key, value, "a number > 0" if positive else "a number >= 0")
    return float(value)


def load_cost_model(file: Path) -> CostModel:
    """Parse the file strictly: every tool of harness/sanitizer/model.py TOOLS once, each with `start_s` >= 0,
    `base_s` > 0 (no workload is free) and `s_per_g_scores` >= 0; anything else is a ConfigError naming file, key
    and value."""
    data = read_yaml(file, _TOP_KEYS)
    evidence = data.get("evidence", "")
    if not isinstance(evidence, str):
        raise ConfigError(file, "evidence", evidence, "a path (the results file the coefficients were fitted to)")
    raw = data.get("tools")
    if not isinstance(raw, dict):
        raise ConfigError(file, "tools", raw, f"a mapping tool: {{{', '.join(_TOOL_KEYS)}}}")
    for tool in raw:
        if tool not in TOOLS:
            raise ConfigError(file, f"tools.{tool}", raw[tool], f"unknown tool; allowed: {', '.join(TOOLS)}")
    tools: dict[str, ToolCost] = {}
    for tool in TOOLS:
        entry = raw.get(tool)
        if not isinstance(entry, dict):
            raise ConfigError(file, f"tools.{tool}", entry, f"a mapping with {' and '.join(_TOOL_KEYS)} (every tool "
                              "has a cost: a run without one could not be dealt or ordered)")
        for k in entry:
            if k not in _TOOL_KEYS:
                raise ConfigError(file, f"tools.{tool}.{k}", entry[k], f"unknown key; allowed: {', '.join(_TOOL_KEYS)}")
        missing = [k for k in _TOOL_KEYS if k not in entry]
        if missing:
            raise ConfigError(file, f"tools.{tool}.{missing[0]}", None, "missing")
        tools[tool] = ToolCost(_number(file, f"tools.{tool}.start_s", entry["start_s"], positive=False),
                               _number(file, f"tools.{tool}.base_s", entry["base_s"], positive=True),
                               _number(file, f"tools.{tool}.s_per_g_scores", entry["s_per_g_scores"], positive=False))
    return CostModel(MappingProxyType(tools), evidence)
