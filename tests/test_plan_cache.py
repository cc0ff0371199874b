"""flashcore.launch.workspace_bytes: fc_plan once per launch signature, then straight to the launch (host cost)."""

from __future__ import annotations

import ctypes

import pytest

from flashcore import _lib, launch
from flashcore.errors import FlashCoreError


class FakeLib:
    """fc_plan's stand-in: counts calls; workspace = 1 KiB per split requested; rejects seqlen_q 13."""

    def __init__(self) -> None:
        self.plans = 0

    def fc_plan(self, params: _lib.FcParams, info: _lib.FcPlanInfo) -> int:
        self.plans += 1
        if params.seqlen_q == 13:
            return _lib.FC_ERR_INVALID_ARGUMENT
        info.workspace_bytes = 1024 * params.num_splits
        return _lib.FC_OK


def _params(**kw: object) -> _lib.FcParams:
    base = {"q": 0x1000, "k": 0x2000, "v": 0x3000, "o": 0x4000, "lse": 0x5000, "batch": 2, "heads_q": 8,
            "heads_kv": 2, "seqlen_q": 300, "seqlen_k": 300, "head_dim": 128, "q_stride": _lib.Strides(1, 2, 3),
            "k_stride": _lib.Strides(1, 2, 3), "v_stride": _lib.Strides(1, 2, 3), "o_stride": _lib.Strides(1, 2, 3),
            "softmax_scale": 0.125, "causal": 1, "num_splits": 2}
    return _lib.FcParams(**{**base, **kw})


@pytest.fixture(autouse=True)
def empty_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch, "_PLAN_CACHE", {})


def test_one_plan_per_signature_whatever_the_pointers() -> None:
    lib = FakeLib()
    assert launch.workspace_bytes(lib, _params(), 0) == 2048  # type: ignore[arg-type]
    assert launch.workspace_bytes(lib, _params(q=0x9000, o=0xA000, workspace=0xB000), 0) == 2048  # type: ignore[arg-type]
    assert lib.plans == 1


@pytest.mark.parametrize("change", [{"seqlen_k": 301}, {"causal": 0}, {"num_splits": 3}, {"sm_margin": 12},
                                    {"k_stride": _lib.Strides(1, 2, 4)}, {"block_n": 176}, {"dtype": 1},
                                    {"deterministic": 1}, {"lse": None}])
def test_anything_the_plan_depends_on_plans_again(change: dict[str, object]) -> None:
    lib = FakeLib()
    launch.workspace_bytes(lib, _params(), 0)  # type: ignore[arg-type]
    launch.workspace_bytes(lib, _params(**change), 0)  # type: ignore[arg-type]
    assert lib.plans == 2


def test_another_device_plans_again_and_a_failed_plan_is_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    lib = FakeLib()
    launch.workspace_bytes(lib, _params(), 0)  # type: ignore[arg-type]
    launch.workspace_bytes(lib, _params(), 1)  # type: ignore[arg-type]
    assert lib.plans == 2
    monkeypatch.setattr(_lib, "last_error", lambda lib: "fc_plan: bad shape")
    for _ in range(2):
        with pytest.raises(FlashCoreError):
            launch.workspace_bytes(lib, _params(seqlen_q=13), 0)  # type: ignore[arg-type]
    assert lib.plans == 4


def test_the_key_leaves_out_only_pointers() -> None:
    names = {f for f, _ in _lib.FcParams._fields_} - launch._POINTERS
    assert {"seqlen_q", "q_stride", "block_n", "schedule", "l2_section_pct", "debug_fault"} <= names
    key = launch.plan_key(_params(), 0)
    assert hash(key) and all(not isinstance(v, ctypes.Array) for v in key)  # hashable plain values
