"""What went wrong in an ncu run, from its output text, and how to fix it. Pure.

ncu reports problems as `==ERROR== ...` lines (on stdout or stderr, mixed with the profiled program's output)
and an empty selection as `==WARNING== No kernels were profiled.`; either way the gate cannot judge: ERROR.
"""

from __future__ import annotations

from collections.abc import Iterable

ERROR_PREFIX = "==ERROR=="
NO_KERNELS = "No kernels were profiled"

# Known error text -> the fix, appended to the gate's message.
FIXES = (
    ("ERR_NVGPUCTRPERM",
     "this user may not read the GPU performance counters. Run the gate as root (or with CAP_SYS_ADMIN; "
     "CAP_PERFMON from driver R565), or let every user profile: load the driver with "
     "NVreg_RestrictProfilingToAdminUsers=0 (`options nvidia NVreg_RestrictProfilingToAdminUsers=0` in "
     "/etc/modprobe.d/, then reload the driver or reboot); in a container, enable it on the host. "
     "See ci/README.md and https://developer.nvidia.com/ERR_NVGPUCTRPERM"),
    ("Failed to find metric",
     "a metric named in gates/phases.yaml is unknown to this ncu: `ncu --query-metrics` lists the names"),
    ("did not match any section",
     "a section named in gates/phases.yaml is unknown to this ncu: `ncu --list-sections` lists them"),
    ("returned an error code",
     "the profiled driver failed: its RESULT line and stderr are in the gate's ncu log"),
)


def profiler_errors(lines: Iterable[str]) -> list[str]:
    """ncu's `==ERROR==` lines, stripped."""
    return [line.strip() for line in lines if line.lstrip().startswith(ERROR_PREFIX)]


def no_kernels_profiled(text: str) -> bool:
    return NO_KERNELS in text


def explain(errors: Iterable[str]) -> str:
    """The errors on one line, followed by the fix of each known one."""
    errors = list(errors)
    shown = " | ".join(errors[:3]) + (f" (+{len(errors) - 3} more)" if len(errors) > 3 else "")
    fixes = [fix for key, fix in FIXES if any(key in e for e in errors)]
    text = f"ncu reported: {shown}"
    return text + (" -- fix: " + " ".join(fixes) if fixes else "")
