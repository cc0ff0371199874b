"""API gate: the case table, the argument builder, the pure verdicts, and the whole gate loop on the CPU with a
stand-in flashcore (the real checks + the SDPA fallback); on the H100 (`gpu`) the real gate must pass."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
from pathlib import Path
from typing import Any

import pytest
import torch

import flashcore
from flashcore import check, fallback, head_dims
from flashcore.call import Call
from harness.config import load_config
from harness.gates import api as api_gate
from harness.gates import correctness
from harness.results import Status
from harness.schema import ConfigError
from harness.support import gpu, reference
from harness.support.api_cases import Case, CaseTable, build, load_cases
from tests.conftest import REPO, make_context

TABLE = REPO / "gates/api-cases.yaml"


@pytest.fixture(scope="module")
def table() -> CaseTable:
    return load_cases(TABLE)


@pytest.fixture(scope="module")
def judge() -> correctness.CorrectnessParams:
    p = api_gate.judge_params(load_config(REPO / "gates").gates_through(7), "correctness")
    assert p is not None
    return p


def cpu_cases(table: CaseTable) -> CaseTable:
    """The cases that mean the same on the CPU: no explicit device, one device, no kernel needed (bad index data is
    found by the kernel)."""
    keep = [c for c in table.cases if c.min_devices == 1 and c.raised_by == "call"
            and all(s.device == "cuda" for s in c.tensors.values())
            and all(getattr(x, "device", "cuda") == "cuda" for x in c.call.values())]
    return dataclasses.replace(table, cases=tuple(keep))


# ---- the table ------------------------------------------------------------------------------------


def test_the_table_covers_the_issue_list(table: CaseTable) -> None:
    names = {c.name for c in table.cases}
    for must in ("q-on-cpu", "q-float32", "k-dtype-differs", "q-rank-3", "batch-mismatch", "heads-not-a-multiple",
                 "head-dim-96", "q-last-dim-strided", "q-misaligned", "k-odd-seq-stride", "scale-nan", "scale-inf",
                 "out-wrong-shape", "out-wrong-dtype", "out-on-cpu", "out-is-q", "lse-wrong-shape",
                 "transposed-bhsd", "padded-heads", "decode-sq1", "s1", "huge-batch-decode", "gqa-4x-sq-ne-sk",
                 "empty-sq", "empty-sk",
                 # each serving argument's bad dtype / shape / device / value
                 "varlen-cu-seqlens-int64", "varlen-cu-seqlens-on-cpu", "varlen-cu-seqlens-lengths-differ",
                 "varlen-max-seqlen-negative", "varlen-seqused-k-length", "varlen-window-bad", "cache-seqlens-float",
                 "cache-seqlens-length", "cache-batch-idx-int64", "paged-table-int64", "paged-table-rows",
                 "paged-page-size-0"):
        assert must in names
    for c in table.cases:
        if c.kind == "reject":
            assert issubclass(getattr(flashcore, c.error), flashcore.FlashCoreError)
    assert table.defaults.head_dim in head_dims.SUPPORTED


BASE_TABLE = {"defaults": "{batch: 1, seqlen_q: 8, seqlen_k: 8, heads_q: 1, heads_kv: 1, head_dim: 64, dtype: bf16}",
              "reject": "{r: {why: w, error: FlashCoreError, match: a}}", "accept": "{a: {why: w}}"}


def write_table(tmp_path: Path, **sections: str) -> Path:
    file = tmp_path / "cases.yaml"
    file.write_text("".join(f"{k}: {v}\n" for k, v in {**BASE_TABLE, **sections}.items()))
    return file


@pytest.mark.parametrize("section, body, key", [
    ("reject", "{x: {why: w, error: FlashCoreError, match: a, colour: red}}", "reject.x.colour"),
    ("reject", "{x: {why: w, error: KeyError, match: a}}", "reject.x.error"),
    ("reject", "{x: {why: w, error: FlashCoreError, match: '('}}", "reject.x.match"),
    ("reject", "{x: {why: w, error: FlashCoreError, match: a, q: {layout: diagonal}}}", "reject.x.q.layout"),
    ("reject", "{x: {why: w, error: FlashCoreError, match: a, call: {scale: 1.0}}}", "reject.x.call.scale"),
    ("reject", "{x: {why: w, error: FlashCoreError, match: a, batch: -1}}", "reject.x.batch"),
    ("accept", "{y: {why: w, call: {softmax_scale: 0.5}}}", "accept.y.call.softmax_scale"),
    ("accept", "{y: {why: w, call: {softcap: 30.0}}}", "accept.y.call.softcap"),
    ("accept", "{y: {why: w, call: {window_size: [8, 0]}}}", "accept.y.call.window_size"),
    ("accept", "{y: {why: w, expect: maybe}}", "accept.y.expect"),
])
def test_a_bad_table_names_the_key(tmp_path: Path, section: str, body: str, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_cases(write_table(tmp_path, **{section: body}))
    assert e.value.key == key


def test_duplicate_case_names_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unique"):
        load_cases(write_table(tmp_path, accept="{r: {why: w}}"))


# ---- the builder ----------------------------------------------------------------------------------


def one_case(table: CaseTable, name: str) -> Case:
    return next(c for c in table.cases if c.name == name)


def test_builder_makes_the_described_layouts(table: CaseTable) -> None:
    args = build(one_case(table, "transposed-bhsd"), "cpu", 1, poisoned_outputs=True)
    b, s, h, d = args["q"].shape
    assert args["q"].stride() == (h * s * d, d, s * d, 1)
    assert gpu.count_unwritten(args["out"], args["lse"], "bf16") == (args["out"].numel(), args["lse"].numel())
    assert build(one_case(table, "padded-heads"), "cpu", 1, poisoned_outputs=False)["q"].stride(2) == 2 * d
    assert build(one_case(table, "q-misaligned"), "cpu", 1, poisoned_outputs=False)["q"].data_ptr() % 16 == 8
    assert build(one_case(table, "k-odd-seq-stride"), "cpu", 1, poisoned_outputs=False)["k"].stride(1) == 132
    assert build(one_case(table, "k-broadcast"), "cpu", 1, poisoned_outputs=False)["k"].stride()[:3] == (0, 0, 0)
    aliased = build(one_case(table, "out-is-q"), "cpu", 1, poisoned_outputs=True)
    assert aliased["out"] is aliased["q"]
    lse_in_out = build(one_case(table, "lse-inside-out"), "cpu", 1, poisoned_outputs=True)
    assert lse_in_out["lse"].data_ptr() == lse_in_out["out"].data_ptr()
    assert "k" not in build(one_case(table, "k-is-none"), "cpu", 1, poisoned_outputs=True)
    assert build(one_case(table, "q-not-a-tensor"), "cpu", 1, poisoned_outputs=False)["q"] == [1.0, 2.0]


# ---- verdicts (pure) ------------------------------------------------------------------------------


def reject_case(error: str = "FlashCoreError", match: str = "q is on cpu") -> Case:
    dims = load_cases(TABLE).defaults
    return Case("c", "reject", "why", dims, types.MappingProxyType({}), types.MappingProxyType({}), error, match)


GOOD = api_gate.RejectOutcome(("FlashCoreError", "ValueError", "Exception"), "q is on cpu: ...", 0, ())


@pytest.mark.parametrize("outcome, status, words", [
    (GOOD, Status.PASS, "FlashCoreError: q is on cpu"),
    (dataclasses.replace(GOOD, raised=(), message=""), Status.FAIL, "accepted: no error"),
    (dataclasses.replace(GOOD, raised=("TypeError", "Exception")), Status.FAIL, "raised TypeError, expected"),
    (dataclasses.replace(GOOD, message="something else"), Status.FAIL, "does not match"),
    (dataclasses.replace(GOOD, calls=1), Status.FAIL, "entered the C library 1 time"),
    (dataclasses.replace(GOOD, changed=("out",)), Status.FAIL, "wrote to out"),
    (dataclasses.replace(GOOD, sync_error="RuntimeError: illegal address"), Status.FAIL, "GPU reported an error"),
    (dataclasses.replace(GOOD, raised=("UnsupportedDeviceError", "FlashCoreError")), Status.PASS, "Unsupported"),
])
def test_verdict_reject(outcome: api_gate.RejectOutcome, status: Status, words: str) -> None:
    check = api_gate.verdict_reject(reject_case(), outcome)
    assert check.status is status and words in check.message and check.workload == "c"


def test_verdict_of_a_bad_index_case_allows_the_launch() -> None:
    case = dataclasses.replace(reject_case(), raised_by="check_errors")
    check = api_gate.verdict_reject(case, dataclasses.replace(GOOD, calls=1))
    assert check.status is Status.PASS and check.metric == "named_by_check_errors"
    quiet = api_gate.verdict_reject(case, dataclasses.replace(GOOD, raised=(), message="", calls=1))
    assert quiet.status is Status.FAIL and "no error was raised" in quiet.message
    dead = api_gate.verdict_reject(case, dataclasses.replace(GOOD, calls=1, sync_error="RuntimeError: illegal"))
    assert dead.status is Status.FAIL and "GPU reported an error" in dead.message


def test_each_bad_index_has_a_case(table: CaseTable) -> None:
    found = {c.name: c for c in table.cases if c.raised_by == "check_errors"}
    assert set(found) == {"device-page-id-past-pages", "device-page-id-negative", "device-cache-seqlens-above-capacity",
                          "device-cache-seqlens-negative", "device-cache-batch-idx-past-cache",
                          "device-cu-seqlens-q-past-rows", "device-cu-seqlens-q-decreasing",
                          "device-cu-seqlens-k-decreasing", "device-seqused-k-above-length"}
    assert all(c.entry in ("varlen", "kvcache") for c in found.values())


def test_raised_by_takes_call_or_check_errors(tmp_path: Path) -> None:
    bad = tmp_path / "cases.yaml"
    bad.write_text(TABLE.read_text().replace("kvcache, raised_by: check_errors", "kvcache, raised_by: later", 1))
    with pytest.raises(ConfigError, match="raised_by"):
        load_cases(bad)


def measured(err_ours: float = 1e-3, unwritten: int = 0) -> correctness.Measured:
    return correctness.Measured(7, unwritten, 0, 0, reference.ErrorStats(err_ours, 2e-3, 1e-3, 1e-6, 0))


def accept_case(expect: str = "result") -> Case:
    return dataclasses.replace(reject_case(), kind="accept", error="", match="", expect=expect)


def test_verdict_accept(judge: correctness.CorrectnessParams) -> None:
    ok = api_gate.verdict_accept(accept_case(), api_gate.AcceptOutcome("", 1, measured()), judge)
    assert [c.status for c in ok] == [Status.PASS] * 5
    rejected = api_gate.verdict_accept(accept_case(), api_gate.AcceptOutcome("FlashCoreError: no", 0), judge)
    assert rejected[0].status is Status.FAIL and "valid input rejected" in rejected[0].message
    bad = api_gate.verdict_accept(accept_case(), api_gate.AcceptOutcome("", 1, measured(1.0, unwritten=3)), judge)
    assert {c.metric for c in bad if c.status is Status.FAIL} == {"unwritten_elements", "err_vs_fp32"}
    twice = api_gate.verdict_accept(accept_case(), api_gate.AcceptOutcome("", 2, measured()), judge)
    assert twice[0].metric == "kernel_launches" and twice[0].status is Status.FAIL
    empty = api_gate.verdict_accept(accept_case("empty"), api_gate.AcceptOutcome("", 0, None, ("3 out",)), judge)
    assert [c.status for c in empty] == [Status.PASS, Status.FAIL]
    launched = api_gate.verdict_accept(accept_case("empty"), api_gate.AcceptOutcome("", 1), judge)
    assert launched[0].status is Status.FAIL
    unmeasured = api_gate.verdict_accept(accept_case(), api_gate.AcceptOutcome("", 1), judge)
    assert unmeasured[-1].status is Status.ERROR


def test_judge_params_come_from_the_correctness_gate() -> None:
    config = load_config(REPO / "gates")
    p = api_gate.judge_params(config.gates_through(7), "correctness")
    assert p is not None and p.fp16_max_abs == 2.0e-3
    assert api_gate.judge_params(config.gates_through(7), "nope") is None
    spec = next(g for g in config.gates_through(7) if g.name == "api")
    assert spec.phase == 7 and spec.params.cases == "gates/api-cases.yaml"


# ---- the gate loop on the CPU ---------------------------------------------------------------------


def stand_in(mode: str = "") -> tuple[types.ModuleType, types.ModuleType]:
    """(fc, api) for the CPU: the real host checks, then the SDPA fallback as the 'kernel' (counted as an entry).
    mode: "" (faithful), "no-checks" (launches anything), "launch-first" (enters the library before the
    checks), "write-first" (writes out before the checks)."""
    count = [0]

    def attention(q: Any, k: Any, v: Any, **kw: Any) -> Any:
        if mode == "launch-first":
            count[0] += 1
        if mode == "write-first" and isinstance(kw.get("out"), torch.Tensor) and kw["out"].dtype.is_floating_point:
            kw["out"].view(-1)[:1] = 0
        if mode == "no-checks":
            call = Call("dense", q, k, v, kw.get("out"), kw.get("lse"), bool(kw.get("causal")), 0.125)
        else:
            call = check.dense(q, k, v, device_type="cpu", **kw)
        out = call.out if call.out is not None else torch.empty_like(q)
        lse = call.lse if call.lse is not None else torch.empty(q.shape[0], q.shape[2], q.shape[1])
        if call.empty:
            return out.zero_(), lse.fill_(-math.inf)
        count[0] += 1
        fallback.attention(call.q, call.k, call.v, out, lse, call.causal, call.scale, call.deterministic)
        return out, lse

    def dense(q: Any, k: Any, v: Any, window_size: Any = (-1, -1), softcap: Any = 0.0, **kw: Any) -> Any:
        check.window(window_size)  # flashcore.serving.dense's own checks come first, as there
        check.softcap(softcap)
        return attention(q, k, v, **kw)

    fc = types.ModuleType("fc")
    fc.attention = attention  # type: ignore[attr-defined]
    fc.serving = types.SimpleNamespace(dense=dense)  # type: ignore[attr-defined]
    # The serving entries: their real host checks, then flashcore's CPU path (the FA3 names take fallback=)
    fc.flash_attn_varlen_func = functools.partial(flashcore.flash_attn_varlen_func,  # type: ignore[attr-defined]
                                                  fallback="sdpa")
    fc.flash_attn_with_kvcache = functools.partial(flashcore.flash_attn_with_kvcache,  # type: ignore[attr-defined]
                                                   fallback="sdpa")
    fake_api = types.ModuleType("api")
    fake_api.entry_calls = lambda: count[0]  # type: ignore[attr-defined]
    return fc, fake_api


def run_gate(tmp_path: Path, table: CaseTable, judge: correctness.CorrectnessParams, mode: str = "") -> Any:
    fc, fake_api = stand_in(mode)
    ctx = make_context(tmp_path, "api", api_gate.ApiParams(cases=str(TABLE)))
    return api_gate.check_cases(ctx, fc, fake_api, table, judge, devices=1, device="cpu")


def test_every_cpu_meaningful_case_passes_with_the_real_checks(tmp_path: Path, table: CaseTable,
                                                               judge: correctness.CorrectnessParams) -> None:
    result = run_gate(tmp_path, cpu_cases(table), judge)
    bad = [f"{c.workload} {c.metric}: {c.message}" for c in result.checks if c.status is not Status.PASS]
    assert bad == [] and result.status is Status.PASS
    assert {c.workload for c in result.checks} >= {"q-misaligned", "empty-sk", api_gate.AFTER_SUITE}
    assert result.details["cases"]["q-misaligned"]["verdicts"] == {"rejected_before_launch": "pass"}


@pytest.mark.parametrize("mode, case, words", [
    ("no-checks", "q-misaligned", "accepted: no error was raised"),
    ("no-checks", "out-is-q", "wrote to"),
    ("launch-first", "scale-nan", "entered the C library"),
    ("write-first", "scale-nan", "wrote to out"),
])
def test_the_gate_fails_an_api_that_lets_a_bad_input_through(tmp_path: Path, table: CaseTable,
                                                             judge: correctness.CorrectnessParams, mode: str,
                                                             case: str, words: str) -> None:
    small = dataclasses.replace(table, cases=(one_case(table, case), one_case(table, "causal")))
    result = run_gate(tmp_path, small, judge, mode)
    check = next(c for c in result.checks if c.workload == case)
    assert check.status is Status.FAIL and words in check.message and result.status is not Status.PASS


def test_a_case_needing_two_gpus_is_not_applicable_on_one_with_its_reason(
        tmp_path: Path, table: CaseTable, judge: correctness.CorrectnessParams) -> None:
    """On a host with one GPU the `k-on-another-gpu` case is a NOT_APPLICABLE check saying why, not a silent skip;
    it leaves the gate's verdict to the cases that ran."""
    small = dataclasses.replace(table, cases=(one_case(table, "k-on-another-gpu"), one_case(table, "s1")))
    result = run_gate(tmp_path, small, judge)
    check = next(c for c in result.checks if c.workload == "k-on-another-gpu")
    assert check.status is Status.NOT_APPLICABLE and check.message == "needs 2 GPUs, this host has 1"
    assert result.details["cases"]["k-on-another-gpu"]["message"] == check.message
    assert result.status is Status.PASS  # s1 and the plain call after the suite passed


# ---- on the H100 ----------------------------------------------------------------------------------


@pytest.mark.gpu
def test_the_api_gate_passes_on_the_h100(tmp_path: Path) -> None:
    config = load_config(REPO / "gates")
    spec = next(g for g in config.gates_through(7) if g.name == "api")
    ctx = dataclasses.replace(make_context(tmp_path, "api", spec.params, repo_root=REPO), config=config)
    result = api_gate.ApiGate().run(ctx)
    assert result.status is Status.PASS, result.message
    assert api_gate.AFTER_SUITE in {c.workload for c in result.checks}


def test_serving_arguments_need_a_serving_entry(tmp_path: Path) -> None:
    """cu_seqlens and friends are arguments of flash_attn_varlen_func / flash_attn_with_kvcache, not of attention."""
    bad = tmp_path / "cases.yaml"
    head = "  q-not-a-tensor: {why: a Python list,"
    text = TABLE.read_text().replace(head, head + " call: {cache_seqlens: {values: [1, 2]}},", 1)
    bad.write_text(text)
    with pytest.raises(ConfigError, match="reject.q-not-a-tensor.call.cache_seqlens.*set `entry`"):
        load_cases(bad)


def test_index_arguments_are_built_on_the_cases_device() -> None:
    table = load_cases(TABLE)
    case = next(c for c in table.cases if c.name == "paged-table-rows")
    args = build(case, "cpu", 3, poisoned_outputs=True)
    assert "out" not in args and "lse" not in args  # FA3's names take neither
    assert tuple(args["page_table"].shape) == (3, 2) and args["page_table"].dtype == torch.int32
    assert args["cache_seqlens"].tolist() == [20, 30] and tuple(args["k"].shape) == (6, 16, 2, 64)
    varlen = next(c for c in table.cases if c.name == "varlen-seqused-k-int64")
    v = build(varlen, "cpu", 3, poisoned_outputs=True)
    assert tuple(v["q"].shape) == (80, 4, 64) and v["cu_seqlens_q"].tolist() == [0, 40, 80]
    assert v["max_seqlen_k"] == 40 and v["seqused_k"].dtype == torch.int64
