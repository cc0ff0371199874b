"""flashcore's host-side validation and SDPA fallback, on the CPU: the public API refuses CPU tensors; the same
checks (`flashcore.check.dense(..., device_type="cpu")`) refuse every bad argument with a message naming it; the
fallback computes the kernel's contract. GPU-only parts are marked `gpu`."""

from __future__ import annotations

import inspect
import math
import re
import types
import warnings

import pytest
import torch

import flashcore
from flashcore import api, fallback, fastpath, launch, validate
from flashcore import check as checks
from flashcore.call import Call
from tests.conftest import REPO, attention_fp32


def qkv(b: int = 2, sq: int = 40, sk: int = 40, hq: int = 4, hkv: int = 2, d: int = 64,
        dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(b, sq, hq, d, generator=g).to(dtype), torch.randn(b, sk, hkv, d, generator=g).to(dtype),
            torch.randn(b, sk, hkv, d, generator=g).to(dtype))


def check(q: object, k: object, v: object, **kw: object) -> Call:
    return checks.dense(q, k, v, device_type="cpu", **kw)


# ---- the public entry point -----------------------------------------------------------------------


def test_cpu_tensors_are_refused_before_anything_else() -> None:
    q, k, v = qkv(dtype=torch.float32)  # wrong dtype too: the device is reported first
    calls = api.entry_calls()
    with pytest.raises(flashcore.FlashCoreError,
                       match=r"^q is on cpu: FlashCore needs CUDA tensors \(fallback=.sdpa. also takes CPU"):
        flashcore.attention(q, k, v)
    assert api.entry_calls() == calls


def test_signature_documents_the_new_keywords() -> None:
    params = inspect.signature(flashcore.attention).parameters
    assert params["deterministic"].default is False and params["fallback"].default == "error"
    doc = flashcore.attention.__doc__ or ""
    assert "bit-identical" in doc and 'fallback="sdpa"' in doc


# ---- every check, on CPU tensors ------------------------------------------------------------------


def test_a_valid_call_gets_the_default_scale_and_flags() -> None:
    call = check(*qkv(), causal=True, deterministic=True, fallback="sdpa")
    assert call.scale == pytest.approx(1 / 8) and call.causal and call.deterministic and call.fallback == "sdpa"
    assert not call.empty


@pytest.mark.parametrize("mutate, pattern", [
    (lambda q, k, v: (q.float(), k, v), r"q\.dtype is torch\.float32"),
    (lambda q, k, v: (q, k.half(), v), r"k\.dtype is torch\.float16 but q\.dtype is torch\.bfloat16"),
    (lambda q, k, v: (q[0], k, v), r"q has shape \(40, 4, 64\) \(rank 3\)"),
    (lambda q, k, v: (q, k[:1], v[:1]), r"k\.shape\[0\] \(batch\) is 1 but q\.shape\[0\] \(batch\) is 2"),
    (lambda q, k, v: (q, k, v[:, :5]), r"k has shape .* but v has \(2, 5, 2, 64\)"),
    (lambda q, k, v: (q[:, :, :3], k, v), r"q has 3 heads and k/v have 2"),
    (lambda q, k, v: (q[..., :36], k[..., :36], v[..., :36]), r"head dim \(q\.shape\[3\]\) is 36: .* multiples of 8"),
    (lambda q, k, v: (q[..., ::3], k[..., ::3], v[..., ::3]), r"head dim \(q\.shape\[3\]\) is 22"),
    (lambda q, k, v: (q, torch.empty(2, 40, 2, 68, dtype=k.dtype)[..., :64], v), r"k\.stride\(2\) \(head\) is 68"),
    (lambda q, k, v: (q, k, [v]), r"v must be a torch\.Tensor, got list"),
])
def test_bad_tensors_name_argument_and_value(mutate: object, pattern: str) -> None:
    args = mutate(*qkv())  # type: ignore[operator]
    with pytest.raises(flashcore.FlashCoreError, match=pattern):
        check(*args)


@pytest.mark.parametrize("kw, pattern", [
    ({"softmax_scale": float("nan")}, r"softmax_scale is nan: it must be finite and > 0"),
    ({"softmax_scale": -1.0}, r"softmax_scale is -1\.0"),
    ({"softmax_scale": 1e39}, r"becomes inf in float32"),
    ({"softmax_scale": torch.tensor(0.1)}, r"\(Tensor\): expected a Python float"),
    ({"causal": None}, r"causal is None \(NoneType\): expected True or False"),
    ({"deterministic": 1}, r"deterministic is 1 \(int\)"),
    ({"fallback": "SDPA"}, r"fallback is 'SDPA'"),
    ({"debug_fault": True}, r"debug_fault is True"),
    ({"debug_fault": 5}, r"known faults are 0\.\.4"),
])
def test_bad_scalars_name_argument_and_value(kw: dict[str, object], pattern: str) -> None:
    with pytest.raises(flashcore.FlashCoreError, match=pattern):
        check(*qkv(), **kw)


def test_outputs_are_checked_for_shape_dtype_aliasing_and_layout() -> None:
    q, k, v = qkv()
    with pytest.raises(flashcore.FlashCoreError, match=r"out\.dtype is torch\.float16"):
        check(q, k, v, out=torch.empty_like(q, dtype=torch.float16))
    with pytest.raises(flashcore.FlashCoreError, match="out overlaps q"):
        check(q, k, v, out=q)
    with pytest.raises(flashcore.FlashCoreError, match="its elements share memory"):
        check(q, k, v, out=torch.empty(1, 1, 1, 64, dtype=q.dtype).expand(q.shape))
    with pytest.raises(flashcore.FlashCoreError, match=r"out\.stride\(1\) \(seq\) is 260"):
        check(q, k, v, out=torch.empty(2 * 40 * 260, dtype=q.dtype).as_strided(q.shape, (40 * 260, 260, 64, 1)))
    with pytest.raises(flashcore.FlashCoreError, match=r"lse has shape \(2, 40, 4\): expected \[B, Hq, Sq\]"):
        check(q, k, v, lse=torch.empty(2, 40, 4))
    with pytest.raises(flashcore.FlashCoreError, match="lse overlaps out"):
        out = torch.empty_like(q)
        check(q, k, v, out=out, lse=out.view(-1)[: 2 * 4 * 40 * 2].view(torch.float32).view(2, 4, 40))
    check(q, k, v, out=torch.empty(2, 4, 40, 64, dtype=q.dtype).transpose(1, 2), lse=torch.empty(2, 4, 40))


def test_limits_of_the_grid_and_of_32_bit_rows() -> None:
    q, k, v = qkv(b=1)
    with pytest.raises(flashcore.FlashCoreError, match=r"q\.shape\[1\] \(seqlen_q\) is 1073741825: at most"):
        check(torch.empty(1, 1, 1, 64, dtype=q.dtype).expand(1, 2**30 + 1, 4, 64), k, v)
    big = torch.empty(1, 1, 1, 64, dtype=q.dtype).expand(65536, 1, 1, 64)
    with pytest.raises(flashcore.FlashCoreError, match=r"q\.shape\[0\] \(batch\) is 65536: at most 65535"):
        check(big, big, big)


def test_layout_rules() -> None:
    q, k, v = qkv()
    buffer = torch.empty(q.numel() + 8, dtype=q.dtype)
    with pytest.raises(flashcore.FlashCoreError, match=r"q\.data_ptr\(\) is 0x[0-9a-f]+, 4 bytes past"):
        check(buffer[2: 2 + q.numel()].view(q.shape), k, v)
    # A size-1 dim is never stepped along: any stride (here 3) is fine there.
    one = torch.empty(3 * 40 * 64, dtype=q.dtype).as_strided((1, 40, 1, 64), (5, 64, 3, 1))
    check(one, one, one)
    huge = types.SimpleNamespace(shape=(2, 2, 1, 64), stride=lambda d=None: (2**39, 64, 64, 1)[d],
                                 element_size=lambda: 2, data_ptr=lambda: 0)
    with pytest.raises(flashcore.FlashCoreError, match=r"below 2\*\*40 bytes"):
        validate.layout("k", huge)  # type: ignore[arg-type]


def test_empty_inputs_are_valid_and_flagged() -> None:
    assert check(*qkv(sq=0)).empty and check(*qkv(sk=0)).empty and check(*qkv(b=0)).empty
    q, k, v = qkv(sq=0)
    check(q, k, v, out=torch.empty(1, 1, 1, 64, dtype=q.dtype).expand(2, 0, 4, 64))  # no element: nothing shared


def test_overlap_is_about_bytes() -> None:
    buf = torch.empty(100)
    assert not validate.overlaps(buf[:50], buf[50:])
    assert validate.overlaps(buf[:51], buf[50:])
    assert not validate.overlaps(buf[:0], buf)
    assert validate.overlaps(buf[::2], buf[1::2])  # interleaved: conservatively overlapping


# ---- device choice and the SDPA fallback ----------------------------------------------------------


def test_non_hopper_gpus_raise_unless_the_fallback_is_asked_for() -> None:
    assert launch.use_fallback("cuda:0", (9, 0), "H100", "error") is False
    assert launch.use_fallback("cuda:0", (9, 0), "H100", "sdpa") is False
    assert launch.use_fallback("cuda:0", (8, 0), "A100", "sdpa") is True
    with pytest.raises(flashcore.UnsupportedDeviceError, match=r"cuda:0 \(A100\) is SM 8\.0: .*fallback='sdpa'"):
        launch.use_fallback("cuda:0", (8, 0), "A100", "error")


@pytest.mark.parametrize("sq, sk, hq, hkv, causal", [(40, 40, 4, 2, False), (40, 40, 4, 4, True),
                                                      (17, 300, 8, 2, True), (300, 100, 2, 1, True)])
def test_fallback_computes_the_kernel_contract(sq: int, sk: int, hq: int, hkv: int, causal: bool) -> None:
    q, k, v = qkv(sq=sq, sk=sk, hq=hq, hkv=hkv)
    out, lse = torch.full_like(q, float("nan")), torch.full((2, hq, sq), float("nan"))
    fallback.attention(q, k, v, out, lse, causal, 1 / 8, deterministic=False)
    ref, ref_lse = attention_fp32(q, k, v, causal)
    assert (out.float() - ref).abs().max() < 2e-2
    seen = torch.isfinite(ref_lse)
    assert torch.equal(seen, torch.isfinite(lse)) and (lse[seen] - ref_lse[seen]).abs().max() < 1e-4
    if causal and sq > sk:
        assert torch.all(out[:, : sq - sk] == 0) and torch.all(lse[:, :, : sq - sk] == -math.inf)


def test_fallback_scale_chunks_and_deterministic_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, v = qkv(sq=33)
    lse_whole = fallback.log_sum_exp(q, k, True, 0.3)
    monkeypatch.setattr(fallback, "LSE_CHUNK_BYTES", 4 * 2 * 4 * 40 * 5)  # 5 query rows per chunk
    assert torch.allclose(fallback.log_sum_exp(q, k, True, 0.3), lse_whole)
    s = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.float().repeat_interleave(2, 2)) * 0.3
    assert torch.allclose(fallback.log_sum_exp(q, k, False, 0.3), torch.logsumexp(s, -1), atol=1e-5)
    runs = []
    for _ in range(2):
        out, lse = torch.empty_like(q), torch.empty(2, 4, 33)
        fallback.attention(q, k, v, out, lse, False, 0.3, deterministic=True)
        runs.append((out, lse))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


def test_fallback_warns_once_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fallback, "_warned", set())
    with pytest.warns(RuntimeWarning, match=r"cuda:0 \(A100\) is not an SM 9\.0 GPU; fallback='sdpa'"):
        assert fallback.warn_once("cuda:0 (A100)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not fallback.warn_once("cuda:0 (A100)")


def test_deterministic_promise_still_holds_for_the_kernel_source() -> None:
    """deterministic=True promises bit-identical results across runs and launch configurations: no atomics outside
    the planted nondeterminism fault, the persistent scheduler's tile counter (it decides which CTA computes a
    tile, never the tile's arithmetic), FP8's V^T claim counter (it decides which CTA's warps copy a V block
    into the transposed copy, the same bytes whoever does it: kernel/fp8_vt_fused.cuh) and the device error word's
    first-error claim (kernel/index_errors.h: which bad index value is reported, never a result), and the split-KV count
    (the one launch choice that changes the arithmetic and depends on the GPU) ignores the SM count and sm_margin
    when the flag is set. A change here must keep the flag's promise and update the docstring (flashcore/api.py)
    and docs/design.md before this test is changed."""
    for path in sorted((REPO / "kernel").glob("*.[ch]*")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            code = line.split("//")[0]
            if re.search(r"\batomic\w*\s*\(", code):
                context = "\n".join(lines[max(0, i - 3): i + 1])
                scheduler = path.name == "tile_scheduler.h" and "atomicAdd(p.tile_counter, 1)" in code
                vt_claim = path.name == "fp8_vt_fused.cuh" and "atomicAdd(p.vt_ready, 1)" in code
                error_word = path.name == "index_errors.h" and "atomicCAS(code, 0ull" in code
                allowed = "kFaultNondeterministic" in context or scheduler or vt_claim or error_word
                assert allowed, f"{path.name}:{i + 1}: {line.strip()}"
    abi = (REPO / "kernel/flashcore.h").read_text()
    assert re.search(r"int32_t deterministic;", abi), "the C ABI lost its deterministic flag"
    launcher = (REPO / "kernel/run_tiles.cuh").read_text()
    plan = launcher[launcher.index("int make_plan("):launcher.index("plan->num_splits = splits;")]
    assert re.search(r"choose_num_splits\(tiles, n_blocks, in->deterministic \? kNominalSms : usable_sms\)", plan), \
        "the split count must come from the nominal SM count when deterministic is set"
    assert "cudaDevAttrMultiProcessorCount" in plan


# ---- on the H100 ----------------------------------------------------------------------------------


@pytest.mark.gpu
def test_fallback_on_a_pretend_non_hopper_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    q, k, v = (t.cuda() for t in qkv(sq=100, sk=300, hq=8, hkv=2))
    kernel_out, kernel_lse = flashcore.attention(q, k, v, causal=True)
    monkeypatch.setattr(launch, "device_info", lambda index: ((8, 0), "Pretend A100"))
    fastpath.clear()  # a device does not change its capability within a process; this pretend one does
    monkeypatch.setattr(fallback, "_warned", set())
    with pytest.raises(flashcore.UnsupportedDeviceError, match=r"SM 8\.0"):
        flashcore.attention(q, k, v, causal=True)
    calls = api.entry_calls()
    with pytest.warns(RuntimeWarning, match="Pretend A100"):
        out, lse = flashcore.attention(q, k, v, causal=True, fallback="sdpa")
    assert api.entry_calls() == calls
    assert (out.float() - kernel_out.float()).abs().max() < 2e-2 and (lse - kernel_lse).abs().max() < 1e-3


@pytest.mark.gpu
def test_deterministic_mode_is_bit_identical_on_the_h100() -> None:
    q, k, v = (t.cuda() for t in qkv(b=2, sq=1000, sk=1000, hq=8, hkv=2, d=128))
    first = flashcore.attention(q, k, v, causal=True, deterministic=True)
    for _ in range(5):
        again = flashcore.attention(q, k, v, causal=True, deterministic=True)
        assert torch.equal(again[0], first[0]) and torch.equal(again[1], first[1])
