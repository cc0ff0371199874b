"""Profile the standalone driver with the ncu CLI for one workload, then read the report back as CSV.

Two ncu calls per workload, so the profiled program's stdout never mixes into the CSV:
  1. ncu --metrics ... [--section ...] --kernel-name regex:<filter> --launch-skip N --launch-count M
         --clock-control none --export logs/<gate>/<workload>.ncu-rep build/flashcore_driver <workload args>
  2. ncu --import logs/<gate>/<workload>.ncu-rep --csv --page raw --print-units base > <workload>.csv
Both outputs go to logs/<gate>/<workload>.ncu.log; the .ncu-rep stays as an artifact (open it in ncu-ui). Gates that
ask for the same profile share one (harness/ncu/shared.py): it is stored under the gate that ran it.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.driver_args import driver_args
from harness.env import find_cuda_tool
from harness.ncu.diagnose import explain, no_kernels_profiled, profiler_errors
from harness.ncu.parse import NcuCsv, NcuParseError, parse_csv
from harness.ncu.units import unknown_metric
from harness.schema import Workload, param

if TYPE_CHECKING:  # a runtime import would be circular: harness.gates imports the ncu gates, which import this
    from harness.gates.base import GateContext

CLOCK_CONTROL = ("none", "base", "reset")


@dataclass(frozen=True, kw_only=True)
class NcuParams:
    """What every ncu gate profiles, and how (gates/phases.yaml)."""

    workloads: tuple[str, ...] = param(workloads=True, serving=True)  # the driver runs every layout
    kernel_filter: str = param()  # regex on the kernel's function name: ncu --kernel-name regex:<this>
    metrics: tuple[str, ...] = param(check=unknown_metric)  # collected with --metrics (shown in the report)
    sections: tuple[str, ...] = param(default=())  # collected with --section, e.g. WarpStateStats
    launch_skip: int = param(ge=0)  # matching launches skipped first (warm-up)
    launch_count: int = param(ge=1)  # matching launches profiled; verdicts use their median
    clock_control: str = param(default="none", choices=CLOCK_CONTROL)  # none: leave a shared GPU's clocks alone
    timeout_s: int = param(gt=0)  # per ncu call, per workload
    driver: str = param(default="build/flashcore_driver")  # relative to the repository root
    driver_args: tuple[str, ...] = param(default=())  # extra driver flags, e.g. [--seed, "7"]
    ncu: str = param(default="ncu")  # a name (PATH, $CUDA_HOME/bin) or a path

    def profiled(self) -> tuple[str, ...]:
        """What the gate collects with --metrics; a gate adds the metrics it judges."""
        return tuple(dict.fromkeys(self.metrics))


@dataclass(frozen=True)
class Profile:
    """One workload's profile: the parsed CSV, or why there is none (`error`, with the fix when known)."""

    csv: NcuCsv | None
    error: str
    logs: tuple[str, ...]  # paths relative to the run directory
    timed_out: bool = False


# ---- command lines (pure) -------------------------------------------------------------------------


def driver_command(driver: str, wl: Workload, iters: int, fault: int = 0, extra: Sequence[str] = ()) -> list[str]:
    return [driver, *driver_args(wl, iters=iters, fault=fault, extra=extra)]  # fault: test-only (selftest)


def profile_command(ncu: str, p: NcuParams, metrics: Sequence[str], export: Path, program: Sequence[str]) -> list[str]:
    cmd = [ncu, "--metrics", ",".join(dict.fromkeys(metrics))]
    for section in p.sections:
        cmd += ["--section", section]
    return cmd + ["--kernel-name-base", "function", "--kernel-name", f"regex:{p.kernel_filter}",
                  "--launch-skip", str(p.launch_skip), "--launch-count", str(p.launch_count),
                  "--clock-control", p.clock_control, "--export", str(export), "--force-overwrite", *program]


def import_command(ncu: str, report: Path) -> list[str]:
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]


def parse_version(text: str) -> str:
    """'Version 2025.3.1.0 (build 36398880) (public-release)' -> '2025.3.1.0'; '' when absent."""
    m = re.search(r"Version\s+(\S+)", text)
    return m.group(1) if m else ""


# ---- running --------------------------------------------------------------------------------------


def _run(cmd: Sequence[str], timeout_s: int, cwd: Path) -> tuple[int | None, str, str]:
    """(exit code or None on timeout, stdout, stderr). On timeout the whole process group (ncu and the
    program it profiles) is killed."""
    proc = subprocess.Popen(list(cmd), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, out, err


def locate(ctx: GateContext, p: NcuParams) -> tuple[str, Path] | str:
    """(ncu, driver) paths, or why the gate cannot run."""
    ncu = p.ncu if "/" in p.ncu else find_cuda_tool(p.ncu)
    if ncu is None or not Path(ncu).is_file():
        return (f"{p.ncu} not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): install Nsight Compute "
                "or set `ncu:` in gates/phases.yaml")
    driver = ctx.repo_root / p.driver
    if not driver.is_file():
        return f"{p.driver} not found: run `make build` first"
    return ncu, driver


def ncu_version(ncu: str, cwd: Path) -> str:
    try:
        rc, out, err = _run([ncu, "--version"], 60, cwd)
    except OSError:
        return ""
    return parse_version(out + err) if rc == 0 else ""


def _log(path: Path, cmd: Sequence[str], rc: int | None, out: str, err: str) -> None:
    with path.open("a") as f:
        f.write(f"$ {shlex.join(cmd)}\n(exit {'timeout' if rc is None else rc})\n"
                f"--- stdout ---\n{out}\n--- stderr ---\n{err}\n")


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


def profile(ctx: GateContext, wl: Workload, p: NcuParams, metrics: Sequence[str], ncu: str, driver: Path,
            stem: str = "") -> Profile:
    """Profile one workload (ncu run + import) into `stem`.* (default logs/<gate>/<workload>) and parse the CSV;
    never raises for a tool failure."""
    stem = stem or f"logs/{ctx.spec.name}/{wl.name}"
    rep, csv_file, log = ctx.run_dir / f"{stem}.ncu-rep", ctx.run_dir / f"{stem}.csv", ctx.run_dir / f"{stem}.ncu.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    logs = [f"{stem}.ncu.log"]
    program = driver_command(str(driver), wl, p.launch_skip + p.launch_count, ctx.fault, p.driver_args)
    cmd = profile_command(ncu, p, metrics, rep, program)
    rc, out, err = _run(cmd, p.timeout_s, ctx.repo_root)
    _log(log, cmd, rc, out, err)
    text = out + "\n" + err
    errors = profiler_errors(text.splitlines())
    if errors:
        return Profile(None, explain(errors), tuple(logs))
    if rc is None:
        return Profile(None, f"ncu ran past {p.timeout_s} s (timeout_s) profiling {wl.name}", tuple(logs), True)
    if no_kernels_profiled(text) or not rep.is_file():
        return Profile(None, f"zero kernel launches matched regex:{p.kernel_filter} (ncu: no kernels were "
                       "profiled; check kernel_filter and launch_skip)", tuple(logs))
    logs.append(f"{stem}.ncu-rep")
    if rc != 0:
        return Profile(None, f"ncu exited {rc}: {_tail(text)}", tuple(logs))
    cmd = import_command(ncu, rep)
    rc, out, err = _run(cmd, p.timeout_s, ctx.repo_root)
    _log(log, cmd, rc, "(written to the .csv beside this log)" if rc == 0 else out, err)
    csv_file.write_text(out)
    logs.append(f"{stem}.csv")
    errors = profiler_errors(err.splitlines())
    if rc != 0 or errors:
        why = explain(errors) if errors else f"exit {'timeout' if rc is None else rc}: {_tail(err)}"
        return Profile(None, f"ncu --import failed: {why}", tuple(logs))
    try:
        return Profile(parse_csv(out), "", tuple(logs))
    except NcuParseError as e:
        return Profile(None, f"{csv_file.name}: {e}", tuple(logs))
