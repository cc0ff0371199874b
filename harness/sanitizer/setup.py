"""What every compute-sanitizer run of a gate shares: the tool, its version and Hopper options, the reviewed
suppressions, the run-cost model and the racecheck shapes (harness/gates/sanitizer.py `setup` finds them)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.sanitizer import shrink
from harness.sanitizer.cost import CostModel
from harness.sanitizer.suppressions import Suppression
from harness.schema import Workload


@dataclass(frozen=True)
class Setup:
    sanitizer: str
    suppressions: tuple[Suppression, ...]
    version: str
    hopper: dict[str, bool]
    cost: CostModel
    sms: int | None = None  # SMs of the GPU the driver runs on; None: unknown, or no racecheck is reduced
    min_tiles_per_sm: int = 0

    def shape(self, tool: str, wl: Workload) -> Workload:
        """The shape `tool` runs for `wl`: racecheck's may be reduced, every other tool's is the workload's own."""
        if tool != "racecheck" or not self.sms or not self.min_tiles_per_sm:
            return wl
        return shrink.racecheck_shape(wl, self.min_tiles_per_sm, self.sms)

    def shapes_note(self, workloads: list[Workload]) -> str:
        """One line on the racecheck shapes, for the details and the report."""
        if not self.min_tiles_per_sm:
            return "racecheck on every whole shape (racecheck_min_tiles_per_sm 0)"
        if not self.sms:
            return "racecheck on every whole shape: the GPU's SM count is unknown"
        n = sum(shrink.reduced(self.shape("racecheck", w), w) for w in workloads)
        return (f"racecheck on fewer batch entries and heads for {n} of {len(workloads)} workloads, >= "
                f"{self.min_tiles_per_sm} query tiles per SM of {self.sms} kept ({shrink.WHY})")
