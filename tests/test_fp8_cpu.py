"""FP8 (flashcore.attention_fp8) on the CPU: its host checks (check.dense(fp8=True), the descale checks) refuse
bad arguments with a message naming them; the ctypes mirror of fc_params carries the FP8 fields in kernel/flashcore.h's
order; the "same rounding" reference rounds P as the kernel does and stays close to the exact one; the V^T key order
(kernel/fp8_vt.cuh) is a permutation of each 32-key group matching the k32 A-fragment columns."""

from __future__ import annotations

import re

import pytest
import torch

from flashcore import _lib, launch, reference
from flashcore import check as checks
from flashcore.call import Call, out_dtype
from flashcore.errors import FlashCoreError
from tests.conftest import REPO

E4M3 = torch.float8_e4m3fn


def qkv(d: int = 128, dtype: torch.dtype = E4M3, hq: int = 4, hkv: int = 2) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(2, 40, h, d, generator=g).to(dtype) for h in (hq, hkv, hkv)]


def check(*tensors: torch.Tensor, **kw: object) -> Call:
    return checks.dense(*tensors, device_type="cpu", fp8=True, **kw)


def test_fp8_call_passes_and_wants_a_bf16_out() -> None:
    q, k, v = qkv()
    call = check(q, k, v, out=torch.empty(2, 40, 4, 128, dtype=torch.bfloat16))
    assert call.q.dtype == E4M3 and out_dtype(q) == torch.bfloat16 and launch.c_dtype(q) == _lib.FC_E4M3
    with pytest.raises(FlashCoreError, match=r"out.dtype is torch.float8_e4m3fn: expected torch.bfloat16"):
        check(q, k, v, out=torch.empty(2, 40, 4, 128).to(E4M3))


@pytest.mark.parametrize(("d", "dtype", "message"), [
    (32, E4M3, r"head dim \(q.shape\[3\]\) is 32: FP8 inputs run head dims \(64, 128, 256\)"),
    (96, E4M3, r"FP8 inputs run head dims"),
    (128, torch.bfloat16, r"q.dtype is torch.bfloat16: FP8 attention takes torch.float8_e4m3fn"),
])
def test_fp8_refuses_head_dims_and_dtypes(d: int, dtype: torch.dtype, message: str) -> None:
    with pytest.raises(FlashCoreError, match=message):
        check(*qkv(d, dtype))


def test_fp8_refuses_mixed_dtypes_and_odd_strides() -> None:
    q, k, v = qkv()
    with pytest.raises(FlashCoreError, match="one dtype"):
        check(q, k.to(torch.bfloat16), v)
    wide = torch.empty(2, 40, 2, 136).to(E4M3)[..., :128]  # seq stride 272 bytes: fine; head stride 136: not
    with pytest.raises(FlashCoreError, match=r"stride\(2\) \(head\) is 136: strides must be multiples of 16"):
        check(q, wide, v)


@pytest.mark.parametrize(("value", "message"), [
    (torch.ones(2, 2, dtype=torch.float16), "descale factors are torch.float32"),
    (torch.ones(2, 4), r"expected \[B, Hkv\] = \(2, 2\)"),
    (torch.ones(2), r"expected \[B, Hkv\]"),
    ([1.0, 1.0], "must be a torch.Tensor or None"),
])
def test_descale_checks(value: object, message: str) -> None:
    with pytest.raises(FlashCoreError, match=message):
        checks.descale("q_descale", value, 2, 2, torch.device("cpu"))


def test_descale_device_and_expanded_views() -> None:
    assert checks.descale("k_descale", None, 2, 2, torch.device("cpu")) is None
    expanded = torch.tensor([0.5]).expand(2, 2)  # strides (0, 0): one factor for all
    assert checks.descale("k_descale", expanded, 2, 2, torch.device("cpu")) is expanded
    with pytest.raises(FlashCoreError, match="is on cpu but q is on meta"):
        checks.descale("v_descale", torch.ones(2, 2), 2, 2, torch.device("meta"))


def test_ctypes_mirror_ends_with_the_fp8_fields_of_flashcore_h() -> None:
    header = (REPO / "kernel" / "flashcore.h").read_text()
    body = header[header.index("typedef struct fc_params {"):header.index("} fc_params;")]
    c_names = re.findall(r"^\s+(?:const\s+)?[\w]+\*?\s+\*?(\w+)(?:\[\d\])?;", body, re.M)
    py_names = [f[0] for f in _lib.FcParams._fields_]
    # the FP8 block, then the fields added after it (attention_chunk, page_table_rows, errors), in the header's order
    assert py_names[-10:] == ["q_descale", "k_descale", "v_descale", "q_descale_stride", "k_descale_stride",
                              "v_descale_stride", "fp8_v_transpose", "attention_chunk", "page_table_rows", "errors"]
    assert c_names[-10:] == py_names[-10:]
    assert "FC_E4M3 = 2" in header and _lib.FC_E4M3 == 2


def test_v_transpose_names_match_the_c_enum() -> None:
    """attention_fp8's v_transpose names map to kernel/flashcore.h's fc_fp8_v_transpose values; others raise."""
    from flashcore.errors import FlashCoreError

    header = (REPO / "kernel" / "flashcore.h").read_text()
    enum = dict(re.findall(r"FC_FP8_VT_(\w+) = (\d)", header))
    assert {k.lower(): int(v) for k, v in enum.items()} == checks.V_TRANSPOSE
    assert [checks.v_transpose(n) for n in ("auto", "pass", "smem")] == [0, 1, 2]
    assert [checks.v_transpose_name(c) for c in (0, 1, 2)] == ["", "pass", "smem"]
    for bad in ("SMEM", "", None, 2):
        with pytest.raises(FlashCoreError, match="v_transpose"):
            checks.v_transpose(bad)


def test_same_rounding_reference_is_close_to_exact() -> None:
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 50, 2, 128, generator=g) for _ in range(3))
    exact, lse = reference.dense(q, k, v, causal=True, scale=128 ** -0.5)
    rounded, lse2 = reference.dense(q, k, v, causal=True, scale=128 ** -0.5, p_dtype=E4M3)
    err = (rounded - exact).abs().max().item()
    assert 0 < err < 0.05  # E4M3 P (3 mantissa bits): a few percent of the O scale, never zero
    assert torch.equal(lse, lse2)


def test_dequantize_repeats_factors_over_the_group() -> None:
    x = torch.ones(1, 3, 4, 2).to(E4M3)
    d = torch.tensor([[2.0, 3.0]])
    out = reference.dequantize(x, d, heads_kv=2)
    assert out[0, 0, :, 0].tolist() == [2.0, 2.0, 3.0, 3.0]


def test_vt_key_order_matches_the_fragment_columns() -> None:
    """kernel/fp8_vt.cuh's vt_key(pos): position 4t + j holds key 2t + (j & 1) + 8 (j >> 1), +16 for the upper half;
    a permutation of 0..31 (stated here independently of the C++ bit arithmetic, which the GPU tests exercise)."""
    source = (REPO / "kernel" / "fp8_vt.cuh").read_text()
    expr = re.search(r"return (\(pos & 16\).*);", source).group(1)  # type: ignore[union-attr]
    keys = [eval(expr, {}, {"pos": p}) for p in range(32)]  # noqa: S307 - our own header's integer expression
    expected = [16 * (p // 16) + 2 * ((p % 16) // 4) + (p % 2) + 8 * ((p % 4) // 2) for p in range(32)]
    assert keys == expected and sorted(keys) == list(range(32))


def test_plan_refuses_a_tile_for_fp8_inputs() -> None:
    """flashcore.plan takes `tile` for 16-bit inputs only: FP8 calls run one tile per head dim, so a tile passed with
    E4M3 inputs is refused, not ignored; the check comes before any device is touched."""
    import flashcore
    from flashcore.tuning import TileConfig

    q = torch.randn(1, 128, 2, 128).to(torch.float8_e4m3fn)
    with pytest.raises(FlashCoreError, match="tile is for 16-bit inputs"):
        flashcore.plan(q, q, q, tile=TileConfig(l2_section_pct=50))
