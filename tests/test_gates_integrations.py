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
from harness.results import Status, combine
from harness.schema import ConfigError
from harness.support.hf_models import FAMILIES as FAMILIES_ALL

REPO = Path(__file__).resolve().parent.parent
FAMILIES = ("llama", "mistral", "gpt_oss")
P = IntegrationsParams(models=FAMILIES, vocab=512, hidden=512, layers=2, heads_q=4, heads_kv=2, head_dim=128,
                       batch=2, seqlen=300, new_tokens=16, pad=37, sliding_window=64, softcap=2.0, init_std=0.05,
                       sinks_std=3.0, experts=2, experts_per_token=2, error_factor=2.0, error_slack=0.01)
GOOD = {"prefill_err": 0.05, "prefill_base_err": 0.04, "decode_err": 0.06, "decode_base_err": 0.05,
        "decode_steps": 16.0, "token_flip_step": -1.0, "token_flip_gap": 0.0}
OP = {"compiled": True, "cuda_graph": True}


def _measured(**family: dict[str, float]) -> Measured:
    return Measured({f: {**GOOD, **family.get(f, {})} for f in FAMILIES}, {}, OP)


def _statuses(m: Measured) -> dict[str, Status]:
    return {c.workload: c.status for c in verdicts(m, P)}


def test_correct_models_and_op_pass_with_three_checks_a_family() -> None:
    st = _statuses(_measured())
    assert set(st.values()) == {Status.PASS}
    assert [w for w in st if w.startswith("hf-mistral")] == ["hf-mistral-prefill", "hf-mistral-decode",
                                                             "hf-mistral-tokens"]


def test_logits_beyond_twice_bf16_eagers_distance_fail_and_nan_never_passes() -> None:
    assert _statuses(_measured(mistral={"prefill_err": 2 * 0.04 + 0.01 + 1e-6}))["hf-mistral-prefill"] is Status.FAIL
    assert _statuses(_measured(mistral={"prefill_err": 2 * 0.04 + 0.01}))["hf-mistral-prefill"] is Status.PASS
    assert _statuses(_measured(gpt_oss={"decode_err": math.nan}))["hf-gpt_oss-decode"] is Status.FAIL
    assert _statuses(_measured(llama={"decode_base_err": math.inf}))["hf-llama-decode"] is Status.ERROR


def test_one_wrong_family_fails_alone() -> None:
    st = _statuses(_measured(gpt_oss={"prefill_err": 1.0}))
    assert st["hf-gpt_oss-prefill"] is Status.FAIL
    assert {w: s for w, s in st.items() if s is not Status.PASS} == {"hf-gpt_oss-prefill": Status.FAIL}


def test_a_token_flip_at_a_tie_passes_and_a_wide_one_fails() -> None:
    tie = 0.05 + integrations.logits_limit(0.05, P)  # bf16 eager's decode distance + the decode bound
    at_tie = _measured(llama={"token_flip_step": 3.0, "token_flip_gap": tie})
    (check,) = [c for c in verdicts(at_tie, P) if c.workload == "hf-llama-tokens"]
    assert check.status is Status.PASS and "step 3" in check.message and "within" in check.message
    wide = _measured(llama={"token_flip_step": 0.0, "token_flip_gap": tie + 1e-6})
    assert _statuses(wide)["hf-llama-tokens"] is Status.FAIL
    assert _statuses(_measured(llama={"token_flip_step": 0.0, "token_flip_gap": math.nan}))["hf-llama-tokens"] \
        is Status.FAIL


def test_different_bits_under_compile_or_graph_replay_fail() -> None:
    m = Measured(_measured().hf, {}, {"compiled": False, "cuda_graph": False})
    st = _statuses(m)
    assert st["compiled"] is Status.FAIL and st["cuda-graph"] is Status.FAIL and st["hf-llama-prefill"] is Status.PASS


def test_without_transformers_each_family_is_an_error_with_the_install_hint() -> None:
    why = f"no module: {integrations.INSTALL_HINT}"
    checks = verdicts(Measured({}, {f: (Status.ERROR, why) for f in FAMILIES}, OP), P)
    hf = [c for c in checks if c.workload.startswith("hf-")]
    assert [c.status for c in hf] == [Status.ERROR] * 3 and "pip install" in hf[0].message


def test_a_family_transformers_lacks_is_not_applicable_never_a_pass() -> None:
    why = "transformers 4.44.0 has no GptOssConfig: gpt_oss does not run on this host"
    m = Measured({f: GOOD for f in FAMILIES[:2]}, {"gpt_oss": (Status.NOT_APPLICABLE, why)}, OP)
    (na,) = [c for c in verdicts(m, P) if c.workload.startswith("hf-gpt_oss")]
    assert na.status is Status.NOT_APPLICABLE and "GptOssConfig" in na.message and "4.44.0" in na.message
    only_na = [c.status for c in verdicts(Measured({}, {f: (Status.NOT_APPLICABLE, why) for f in FAMILIES}, OP), P)
               if c.workload.startswith("hf-")]
    assert combine(only_na) is Status.NOT_APPLICABLE  # the engine's rule: never a pass


def test_a_family_that_crashed_is_an_error_beside_the_others() -> None:
    m = Measured({f: GOOD for f in FAMILIES[:2]}, {"gpt_oss": (Status.ERROR, "RuntimeError: boom")}, OP)
    st = _statuses(m)
    assert st["hf-gpt_oss"] is Status.ERROR and st["hf-llama-prefill"] is Status.PASS


def test_phase7_yaml_entry_parses(gates_dir: Path) -> None:
    config = load_config(gates_dir)
    (spec,) = [g for ph in config.phases for g in ph.gates if g.name == "integrations"]
    p = spec.params
    assert spec.phase == 7 and p.head_dim == 128 and p.seqlen % 64  # ragged last tiles
    assert set(p.models) == set(FAMILIES_ALL) and p.sliding_window < p.seqlen - p.pad


def _edit(gates_dir: Path, old: str, new: str) -> None:
    f = gates_dir / "phases.yaml"
    text = f.read_text()
    start = text.index("      integrations:")
    block = text[start:text.index("      perf-fp8:")]
    assert old in block
    f.write_text(text[:start] + block.replace(old, new, 1) + text[start + len(block):])


@pytest.mark.parametrize(("old", "new", "key", "why"), [
    ("models: [llama,", "models: [falcon,", "integrations.models[0]", "must be one of"),
    ("models: [llama,", "models: [mistral,", "integrations.models", "at most once"),
    ("sliding_window: 64", "sliding_window: 263", "integrations.sliding_window", "cuts nothing"),
    ("heads_kv: 2", "heads_kv: 3", "integrations.heads_kv", "divide heads_q"),
    ("experts_per_token: 2", "experts_per_token: 3", "integrations.experts_per_token", "at most experts"),
    ("softcap: 2.0", "softcap: 0", "integrations.softcap", "> 0"),
    ("sinks_std: 3.0", "sinks_std: 3.0\n        sink_std: 1.0", "integrations.sink_std", "unknown key"),
])
def test_bad_settings_are_refused_naming_file_key_and_value(gates_dir: Path, old: str, new: str, key: str,
                                                            why: str) -> None:
    _edit(gates_dir, old, new)
    with pytest.raises(ConfigError) as e:
        load_config(gates_dir)
    assert "phases.yaml" in str(e.value) and key in e.value.key and why in str(e.value)


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
                        lambda p, seed, fault: seen.append(fault) or _measured())
    ctx = dataclasses.replace(make_context(tmp_path, "integrations", P), fault=3)
    assert integrations.IntegrationsGate().run(ctx).status is Status.PASS and seen == [3]
