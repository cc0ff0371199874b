"""The environment a run happened in: GPU, driver, CUDA, torch, nvcc, clocks, host, git. Every value is
null when its tool is absent; collecting never raises."""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

_SMI_FIELDS = ("name", "driver_version", "clocks.sm", "clocks.max.sm", "clocks.mem")


def find_cuda_tool(name: str) -> str | None:
    """A CUDA tool on PATH, else under $CUDA_HOME/bin or /usr/local/cuda/bin."""
    found = shutil.which(name)
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / name).is_file():
            return str(Path(root) / "bin" / name)
    return None


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    """stdout of a command, or None when it is missing, fails or hangs."""
    env = os.environ | {"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}  # git: never take the index lock
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=20, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _int(text: str | None) -> int | None:
    try:
        return int(float(text)) if text is not None else None
    except ValueError:
        return None


def query_gpu(fields: tuple[str, ...], device: str | None = None) -> dict[str, str]:
    """nvidia-smi --query-gpu `fields` of one GPU (`device`: an index or UUID, physical numbering; None: the
    first); {} when nvidia-smi is missing, fails or answers otherwise."""
    out = _run(["nvidia-smi", *(["-i", device] if device is not None else []), f"--query-gpu={','.join(fields)}",
                "--format=csv,noheader,nounits"])
    values = [v.strip() for v in out.splitlines()[0].split(",")] if out else []
    return dict(zip(fields, values, strict=True)) if len(values) == len(fields) else {}


def nvidia_smi() -> dict[str, Any]:
    """First GPU's name, driver and clocks (MHz) from nvidia-smi; nulls without it."""
    got = query_gpu(_SMI_FIELDS)
    return {
        "gpu_smi": got.get("name"),
        "driver": got.get("driver_version"),
        "sm_clock_mhz": _int(got.get("clocks.sm")),
        "sm_clock_max_mhz": _int(got.get("clocks.max.sm")),
        "mem_clock_mhz": _int(got.get("clocks.mem")),
    }


def nvcc_version() -> str | None:
    """`12.8.93` from `nvcc --version` (`Cuda compilation tools, release 12.8, V12.8.93`)."""
    nvcc = find_cuda_tool("nvcc")
    out = _run([nvcc, "--version"]) if nvcc else None
    m = re.search(r"V(\d+\.\d+\.\d+)", out or "") or re.search(r"release (\d+\.\d+)", out or "")
    return m.group(1) if m else None


def torch_info() -> dict[str, Any]:
    info: dict[str, Any] = {"torch": None, "cuda_runtime": None, "gpu": None, "gpu_capability": None, "gpu_count": 0}
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda_runtime"] = torch.version.cuda
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
            info["gpu_capability"] = "{}.{}".format(*torch.cuda.get_device_capability(0))
            info["gpu_count"] = torch.cuda.device_count()
            # with the name, the GPU model a stored run belongs to (harness/bench/stored.py)
            info["gpu_sm_count"] = torch.cuda.get_device_properties(0).multi_processor_count
    except Exception:  # noqa: BLE001, S110 - environment facts are best effort
        pass
    return info


def git_info(repo_root: Path) -> dict[str, Any]:
    """Commit, dirty flag and branch from git. A tree copied without its .git (e.g. exported with `git archive` to
    a lent GPU host, possibly inside another checkout) names its commit in FLASHCORE_GIT_COMMIT /
    FLASHCORE_GIT_DIRTY, which then win over whatever git finds; `git_source` says which one was used."""
    if os.environ.get("FLASHCORE_GIT_COMMIT"):
        return {
            "git_commit": os.environ["FLASHCORE_GIT_COMMIT"],
            "git_dirty": os.environ.get("FLASHCORE_GIT_DIRTY", "unknown") == "1",
            "git_branch": None,
            "git_source": "FLASHCORE_GIT_COMMIT (tree copied without .git)",
        }
    commit = _run(["git", "rev-parse", "HEAD"], cwd=repo_root)
    status = _run(["git", "status", "--porcelain"], cwd=repo_root)
    return {
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
        "git_branch": _run(["git", "symbolic-ref", "--short", "-q", "HEAD"], cwd=repo_root),
        "git_source": "git",
    }


def flashcore_variables(environ: dict[str, str] | None = None) -> dict[str, str] | str:
    """Every FLASHCORE_* variable this process sees (FLASHCORE_TUNE=0 or FLASHCORE_TUNE_TABLE change what the
    library runs), or "none set": an empty mapping would leave no line in the report."""
    got = {k: v for k, v in sorted((os.environ if environ is None else environ).items()) if k.startswith("FLASHCORE_")}
    return got or "none set"


def collect(repo_root: Path) -> dict[str, Any]:
    """Every fact a reviewer needs to trust (or reproduce) a run."""
    env: dict[str, Any] = {}
    env.update(torch_info())
    smi = nvidia_smi()
    env["gpu"] = env["gpu"] or smi.pop("gpu_smi")
    smi.pop("gpu_smi", None)
    env.update(smi)
    env["nvcc"] = nvcc_version()
    env["hostname"] = socket.gethostname()
    env["python"] = platform.python_version()
    env["platform"] = platform.platform()
    env.update(git_info(repo_root))
    env["utc_time"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    env["flashcore_env"] = flashcore_variables()
    return env
