"""The GPU's clocks and power (NVML, else nvidia-smi), this process's GPU among several, and the kernels a call
launches (torch profiler): what a measurement records beside its times."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from harness.shard_plan import GPU_INDEX_ENV


def nvtx_span() -> Callable[[str], AbstractContextManager[Any]]:
    """A per-call NVTX range, chosen once (the rounds open one per call): nvtx's annotate in the flashcore
    domain, else torch's range, else nothing (a CPU-only torch)."""
    try:
        import nvtx

        return lambda name: nvtx.annotate(name, domain="flashcore")
    except ImportError:
        import torch

        return torch.cuda.nvtx.range if torch.cuda.is_available() else (lambda name: contextlib.nullcontext())


@contextlib.contextmanager
def _nvml() -> Iterator[Any]:
    import importlib

    pynvml: Any = importlib.import_module("pynvml")  # nvidia-ml-py (the harness extra); else nvidia-smi
    pynvml.nvmlInit()
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _handle(nv: Any) -> Any:
    """The NVML handle of this process's GPU. NVML numbers GPUs physically, whatever CUDA_VISIBLE_DEVICES says: a
    worker of a run over several GPUs names its own (FLASHCORE_GPU_INDEX, an index or a UUID), so a perf part on
    GPU 1 records GPU 1's clocks and power, not GPU 0's; else the first GPU."""
    device = os.environ.get(GPU_INDEX_ENV, "")
    if device.isdigit():
        return nv.nvmlDeviceGetHandleByIndex(int(device))
    return nv.nvmlDeviceGetHandleByUUID(device) if device else nv.nvmlDeviceGetHandleByIndex(0)


def read_clocks() -> dict[str, Any]:
    """SM and memory clocks (MHz), temperature and power of this process's GPU, read now; from NVML, else
    nvidia-smi."""
    try:
        with _nvml() as nv:
            h = _handle(nv)
            return {
                "sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                "mem_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
                "sm_max_mhz": nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
                "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                "power_w": round(nv.nvmlDeviceGetPowerUsage(h) / 1000, 1),
                "source": "nvml",
            }
    except Exception:  # noqa: BLE001 - NVML missing or refused: fall back to nvidia-smi
        from harness.env import nvidia_smi

        smi = nvidia_smi()
        return {"sm_mhz": smi["sm_clock_mhz"], "mem_mhz": smi["mem_clock_mhz"],
                "sm_max_mhz": smi["sm_clock_max_mhz"], "source": "nvidia-smi" if smi["driver"] else "none"}


def max_sm_clock_mhz() -> int | None:
    try:
        with _nvml() as nv:
            return int(nv.nvmlDeviceGetMaxClockInfo(_handle(nv), nv.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 - best effort
        return None


def kernel_names(fn: Callable[[], object], limit: int = 6) -> tuple[str, ...]:
    """Names of the GPU kernels one call of `fn` launches (torch profiler); () when the profiler fails."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    except Exception:  # noqa: BLE001 - evidence only; never fails a measurement
        return ()
    unique = list(dict.fromkeys(n for n in names if n))
    return tuple(n if len(n) <= 160 else n[:157] + "..." for n in unique[:limit])
