"""Shared test set-up: the `gpu` marker, skipped (and counted, with its reason) on machines without a GPU, and the
`nvcc` marker, skipped the same way without the CUDA compiler unless FLASHCORE_REQUIRE_NVCC=1 (then an error)."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import types
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import torch

from harness.gates.base import GateContext
from harness.schema import Config, GateSpec, Workload
from harness.support.gpu import cuda_unavailable_reason

# The perf and scaling gates' stand-in GPU: its fixtures (gpu_stand_in, config, stored, fp8_ceiling), every test file's.
pytest_plugins = ("perf_stand_in",)

REPO = Path(__file__).resolve().parent.parent
DRIVER = REPO / "build/flashcore_driver"


def load_bench(name: str) -> types.ModuleType:
    """bench/<name>.py as a module (the bench scripts are not a package), registered under `name` so that a script
    importing another (`from tile_timeline import ...`) finds the same one."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def build_host_program(directory: Path, name: str, source: str) -> Path:
    """`source` (a C++17 program that includes kernel/ headers' host halves) built with the system C++ compiler into
    directory/name; skips the test when there is no c++, g++ or clang++."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("needs a host C++ compiler (c++, g++ or clang++)")
    (directory / f"{name}.cpp").write_text(source)
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{REPO / 'kernel'}", str(directory / f"{name}.cpp"), "-o",
                    str(directory / name)], check=True)
    return directory / name


def run_driver(args: list[str]) -> subprocess.CompletedProcess[str]:
    """build/flashcore_driver with `args` (skips the test when it is not built)."""
    if not DRIVER.is_file():
        pytest.skip("build/flashcore_driver not built (make build)")
    return subprocess.run([str(DRIVER), *args], capture_output=True, text=True, timeout=300)
GPU_SKIP_REASON = "needs an H100"
NVCC_SKIP_REASON = ("needs nvcc (the CUDA compiler; no GPU needed): not on PATH and $NVCC unset. Install the CUDA "
                    "toolkit to run the kernel-build tests; FLASHCORE_REQUIRE_NVCC=1 makes its absence an error")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"gpu: {GPU_SKIP_REASON}")
    config.addinivalue_line("markers", f"nvcc: {NVCC_SKIP_REASON}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and cuda_unavailable_reason() is not None:
        skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
        for item in gpu_items:
            item.add_marker(skip)
    nvcc_items = [item for item in items if "nvcc" in item.keywords]
    if nvcc_items and shutil.which(os.environ.get("NVCC") or "nvcc") is None:
        if os.environ.get("FLASHCORE_REQUIRE_NVCC") == "1":
            raise pytest.UsageError(f"FLASHCORE_REQUIRE_NVCC=1 but nvcc is missing and {len(nvcc_items)} tests need "
                                    f"it: {NVCC_SKIP_REASON}")
        skip = pytest.mark.skip(reason=NVCC_SKIP_REASON)
        for item in nvcc_items:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _history_outside_the_checkout(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Gate runs in tests append to a throwaway history, never to the checkout's reports/history.sqlite."""
    os.environ["FLASHCORE_HISTORY"] = str(tmp_path_factory.mktemp("history") / "history.sqlite")


@pytest.fixture
def gates_dir(tmp_path: Path) -> Path:
    """A copy of the repository's gates/*.yaml that a test may edit."""
    out = tmp_path / "gates"
    shutil.copytree(REPO / "gates", out)
    return out


def make_context(run_dir: Path, name: str, params: object, workloads: tuple[Workload, ...] = (),
                 seed: int = 1234, repo_root: Path | None = None) -> GateContext:
    """A GateContext for one gate over the given workloads (no YAML involved)."""
    by_name = {w.name: w for w in workloads}
    config = Config(gates_dir=run_dir, workloads=MappingProxyType(by_name),
                    sets=MappingProxyType({"all": tuple(by_name)}), phases=())
    spec = GateSpec(name=name, phase=1, params=params)
    return GateContext(spec=spec, config=config, run_dir=run_dir, repo_root=repo_root or run_dir, seed=seed)


def workload(name: str, b: int = 2, hq: int = 2, hkv: int = 2, sq: int = 17, sk: int = 17, d: int = 64,
             dtype: str = "bf16", causal: bool = False) -> Workload:
    return Workload(name, b, hq, hkv, sq, sk, d, dtype, causal, "edge", "test")


# ---- stand-in flashcore modules for CPU tests of the kernel gates ----------------------------------
class FlashCoreError(ValueError):
    pass


class UnsupportedDeviceError(FlashCoreError):
    pass


def attention_fp32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                   leak: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain fp32 attention, [B,Sq,Hq,D] in, (out [B,Sq,Hq,D] fp32, lse [B,Hq,Sq]); `leak` shifts the causal mask."""
    sq, sk, group = q.shape[1], k.shape[1], q.shape[2] // k.shape[2]
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    kf, vf = kf.repeat_interleave(group, 1), vf.repeat_interleave(group, 1)
    s = qf @ kf.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        i = torch.arange(sq)[:, None]
        j = torch.arange(sk)[None, :]
        s = s.masked_fill(j > i + (sk - sq) + leak, -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return (p @ vf).transpose(1, 2), lse


def fake_flashcore(fault: str = "", calls: list[int] | None = None) -> types.ModuleType:
    """A module with flashcore's `attention` contract. `fault`: "" (correct), "leak" (a masked key leaks in),
    "unwritten" (last query row never written), "nan" (one NaN written), "noise" (every other call differs
    in one element), "reject" (raises FlashCoreError), "crash" (raises RuntimeError)."""
    count = calls if calls is not None else []

    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                  out: Any = None, lse: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        count.append(1)
        if fault == "reject":
            raise FlashCoreError("head dim 64 is not supported in this build")
        if fault == "crash":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        o, l_ = attention_fp32(q, k, v, causal, leak=1 if fault == "leak" else 0)
        rows = slice(None, -1) if fault == "unwritten" else slice(None)
        out[:, rows] = o[:, rows].to(out.dtype)
        lse[:, :, rows] = l_[:, :, rows]
        if fault == "nan":
            out[0, 0, 0, 0] = float("nan")
        if fault == "noise" and len(count) % 2 == 0:
            out[0, 0, 0, 0] += 1.0
        return out, lse

    module = types.ModuleType("fake_flashcore")
    module.attention = attention  # type: ignore[attr-defined]
    module.FlashCoreError = FlashCoreError  # type: ignore[attr-defined]
    module.UnsupportedDeviceError = UnsupportedDeviceError  # type: ignore[attr-defined]
    return module
