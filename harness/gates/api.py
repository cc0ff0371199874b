"""API gate: the host API rejects every bad input of `gates/api-cases.yaml` with the expected error and message
before anything reaches the GPU, accepts the valid-but-unusual ones with a correct result, and the GPU is still
usable afterwards.

Reject case: the call must raise the expected class (flashcore.<error> or a subclass) whose message matches the
case's regex; the C library must not be entered (flashcore.api.entry_calls()); every tensor passed (poisoned out
and lse included) must keep its bytes; torch.cuda.synchronize() must be clean. Accept case: exactly one kernel
launch (none for an empty input) and the correctness gate's rule against the fp32 reference (thresholds: the
`correctness` gate's entry in phases.yaml; verdicts: harness/gates/correctness.py). Last, a plain call after the
whole suite must still be correct (the context is not poisoned).
"""

from __future__ import annotations

import importlib
import math
import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

from harness.gates import correctness
from harness.gates.base import Gate, GateContext, SelfTest
from harness.gates.registry import register
from harness.results import Check, GateResult, Status
from harness.schema import PHASES, ConfigError, param
from harness.support import gpu
from harness.support.api_cases import ENTRY_KEYS, SERVING_KEYS, Case, CaseTable, Dims, IndexSpec, build, load_cases

AFTER_SUITE = "after-suite"


@dataclass(frozen=True)
class ApiParams:
    cases: str = param()  # the case table, relative to the repository root
    judge: str = param(default="correctness")  # the gate (in phases.yaml) whose thresholds judge accepted results


@dataclass(frozen=True)
class RejectOutcome:
    raised: tuple[str, ...]  # class names of the raised exception and its bases; () when nothing was raised
    message: str
    calls: int  # entries into the C library during the call
    changed: tuple[str, ...]  # arguments whose bytes changed
    sync_error: str = ""  # torch.cuda.synchronize() after the call: "" when clean


@dataclass(frozen=True)
class AcceptOutcome:
    error: str  # "Type: message" when the call raised, else ""
    calls: int
    measured: correctness.Measured | None = None  # expect: result
    empty_problems: tuple[str, ...] = ()  # expect: empty: what differs from the defined result


# ---- verdicts (pure) ------------------------------------------------------------------------------


def verdict_reject(case: Case, o: RejectOutcome) -> Check:
    problems = []
    if not o.raised:
        problems.append("accepted: no error was raised")
    elif case.error not in o.raised:
        problems.append(f"raised {o.raised[0]}, expected {case.error}: {o.message}")
    elif not re.search(case.match, o.message):
        problems.append(f"message {o.message!r} does not match /{case.match}/")
    if o.calls and case.raised_by == "call":
        problems.append(f"entered the C library {o.calls} time(s): the Python checks must catch it first")
    if o.changed:
        problems.append(f"wrote to {', '.join(o.changed)}")
    if o.sync_error:
        problems.append(f"the GPU reported an error afterwards: {o.sync_error}")
    ok = not problems
    message = f"{o.raised[0]}: {o.message}" if ok else "; ".join(problems)
    check = "rejected_before_launch" if case.raised_by == "call" else "named_by_check_errors"
    return Check(case.name, check, None, None, Status.PASS if ok else Status.FAIL, "==", message=message)


def verdict_accept(case: Case, o: AcceptOutcome, p: correctness.CorrectnessParams) -> list[Check]:
    if o.error:
        return [Check(case.name, "accepted", None, None, Status.FAIL, message=f"valid input rejected: {o.error}")]
    launches = 0 if case.expect == "empty" else 1
    checks = [Check(case.name, "kernel_launches", launches, o.calls,
                    Status.PASS if o.calls == launches else Status.FAIL, "==",
                    message=f"{o.calls} entries into the C library, expected {launches}")]
    if case.expect == "empty":
        bad = len(o.empty_problems)
        checks.append(Check(case.name, "defined_empty_result", 0, bad, Status.PASS if not bad else Status.FAIL, "==",
                            message="; ".join(o.empty_problems) or "empty outputs; out = 0 and lse = -inf"))
    elif o.measured is None:
        checks.append(Check(case.name, "result", None, None, Status.ERROR, message="no measurement was made"))
    else:
        checks.extend(correctness.verdicts(case.name, case.dims.dtype, o.measured, p))
    return checks


def judge_params(config_gates: tuple[Any, ...], name: str) -> correctness.CorrectnessParams | None:
    for spec in config_gates:
        if spec.name == name and isinstance(spec.params, correctness.CorrectnessParams):
            return spec.params
    return None


# ---- measuring (GPU) ------------------------------------------------------------------------------


def _bytes(t: Any) -> Any:
    """Every byte of the memory `t` views (its whole storage: an expanded view costs nothing to copy)."""
    import torch

    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).clone()


def _kwargs(case: Case, args: dict[str, Any]) -> dict[str, Any]:
    extra: dict[str, Any] = {k: args[k] for k in ("out", "lse", *ENTRY_KEYS) if k in args}
    verbatim = {k: v for k, v in case.call.items() if not isinstance(v, IndexSpec)}
    return {"causal": case.dims.causal, **extra, **verbatim}


def _call_entry(fc: ModuleType, case: Case, args: dict[str, Any]) -> Any:
    """The case's entry point on its arguments (FA3's names for the serving entries)."""
    q, k, v, kw = args.get("q"), args.get("k"), args.get("v"), _kwargs(case, args)
    if case.entry == "varlen":
        names = ("cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")
        return fc.flash_attn_varlen_func(q, k, v, *(kw.pop(n) for n in names), **kw)
    if case.entry == "kvcache":
        return fc.flash_attn_with_kvcache(q, k, v, **kw)
    if any(key in case.call for key in SERVING_KEYS):  # out= and lse= are attention's own: not passed there
        return fc.serving.dense(q, k, v, **{key: x for key, x in kw.items() if key not in ("out", "lse")})
    return fc.attention(q, k, v, **kw)


def _sync(device: str) -> None:
    """Wait for the GPU, so that an asynchronous fault surfaces here (no-op on the CPU, for the CPU tests)."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_reject(fc: ModuleType, api: ModuleType, case: Case, seed: int, device: str = "cuda") -> RejectOutcome:
    import torch

    args = build(case, device, seed, poisoned_outputs=True)
    tensors = {k: t for k, t in args.items() if isinstance(t, torch.Tensor) and t.device.type != "meta"}
    before = {k: _bytes(t) for k, t in tensors.items()}
    calls = api.entry_calls()
    raised: BaseException | None = None
    try:
        _call_entry(fc, case, args)
        if case.raised_by == "check_errors":  # the kernel found the bad index: the device error word names it
            fc.check_errors()
    except Exception as e:  # noqa: BLE001 - which exception it was is the verdict
        raised = e
    calls = api.entry_calls() - calls
    sync_error = ""
    try:
        _sync(device)
    except Exception as e:  # noqa: BLE001
        sync_error = f"{type(e).__name__}: {e}"
    changed = tuple(k for k, t in tensors.items() if not torch.equal(_bytes(t), before[k]))
    names = tuple(c.__name__ for c in type(raised).__mro__) if raised is not None else ()
    return RejectOutcome(names, str(raised) if raised is not None else "", calls, changed, sync_error)


def empty_problems(case: Case, out: Any, lse: Any) -> tuple[str, ...]:
    d = case.dims
    problems = []
    if tuple(out.shape) != (d.batch, d.seqlen_q, d.heads_q, d.head_dim):
        problems.append(f"out has shape {tuple(out.shape)}")
    if tuple(lse.shape) != (d.batch, d.heads_q, d.seqlen_q):
        problems.append(f"lse has shape {tuple(lse.shape)}")
    if out.numel() and bool((out != 0).any()):
        problems.append(f"{int((out != 0).sum())} out elements are not 0")
    if lse.numel() and bool((lse != -math.inf).any()):
        problems.append(f"{int((lse != -math.inf).sum())} lse elements are not -inf")
    return tuple(problems)


def run_accept(fc: ModuleType, api: ModuleType, case: Case, seed: int, p: correctness.CorrectnessParams,
               device: str = "cuda") -> AcceptOutcome:

    args = build(case, device, seed, poisoned_outputs=True)
    q, k, v, out, lse = (args[n] for n in ("q", "k", "v", "out", "lse"))
    calls = api.entry_calls()
    try:
        fc.attention(q, k, v, **_kwargs(case, args))
        _sync(device)
    except Exception as e:  # noqa: BLE001 - a rejected valid input is this case's verdict
        return AcceptOutcome(f"{type(e).__name__}: {e}", api.entry_calls() - calls)
    calls = api.entry_calls() - calls
    if case.expect == "empty":
        return AcceptOutcome("", calls, empty_problems=empty_problems(case, out, lse))
    measured = correctness.judge_output(q, k, v, out, lse, case.dims.causal, case.dims.dtype, seed, p)
    # A small output is judged over more input draws (the correctness gate's min_elements): the same call on
    # fresh inputs, pooled; only the first call counts for kernel_launches.
    for d in range(1, p.draws_for_elements(out.numel())):
        more = build(case, device, (seed + d) & 0x7FFFFFFF, poisoned_outputs=True)
        fc.attention(more["q"], more["k"], more["v"], **_kwargs(case, more))
        _sync(device)
        measured = correctness.pool(measured, correctness.judge_output(
            more["q"], more["k"], more["v"], more["out"], more["lse"], case.dims.causal, case.dims.dtype, seed, p))
    return AcceptOutcome("", calls, measured)


def after_suite_case(defaults: Dims) -> Case:
    """A plain call at the table's default shape: must still be correct after every other case."""
    return Case(AFTER_SUITE, "accept", "a plain call after the whole suite", defaults, MappingProxyType({}),
                MappingProxyType({}))


def check_cases(ctx: GateContext, fc: ModuleType, api: ModuleType, table: CaseTable,
                p: correctness.CorrectnessParams, devices: int, device: str = "cuda") -> GateResult:
    """Every case in order (rejects, accepts), then the plain call; one case's crash is that case's ERROR."""
    checks: list[Check] = []
    details: dict[str, Any] = {"cases": {}}
    suite = [*table.cases, after_suite_case(table.defaults)]
    for i, case in enumerate(suite):
        if case.min_devices > devices:  # the question does not arise here: shown with why, never a silent skip
            why = f"needs {case.min_devices} GPUs, this host has {devices}"
            checks.append(Check(case.name, "devices", float(case.min_devices), float(devices),
                                Status.NOT_APPLICABLE, comparison=">=", message=why))
            details["cases"][case.name] = {"kind": case.kind, "why": case.why, "verdicts": {"devices": "n/a"},
                                           "message": why}
            continue
        ctx.step(f"{case.kind} {case.name} ({i + 1}/{len(suite)})")
        seed = gpu.workload_seed(ctx.seed, ctx.spec.name, case.name)
        try:
            if case.kind == "reject":
                new = [verdict_reject(case, run_reject(fc, api, case, seed, device))]
            else:
                new = verdict_accept(case, run_accept(fc, api, case, seed, p, device), p)
        except Exception as e:  # noqa: BLE001 - the harness failing to build a case is an ERROR, not a verdict
            ctx.log(f"{case.name}:\n{traceback.format_exc()}")
            new = [Check(case.name, "run", None, None, Status.ERROR, message=f"{type(e).__name__}: {e}")]
        finally:
            gpu.free_memory()
        checks.extend(new)
        details["cases"][case.name] = {"kind": case.kind, "why": case.why, "seed": seed,
                                       "verdicts": {c.metric: c.status.value for c in new},
                                       "message": "; ".join(c.message for c in new if c.message)}
        ctx.log(f"{case.name}: {details['cases'][case.name]}")
    return ctx.result(checks, details=details)


@register("api")
class ApiGate(Gate):
    Params = ApiParams
    needs_gpu = True
    selftests = (SelfTest("api-no-layout-check", "validate-off", "layout",
                          "flashcore.validate.layout is a no-op: misaligned, odd-strided and broadcast inputs are no "
                          "longer rejected before the library"),)

    def run(self, ctx: GateContext) -> GateResult:
        reason = gpu.cuda_unavailable_reason()
        if reason is not None:
            return ctx.verdict_only(Status.NOT_RUN, reason)
        params: ApiParams = ctx.params
        judge = judge_params(ctx.config.gates_through(max(PHASES)), params.judge)
        if judge is None:
            return ctx.verdict_only(Status.ERROR, f"no {params.judge!r} correctness gate in phases.yaml to judge "
                                                  "accepted results by")
        try:
            table = load_cases(ctx.repo_root / Path(params.cases))
        except ConfigError as e:
            return ctx.verdict_only(Status.ERROR, f"bad case table: {e}")
        try:
            fc = gpu.load_flashcore(ctx.fault)
            api = importlib.import_module("flashcore.api")
        except (gpu.FlashcoreUnavailable, ImportError) as e:
            return ctx.verdict_only(Status.ERROR, str(e))
        if not callable(getattr(api, "entry_calls", None)):
            return ctx.verdict_only(Status.ERROR, "flashcore.api.entry_calls() is missing: launches cannot be counted")
        import torch

        major, minor = torch.cuda.get_device_capability(0)
        if (major, minor) != (9, 0):
            return ctx.verdict_only(Status.ERROR, f"{torch.cuda.get_device_name(0)} is SM {major}.{minor}: "
                                                  "FlashCore's kernel needs SM 9.0, so it was not tested here")
        return check_cases(ctx, fc, api, table, judge, torch.cuda.device_count())
