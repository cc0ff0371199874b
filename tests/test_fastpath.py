"""flashcore/fastpath.py on the CPU: the signature a repeat call is matched by holds every input of the checked
path but the data pointers (so an input that check.dense would refuse never matches a call it accepted), and a kept
launch is replayed with fresh pointers. GPU part (a repeat call is the same launch, bit for bit; a misaligned or
grad-needing repeat is still refused): tests/test_api_gpu.py."""

from __future__ import annotations

import inspect

import pytest
import torch

from flashcore import _lib, api, check, fastpath
from flashcore.errors import FlashCoreError

ARGS = {"causal": True, "softmax_scale": None, "deterministic": False, "fallback": "error", "num_splits": None,
        "sm_margin": 0}


def qkv(**kw: object) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q = torch.randn(2, 40, 4, 64, dtype=torch.bfloat16)
    k, v = torch.randn(2, 50, 2, 64, dtype=torch.bfloat16), torch.randn(2, 50, 2, 64, dtype=torch.bfloat16)
    return q, k, v


def sig(q: object, k: object, v: object, **kw: object) -> tuple[object, ...] | None:
    return fastpath.signature(q, k, v, **{**ARGS, **kw})  # type: ignore[arg-type]


def test_every_argument_of_attention_is_in_the_signature_or_bypasses_the_fast_path() -> None:
    """A new keyword of flashcore.attention must join the signature (or the checked-path-only list)."""
    keyed = set(inspect.signature(fastpath.signature).parameters)
    bypass = {"out", "lse", "tile", "debug_fault"}  # attention() takes the checked path whenever these are given
    assert set(inspect.signature(api.attention).parameters) == keyed | bypass


def test_the_same_metadata_with_other_data_matches() -> None:
    a, b = qkv(), qkv()
    assert sig(*a) == sig(*b) and sig(*a) is not None


@pytest.mark.parametrize("change", [
    {"causal": 1},                     # 1 == True, but check.dense refuses an int
    {"softmax_scale": 0.125}, {"softmax_scale": 1},
    {"deterministic": True}, {"fallback": "sdpa"}, {"num_splits": 1}, {"num_splits": True}, {"sm_margin": 4},
    {"q": lambda q: q.to(torch.float16)}, {"q": lambda q: q.transpose(1, 2)}, {"q": lambda q: q[:, :39]},
    {"k": lambda k: k.expand(2, 50, 2, 64)[:, :, :1].expand(2, 50, 2, 64)},  # a broadcast view: stride 0
    {"v": lambda v: v.requires_grad_()},
])  # fmt: skip
def test_any_other_input_misses(change: dict[str, object]) -> None:
    q, k, v = qkv()
    base = sig(q, k, v)
    tensors = {"q": q, "k": k, "v": v}
    args = {}
    for name, what in change.items():
        if name in tensors:
            tensors[name] = what(tensors[name])  # type: ignore[operator]
        else:
            args[name] = what
    assert sig(tensors["q"], tensors["k"], tensors["v"], **args) != base


def test_grad_mode_is_part_of_the_signature() -> None:
    q, k, v = qkv()
    v.requires_grad_()
    with torch.no_grad():
        quiet = sig(q, k, v)
    assert sig(q, k, v) != quiet  # grad mode on: check.dense refuses it
    with pytest.raises(FlashCoreError, match="forward-only"):
        check.dense(q, k, v, device_type="cpu")


def test_non_tensors_and_unhashable_arguments_take_the_checked_path() -> None:
    q, k, v = qkv()
    assert sig([1], k, v) is None and sig(q, k, v, softmax_scale=[0.1]) is None
    assert fastpath.lookup(None) is None


def test_a_kept_launch_is_replayed_with_the_new_pointers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastpath, "_CACHE", {})
    params = _lib.FcParams(q=16, k=32, v=48, o=64, lse=80, workspace=96, workspace_bytes=4096, batch=2, heads_q=4,
                           seqlen_q=40, num_splits=3, causal=1)
    key = ("k",)
    fastpath.remember(key, params, 4096)
    entry = fastpath.lookup(key)
    assert entry is not None and entry.workspace_bytes == 4096 and entry.lse_shape == (2, 4, 40)
    t = entry.template
    assert (t.q, t.o, t.lse, t.workspace, t.workspace_bytes) == (None, None, None, None, 0)
    assert (t.num_splits, t.causal, t.batch) == (3, 1, 2)
    q, k, v = qkv()
    out, lse = torch.empty_like(q), torch.empty(2, 4, 40)
    again = fastpath.params_for(entry, q, k, v, out, lse)
    assert (again.q, again.k, again.v, again.o, again.lse) == (q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                                               out.data_ptr(), lse.data_ptr())
    assert again.num_splits == 3 and entry.template.q is None  # the kept template is not touched
    assert fastpath.aligned(q, k, v) and not fastpath.aligned(q, k.view(-1)[1:])
    monkeypatch.setattr(fastpath, "MAX_ENTRIES", 1)
    fastpath.remember(("other",), params, 0)
    assert fastpath.size() == 1 and fastpath.lookup(key) is None  # full: cleared, then the new one kept
