"""Parse `ncu --csv --page raw --print-units base` output. Pure text in, data out.

The raw page is one CSV row per profiled kernel launch (column `ID`), one column per metric, with a units
row right after the header (its `ID` cell is empty). What else may be in the text, and how it is read:

- lines before the header: ncu's `==PROF==` / `==WARNING==` / `==ERROR==` lines and, when the CSV was
  printed by the profiling run itself, the profiled program's own stdout (`RESULT status=ok ...`): kept as
  `preamble`; `==ERROR==` lines anywhere are kept as `errors` (see harness.ncu.diagnose);
- numbers with thousands separators ("3,731,328") -> 3731328.0; "n/a", "", "(160, 1, 1)", "PolicySpread" and
  any other non-numeric cell -> None in `metrics` (the text stays in `Launch.cells`);
- kernel names are quoted CSV cells and may hold commas and templates (`void f<128, Bf16>(KernelParams)`);
- several kernels and several launches per kernel: `group_kernels` keeps every launch, by kernel name, in
  order of first launch; gates judge the median over a kernel's launches.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.ncu.diagnose import explain, profiler_errors

NAME, BLOCK, GRID = "Kernel Name", "Block Size", "Grid Size"
REGISTERS = "launch__registers_per_thread"
SMEM = "launch__shared_mem_per_block"  # static + dynamic + the driver's reserved 1 KB
SMEM_DYNAMIC = "launch__shared_mem_per_block_dynamic"
DEVICE_PREFIX = "device__"  # device attributes: the same for every launch, reported once
_PLAIN = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_GROUPED = re.compile(r"[-+]?\d{1,3}(,\d{3})+(\.\d*)?")


class NcuParseError(ValueError):
    """The text holds no usable ncu raw CSV; the message says why (and how to fix a profiler error)."""


def to_number(cell: str) -> float | None:
    """A CSV cell as a number: '3,731,328' -> 3731328.0, '91.74' -> 91.74; anything else (n/a, text) -> None."""
    text = cell.strip()
    if _GROUPED.fullmatch(text):
        text = text.replace(",", "")
    elif not _PLAIN.fullmatch(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def is_metric(column: str) -> bool:
    """ncu metric names hold a double underscore (`dram__throughput.avg...`); the others are launch facts."""
    return "__" in column


@dataclass(frozen=True)
class Launch:
    """One profiled kernel launch: its raw cells by column and its metrics as numbers (None = not numeric)."""

    id: int
    cells: dict[str, str]
    metrics: dict[str, float | None]

    @property
    def kernel(self) -> str:
        return self.cells.get(NAME, "")

    def text(self, column: str) -> str:
        return self.cells.get(column, "")


@dataclass(frozen=True)
class Kernel:
    """Every profiled launch of one kernel (same name), in launch order."""

    name: str
    launches: tuple[Launch, ...]

    def values(self, metric: str) -> list[float | None]:
        return [launch.metrics.get(metric) for launch in self.launches]

    def median(self, metric: str) -> float | None:
        """Median over the launches where the metric is a number; None when it is in none of them."""
        return median_or_none(self.values(metric))

    def facts(self) -> dict[str, Any]:
        """Launch configuration of the first launch (the report's kernel line)."""
        first = self.launches[0]
        return {"name": self.name, "launches": len(self.launches), "ids": [x.id for x in self.launches],
                "grid": first.text(GRID), "block": first.text(BLOCK),
                "registers": _whole(first.metrics.get(REGISTERS)), "smem_per_block": _whole(first.metrics.get(SMEM)),
                "smem_dynamic": _whole(first.metrics.get(SMEM_DYNAMIC))}


@dataclass(frozen=True)
class NcuCsv:
    columns: tuple[str, ...]
    units: dict[str, str]
    launches: tuple[Launch, ...]
    preamble: tuple[str, ...] = ()  # non-CSV lines before the header
    errors: tuple[str, ...] = ()  # ==ERROR== lines anywhere in the text
    skipped: tuple[str, ...] = ()  # non-CSV lines after the header (program output)

    @property
    def metric_columns(self) -> tuple[str, ...]:
        return tuple(c for c in self.columns if is_metric(c) and not c.startswith(DEVICE_PREFIX))

    def has(self, metric: str) -> bool:
        return metric in self.columns

    def device(self) -> dict[str, str]:
        """Device attributes (`device__attribute_*`) of the first launch, as raw text."""
        if not self.launches:
            return {}
        cells = self.launches[0].cells
        return {c: cells[c] for c in self.columns if c.startswith(DEVICE_PREFIX)}


def short_name(name: str, width: int = 48) -> str:
    """`void attention_forward_kernel<128, Bf16>(KernelParams)` -> `attention_forward_kernel<128, Bf16>`."""
    base = name.removeprefix("void ").split("(", 1)[0] or name
    return base if len(base) <= width else base[: width - 3] + "..."


def _whole(x: float | None) -> float | int | None:
    return int(x) if x is not None and x.is_integer() else x


def median_or_none(values: Iterable[float | None]) -> float | None:
    numbers = [v for v in values if v is not None]
    return statistics.median(numbers) if numbers else None


def _header_index(lines: Sequence[str]) -> int | None:
    for i, line in enumerate(lines):
        if line.lstrip().startswith(('"ID",', "ID,")):
            return i
    return None


def _cells(line: str) -> list[str]:
    """One CSV line (ncu writes one record per line) as its cells."""
    return next(csv.reader([line]), [])


def _int(cell: str) -> int | None:
    try:
        return int(cell.strip())
    except ValueError:
        return None


def parse_csv(text: str) -> NcuCsv:
    """Parse ncu's raw-page CSV. Raises NcuParseError when there is no header (with the profiler's own error
    and its fix when ncu reported one) or when a launch row is cut short."""
    lines = text.splitlines()
    errors = tuple(profiler_errors(lines))
    start = _header_index(lines)
    if start is None:
        if errors:
            raise NcuParseError(explain(errors))
        raise NcuParseError('no ncu CSV header (a line starting with "ID",) in the text: '
                            "expected `ncu --csv --page raw` output")
    columns = tuple(_cells(lines[start]))
    units: dict[str, str] = {}
    launches: list[Launch] = []
    skipped: list[str] = []
    for number, line in enumerate(lines[start + 1:], start + 2):
        row = _cells(line)
        if line.startswith("==") or not any(cell.strip() for cell in row):
            continue  # ncu's own messages, blank lines
        launch_id = _int(row[0])
        if row[0].strip() == "" and not launches and not units and len(row) == len(columns):
            units = {c: u for c, u in zip(columns, row, strict=True) if u}
            continue
        if launch_id is None:
            skipped.append(line)  # the profiled program's output, not a launch
            continue
        if len(row) != len(columns):
            raise NcuParseError(f"line {number}: launch {launch_id} has {len(row)} cells, the header "
                                f"{len(columns)} (truncated CSV?)")
        cells = dict(zip(columns, row, strict=True))
        metrics = {c: to_number(v) for c, v in cells.items() if is_metric(c) and not c.startswith(DEVICE_PREFIX)}
        launches.append(Launch(launch_id, cells, metrics))
    return NcuCsv(columns, units, tuple(launches), tuple(lines[:start]), errors, tuple(skipped))


def group_kernels(launches: Iterable[Launch]) -> list[Kernel]:
    """Launches grouped by kernel name, kernels in order of their first launch."""
    by_name: dict[str, list[Launch]] = {}
    for launch in launches:
        by_name.setdefault(launch.kernel, []).append(launch)
    return [Kernel(name, tuple(group)) for name, group in by_name.items()]
