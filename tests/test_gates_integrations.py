"""The integrations gate (phase 7): its verdicts, its YAML entry, and a run with stand-in measurements."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from conftest import make_context

from harness.config import load_config
from harness.gates import integrations
from harness.gates.integrations import IntegrationsParams, Measured, verdicts
from harness.results import Status

REPO = Path(__file__).resolve().parent.parent
P = IntegrationsParams(vocab=512, hidden=512, layers=2, heads_q=4, heads_kv=2, head_dim=128, batch=2, seqlen=300,
                       new_tokens=16, error_factor=2.0, error_slack=0.01)
GOOD = {"prefill_err": 0.05, "prefill_sdpa_err": 0.04, "decode_err": 0.06, "decode_sdpa_err": 0.05,
        "decode_steps": 16.0}


def _statuses(m: Measured) -> dict[str, Status]:
    return {c.workload: c.status for c in verdicts(m, P)}


def test_a_correct_model_and_op_pass() -> None:
    assert set(_statuses(Measured(GOOD, "", {"compiled": True, "cuda_graph": True})).values()) == {Status.PASS}


def test_logits_beyond_twice_sdpas_distance_fail_and_nan_never_passes() -> None:
    wrong = {**GOOD, "prefill_err": 2 * 0.04 + 0.01 + 1e-6}
    assert _statuses(Measured(wrong, "", {"compiled": True, "cuda_graph": True}))["hf-prefill"] is Status.FAIL
    edge = {**GOOD, "prefill_err": 2 * 0.04 + 0.01}
    assert _statuses(Measured(edge, "", {"compiled": True, "cuda_graph": True}))["hf-prefill"] is Status.PASS
    nan = {**GOOD, "decode_err": math.nan}
    assert _statuses(Measured(nan, "", {"compiled": True, "cuda_graph": True}))["hf-decode"] is Status.FAIL
    no_ref = {**GOOD, "decode_sdpa_err": math.inf}
    assert _statuses(Measured(no_ref, "", {"compiled": True, "cuda_graph": True}))["hf-decode"] is Status.ERROR


def test_different_bits_under_compile_or_graph_replay_fail() -> None:
    st = _statuses(Measured(GOOD, "", {"compiled": False, "cuda_graph": False}))
    assert st["compiled"] is Status.FAIL and st["cuda-graph"] is Status.FAIL and st["hf-prefill"] is Status.PASS


def test_without_transformers_the_hf_checks_are_errors_with_the_install_hint() -> None:
    checks = verdicts(Measured(None, f"no module: {integrations.INSTALL_HINT}", {"compiled": True,
                                                                              "cuda_graph": True}), P)
    hf = [c for c in checks if c.workload.startswith("hf-")]
    assert [c.status for c in hf] == [Status.ERROR, Status.ERROR] and "pip install" in hf[0].message


def test_phase7_yaml_entry_parses(gates_dir: Path) -> None:
    config = load_config(gates_dir)
    (spec,) = [g for ph in config.phases for g in ph.gates if g.name == "integrations"]
    assert spec.phase == 7 and spec.params.head_dim == 128 and spec.params.seqlen % 64  # ragged last tiles


def test_without_a_gpu_it_is_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.support import gpu

    monkeypatch.setattr(gpu, "cuda_unavailable_reason", lambda: "no CUDA GPU (test)")
    result = integrations.IntegrationsGate().run(make_context(tmp_path, "integrations", P))
    assert result.status is Status.NOT_RUN and "no CUDA GPU" in result.message


def test_a_crash_while_measuring_is_an_error_not_a_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.gates import base

    monkeypatch.setattr(base, "flashcore_for", lambda ctx: object())

    def crash(p: IntegrationsParams, seed: int, fault: int) -> Measured:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(integrations, "measure", crash)
    result = integrations.IntegrationsGate().run(make_context(tmp_path, "integrations", P))
    assert result.status is Status.ERROR and "illegal memory access" in result.message


def test_the_planted_fault_reaches_the_measurement(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.gates import base

    seen = []
    monkeypatch.setattr(base, "flashcore_for", lambda ctx: object())
    monkeypatch.setattr(integrations, "measure",
                        lambda p, seed, fault: seen.append(fault) or Measured(GOOD, "", {"compiled": True,
                                                                                          "cuda_graph": True}))
    ctx = dataclasses.replace(make_context(tmp_path, "integrations", P), fault=3)
    assert integrations.IntegrationsGate().run(ctx).status is Status.PASS and seen == [3]
