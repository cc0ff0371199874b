"""Whether one workload's parsed ncu CSV is the profile the gate asked for, before any number in it is judged. Pure.

The gate asked ncu for `launch_count` launches of the kernels its `kernel_filter` names, each metric in its base
unit. A CSV that holds anything else cannot back a verdict, whatever its numbers say: each of these is an ERROR
naming what is wrong (never dropped, never a pass):
- a launch of a kernel the filter does not name (the CSV is not of the kernel under test);
- a kernel with another number of launches than `launch_count` (one launch where three were configured);
- a metric in another unit than it needs (harness/ncu/units.py), or a value it cannot take (1e9 "%");
- for the metrics `exact` names (the ones a verdict reads), a launch where it is not a number (2 of 3 `n/a`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.ncu.parse import Kernel, NcuCsv, group_kernels, short_name
from harness.ncu.units import unit_problem, value_problem
from harness.results import Check, Status


def function_name(kernel: str) -> str:
    """What ncu's `--kernel-name-base function` matches the filter against: the name without its return type,
    namespaces, template arguments and parameters. `void ns::attention<64, ns::Fp16>(P)` -> `attention`."""
    text = kernel.strip().removeprefix("void ")
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):  # the first `<` or `(` outside any bracket ends the qualified name
        if ch in "<(" and depth == 0:
            cut = i
            break
    return text[:cut].rsplit("::", 1)[-1].strip()


def named_by(kernel: str, kernel_filter: str) -> bool:
    return re.search(kernel_filter, function_name(kernel)) is not None


def foreign_kernels(csv: NcuCsv, kernel_filter: str) -> list[Kernel]:
    """Kernels in the CSV that the filter does not name."""
    return [k for k in group_kernels(csv.launches) if not named_by(k.name, kernel_filter)]


def _launches(values: Sequence[float | None]) -> str:
    return ", ".join("n/a" if v is None else f"{v:g}" for v in values)


def kernel_problems(kernel: Kernel, metrics: Sequence[str], exact: Sequence[str], launch_count: int,
                    units: dict[str, str]) -> list[tuple[str, str]]:
    """(metric, why) of each way this kernel's launches are not the profile asked for."""
    out: list[tuple[str, str]] = []
    n = len(kernel.launches)
    if n != launch_count:
        out.append(("launch_count", f"{n} launch{'es' if n != 1 else ''} profiled, launch_count is {launch_count}: "
                    "the median is not over the launches the gate asked for"))
    for metric in dict.fromkeys(metrics):
        unit = units.get(metric, "")
        if why := unit_problem(metric, unit):
            out.append((metric, why))
            continue
        values = kernel.values(metric)
        bad = [why for v in values if v is not None and (why := value_problem(metric, unit, v))]
        if bad:
            out.append((metric, bad[0]))
        numeric = sum(v is not None for v in values)
        if metric in exact and numeric not in (0, len(values)):  # none at all: the verdict's own ERROR says so
            out.append((metric, f"a number in {numeric} of {len(values)} launches ({_launches(values)}): "
                        f"every launch counted must be measured"))
    return out


def subject_of(subject: str, kernel: Kernel, kernels: Sequence[Kernel]) -> str:
    """The check's subject: the workload, with the kernel's name when the CSV holds several kernels."""
    return subject if len(kernels) == 1 else f"{subject} [{short_name(kernel.name)}]"


def foreign_check(subject: str, kernel: Kernel, kernel_filter: str) -> Check:
    n = len(kernel.launches)
    return Check(subject, "kernel_filter", None, None, Status.ERROR,
                 message=f"{n} launch{'es' if n != 1 else ''} of {short_name(kernel.name)}, a kernel "
                 f"regex:{kernel_filter} does not name: the profile is not of the kernel under test")


@dataclass(frozen=True)
class Screened:
    """One kernel of the CSV, its check subject, and why it cannot be judged (neither set: it can)."""

    subject: str
    kernel: Kernel
    foreign: Check | None  # the ERROR for a kernel the filter does not name
    problems: tuple[tuple[str, str], ...]  # (metric, why) of a named kernel


def screen(subject: str, csv: NcuCsv, metrics: Sequence[str], exact: Sequence[str], kernel_filter: str,
           launch_count: int) -> list[Screened]:
    """Every kernel of the CSV, screened against the profile the gate asked for."""
    kernels = group_kernels(csv.launches)
    out: list[Screened] = []
    for k in kernels:
        where = subject_of(subject, k, kernels)
        if not named_by(k.name, kernel_filter):
            out.append(Screened(where, k, foreign_check(where, k, kernel_filter), ()))
        else:
            out.append(Screened(where, k, None, tuple(kernel_problems(k, metrics, exact, launch_count, csv.units))))
    return out


def profile_checks(subject: str, csv: NcuCsv, metrics: Sequence[str], exact: Sequence[str], kernel_filter: str,
                   launch_count: int) -> list[Check]:
    """One ERROR check per problem of every kernel in the CSV; [] when it is the profile the gate asked for."""
    out: list[Check] = []
    for s in screen(subject, csv, metrics, exact, kernel_filter, launch_count):
        out += [s.foreign] if s.foreign else [Check(s.subject, metric, None, None, Status.ERROR, message=why)
                                              for metric, why in s.problems]
    return out
