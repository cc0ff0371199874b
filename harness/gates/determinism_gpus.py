"""determinism-gpus (phase 7): the same inputs give the same bits on every GPU of the host.

Per workload, inputs are drawn once on the first GPU (fixed seed) and copied to each visible GPU. Two checks:
- bit_identical_default: flashcore.attention's out and LSE hash alike on every GPU of one kind (same name and SM
  count: the automatic split count depends on the SM count, so GPUs of different kinds may differ here; the
  details record whether they did);
- bit_identical_deterministic: with deterministic=True, every GPU and every `sm_margins` value gives one hash.
A host with fewer than `min_gpus` GPUs gets NOT_APPLICABLE with the reason: never a pass, left out of the run's
verdict. The verdicts are pure functions over the hashes (tested on the CPU); gates/shard.yaml runs this gate in
the parent of a sharded run, where every GPU is visible.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from harness.gates.base import FlashcoreGate, GateContext
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.schema import Workload, param
from harness.support import gpu


@dataclass(frozen=True)
class CrossGpuParams:
    workloads: tuple[str, ...] = param(workloads=True)
    sm_margins: tuple[int, ...] = param()  # deterministic mode: every margin on every GPU gives one result
    min_gpus: int = param(ge=2)


@dataclass(frozen=True)
class Device:
    index: int
    name: str
    sms: int

    @property
    def kind(self) -> str:
        return f"{self.name} ({self.sms} SMs)"


def verdict_same(subject: str, metric: str, hashes: Mapping[str, str], what: str) -> Check:
    """PASS when every labelled run hashed alike; FAIL naming the runs that differ from the first."""
    labels = list(hashes)
    if not labels:
        return Check(subject, metric, None, None, Status.ERROR, "==", message=f"no {what} result to compare")
    first = hashes[labels[0]]
    differ = [lbl for lbl in labels if hashes[lbl] != first]
    if differ:
        return Check(subject, metric, 1.0, 0.0, Status.FAIL, "==",
                     message=f"{what}: {', '.join(differ)} differ from {labels[0]} ({len(differ)} of {len(labels)})")
    return Check(subject, metric, 1.0, 1.0, Status.PASS, "==",
                 message=f"{what}: the same bits on {len(labels)} runs ({', '.join(labels)})")


def verdicts(subject: str, devices: Sequence[Device], default: Mapping[int, str],
             deterministic: Mapping[tuple[int, int], str]) -> tuple[list[Check], dict[str, Any]]:
    """The two checks of one workload from its hashes: default mode per GPU index, deterministic mode per
    (GPU index, sm_margin); and what differed between GPU kinds in default mode (recorded, not judged)."""
    kinds: dict[str, list[Device]] = {}
    for d in devices:
        kinds.setdefault(d.kind, []).append(d)
    checks = [verdict_same(subject, f"bit_identical_default[{kind}]",
                           {f"GPU {d.index}": default[d.index] for d in ds}, f"default mode on {kind}")
              for kind, ds in kinds.items()]
    checks.append(verdict_same(subject, "bit_identical_deterministic",
                               {f"GPU {i} sm_margin {m}": h for (i, m), h in deterministic.items()},
                               "deterministic=True, every GPU and sm_margin"))
    per_kind = {kind: default[ds[0].index] for kind, ds in kinds.items()}
    details = {"kinds": list(kinds), "default_same_across_kinds": len(set(per_kind.values())) <= 1}
    return checks, details


def result_hash(out: Any, lse: Any) -> str:
    """sha256 of out's and lse's bits (on the host)."""
    import torch

    h = hashlib.sha256()
    for t in (out, lse):
        h.update(t.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def devices_here() -> list[Device]:
    import torch

    return [Device(i, torch.cuda.get_device_name(i), torch.cuda.get_device_properties(i).multi_processor_count)
            for i in range(torch.cuda.device_count())]


def hashed_call(fc: ModuleType, wl: Workload, inputs: tuple[Any, Any, Any], device: str, **options: Any) -> str:
    """One call into fresh poisoned buffers (as every determinism gate), synchronized, hashed."""
    out, lse = gpu.poisoned_outputs(wl, device)
    gpu.call_kernel(fc, wl, *inputs, out, lse, **options)
    return result_hash(out, lse)


def measure(fc: ModuleType, wl: Workload, seed: int, devices: Sequence[Device],
            sm_margins: Sequence[int]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    # drawn once on the first GPU and copied (a copy is bit-exact): every GPU gets the same inputs. Drawn on the CPU,
    # prefill-d128's 200M bf16 values took ~10 s of the parent stage, before any GPU worker starts
    q, k, v = gpu.make_inputs(wl, seed, f"cuda:{devices[0].index}")
    default: dict[int, str] = {}
    deterministic: dict[tuple[int, int], str] = {}
    for d in devices:
        dev = f"cuda:{d.index}"
        inputs = (q.to(dev), k.to(dev), v.to(dev))
        default[d.index] = hashed_call(fc, wl, inputs, dev)
        for m in sm_margins:
            deterministic[(d.index, m)] = hashed_call(fc, wl, inputs, dev, deterministic=True, sm_margin=m)
        del inputs
    return default, deterministic


@register("determinism-gpus")
class CrossGpuDeterminismGate(FlashcoreGate):
    Params = CrossGpuParams
    selftest_none = ("needs two GPUs; its verdicts over per-GPU hashes are planted on the CPU: "
                     "tests/test_determinism_gpus.py")

    def measure(self, ctx: GateContext, fc: ModuleType) -> GateResult:
        p: CrossGpuParams = ctx.params
        devices = devices_here()
        if len(devices) < p.min_gpus:
            seen = ", ".join(d.kind for d in devices) or "none"
            return ctx.verdict_only(Status.NOT_APPLICABLE, f"{len(devices)} GPU visible ({seen}): the same bits on "
                                    f"every GPU needs {p.min_gpus} or more; not applicable on this host (not a pass)")
        checks: list[Check] = []
        details: dict[str, Any] = {"devices": [d.kind for d in devices], "sm_margins": list(p.sm_margins)}
        workloads = ctx.workloads()
        for i, wl in enumerate(workloads):
            ctx.step(f"{wl.name} ({i + 1}/{len(workloads)}) on {len(devices)} GPUs")
            seed = gpu.workload_seed(ctx.seed, ctx.spec.name, wl.name)
            default, deterministic = measure(fc, wl, seed, devices, p.sm_margins)
            new, info = verdicts(wl.name, devices, default, deterministic)
            checks += new
            details[wl.name] = {"shape": wl.label, "seed": seed, **info}
            gpu.free_memory()
        return ctx.result(checks, details=details)
