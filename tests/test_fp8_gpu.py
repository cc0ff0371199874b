"""FP8 (E4M3) attention on the H100 against FA3's FP8 accuracy rule: the error of FlashCore's output against a float32
reference on the dequantized inputs is at most twice the error of a torch implementation that rounds P to E4M3 the
same way, plus the bf16 rounding of the output. Fresh random inputs and descale factors per case; out is poisoned
(NaN) first; never NaN/Inf; the same call twice is bit-identical."""

from __future__ import annotations

import pytest
import torch

from flashcore import reference
from flashcore.errors import FlashCoreError
from flashcore.fp8 import attention_fp8

pytestmark = pytest.mark.gpu
# FP8 decode tiles per head dim (kernel/tile_choice.h Fp8Choice: one consumer warpgroup, 128 keys, V^T in shared memory)
FP8_DECODE = {64: "n128-s4-w1-pp0-re0-r40", 128: "n128-s3-w1-pp0-re0-r40", 256: "n128-s2-w1-pp0-re0-r56"}
E4M3 = torch.float8_e4m3fn

CASES = [
    # (batch, seqlen q, seqlen k, heads q, heads kv, head dim, causal)
    (2, 1024, 1024, 4, 4, 128, False),
    (2, 1024, 1024, 4, 4, 128, True),
    (1, 1000, 1300, 8, 2, 128, True),     # ragged tails, GQA, Sq != Sk
    (1, 777, 777, 4, 1, 128, False),      # MQA, tails off the 128-key tile
    (2, 512, 640, 4, 2, 256, False),
    (1, 700, 900, 4, 4, 256, True),
    (4, 1, 3000, 32, 8, 128, False),      # decode: packed GQA, split-KV
    (2, 1, 5000, 16, 2, 256, False),
    (1, 64, 64, 2, 2, 128, True),         # one short block
    (2, 1024, 1024, 4, 4, 64, False),     # hdim 64: 64-byte Q/K rows, BLOCK_M 192
    (1, 1000, 1300, 8, 2, 64, True),
    (4, 1, 3000, 32, 8, 64, False),
]


def fp8(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(E4M3)


def descales(batch: int, heads_kv: int) -> list[torch.Tensor]:
    return [torch.rand(batch, heads_kv, device="cuda") * 1.5 + 0.25 for _ in range(3)]


def assert_within_fa3_bound(out: torch.Tensor, ref: torch.Tensor, pt: torch.Tensor) -> None:
    """FA3's FP8 rule: out's error against the exact float32 result `ref` is at most twice that of `pt` (torch with
    P rounded to E4M3 as FA3 does) in bf16, plus the output's bf16 rounding."""
    err = (out.float() - ref).abs().max().item()
    pt_err = (pt.to(torch.bfloat16).float() - ref).abs().max().item()
    atol = 2 * (ref + 0.3 - 0.3 - ref).abs().max().item()
    assert err <= 2 * pt_err + atol, (err, pt_err, atol)


@pytest.mark.parametrize("v_transpose", ["pass", "smem"])
@pytest.mark.parametrize(("b", "sq", "sk", "hq", "hkv", "d", "causal"), CASES)
def test_fp8_matches_reference_within_fa3_bound(b: int, sq: int, sk: int, hq: int, hkv: int, d: int,
                                                causal: bool, v_transpose: str) -> None:
    torch.manual_seed(sq * 31 + sk + d + hq + len(v_transpose))
    q, k, v = fp8(b, sq, hq, d), fp8(b, sk, hkv, d), fp8(b, sk, hkv, d)
    qd, kd, vd = descales(b, hkv)
    out = torch.full((b, sq, hq, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    lse = torch.full((b, hq, sq), float("nan"), device="cuda")
    attention_fp8(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal, out=out, lse=lse,
                  v_transpose=v_transpose)
    q32, k32, v32 = (reference.dequantize(x, s, hkv) for x, s in ((q, qd), (k, kd), (v, vd)))
    scale = d ** -0.5
    ref, ref_lse = reference.dense(q32, k32, v32, causal=causal, scale=scale)
    pt, _ = reference.dense(q32, k32, v32, causal=causal, scale=scale, p_dtype=E4M3)
    assert torch.isfinite(out).all() and torch.isfinite(lse[torch.isfinite(ref_lse)]).all()
    assert_within_fa3_bound(out, ref, pt)
    seen = torch.isfinite(ref_lse)
    torch.testing.assert_close(lse[seen], ref_lse[seen], atol=2e-3, rtol=2e-3)
    again, again_lse = attention_fp8(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal,
                                     v_transpose=v_transpose)
    assert torch.equal(again, out) and torch.equal(again_lse, lse)


@pytest.mark.parametrize(("b", "sq", "sk", "hq", "hkv", "d", "causal"), [CASES[2], CASES[5], CASES[6], CASES[10]])
def test_fp8_v_transpose_ways_give_the_same_bits(b: int, sq: int, sk: int, hq: int, hkv: int, d: int,
                                                 causal: bool) -> None:
    """The copy and the shared-memory transpose put the same V^T bytes in front of the same GEMMs; "auto" is one of
    them, except where it picks FP8's decode tile (one consumer warpgroup: tests/test_fp8_decode_gpu.py), which a
    named way never takes."""
    import flashcore

    q, k, v = fp8(b, sq, hq, d), fp8(b, sk, hkv, d), fp8(b, sk, hkv, d)
    qd, kd, vd = descales(b, hkv)
    got = {m: attention_fp8(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=causal, v_transpose=m)
           for m in ("auto", "pass", "smem")}
    decode = flashcore.plan(q, k, v).point == FP8_DECODE[d]
    for m in ("smem",) if decode else ("auto", "smem"):
        assert torch.equal(got[m][0], got["pass"][0]) and torch.equal(got[m][1], got["pass"][1]), m


def test_plan_says_where_fp8_v_is_transposed() -> None:
    """auto: decode (one query row per K/V head's group) transposes in shared memory, long prefill through the copy,
    which alone needs the workspace for V^T; v_transpose forces either way; 16-bit inputs have no such choice."""
    import flashcore
    from flashcore.errors import FlashCoreError

    q, k, v = fp8(4, 1, 32, 128), fp8(4, 3000, 8, 128), fp8(4, 3000, 8, 128)
    decode = flashcore.plan(q, k, v)
    assert decode.v_transpose == "smem"
    forced = flashcore.plan(q, k, v, v_transpose="pass")
    assert forced.v_transpose == "pass" and forced.workspace_bytes >= decode.workspace_bytes + 3000 * 8 * 4 * 128
    long_q = fp8(1, 8192, 8, 128)
    k8, v8 = fp8(1, 8192, 8, 128), fp8(1, 8192, 8, 128)
    assert flashcore.plan(long_q, k8, v8).v_transpose == "pass"
    assert flashcore.plan(long_q, k8, v8, v_transpose="smem").v_transpose == "smem"
    with pytest.raises(FlashCoreError, match="v_transpose"):
        flashcore.plan(long_q, k8, v8, v_transpose="transposed")
    q16 = torch.randn(1, 64, 4, 128, device="cuda", dtype=torch.bfloat16)
    assert flashcore.plan(q16, q16, q16).v_transpose == ""
    with pytest.raises(FlashCoreError, match="float8_e4m3fn"):
        flashcore.plan(q16, q16, q16, v_transpose="smem")


def test_fp8_without_descales_is_unit_scale() -> None:
    q, k, v = fp8(1, 300, 4, 128), fp8(1, 300, 4, 128), fp8(1, 300, 4, 128)
    ones = torch.ones(1, 4, device="cuda")
    a, _ = attention_fp8(q, k, v)
    b, _ = attention_fp8(q, k, v, q_descale=ones, k_descale=ones, v_descale=ones)
    assert torch.equal(a, b)


def test_fp8_expanded_descale_view() -> None:
    q, k, v = fp8(2, 256, 4, 128), fp8(2, 256, 2, 128), fp8(2, 256, 2, 128)
    d = torch.tensor([0.5], device="cuda").expand(2, 2)  # strides (0, 0)
    a, _ = attention_fp8(q, k, v, q_descale=d, k_descale=d, v_descale=d)
    b, _ = attention_fp8(q, k, v, q_descale=d.contiguous(), k_descale=d.contiguous(), v_descale=d.contiguous())
    assert torch.equal(a, b)


@pytest.mark.parametrize(("what", "kwargs", "message"), [
    ("head dim 96", {"d": 96}, "head dims (64, 128, 256)"),
    ("bf16 q", {"dtype": torch.bfloat16}, "float8_e4m3fn"),
    ("descale shape", {"descale": (3, 4)}, "expected [B, Hkv]"),
])
def test_fp8_rejects(what: str, kwargs: dict[str, object], message: str) -> None:
    d = int(kwargs.get("d", 128))
    q = torch.randn(1, 64, 4, d, device="cuda").to(kwargs.get("dtype", E4M3))  # type: ignore[arg-type]
    k = v = fp8(1, 64, 4, d)
    shape = kwargs.get("descale", (1, 4))
    with pytest.raises(FlashCoreError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        attention_fp8(q, k, v, q_descale=torch.ones(*shape, device="cuda"))  # type: ignore[misc]


def test_fa3_names_run_fp8_on_attention_fp8() -> None:
    """flashcore.flash_attn_func with float8_e4m3fn inputs and descales: the same bits as attention_fp8."""
    from flashcore import flash_attn_func

    q, k, v = fp8(2, 300, 8, 128), fp8(2, 500, 2, 128), fp8(2, 500, 2, 128)
    qd, kd, vd = descales(2, 2)
    want, want_lse = attention_fp8(q, k, v, q_descale=qd, k_descale=kd, v_descale=vd, causal=True)
    out, lse = flash_attn_func(q, k, v, causal=True, q_descale=qd, k_descale=kd, v_descale=vd, return_attn_probs=True)
    assert out.dtype == torch.bfloat16 and torch.equal(out, want) and torch.equal(lse, want_lse)


def test_plan_takes_fp8_inputs_and_deterministic_mode_fixes_their_split_count() -> None:
    """flashcore.plan on float8_e4m3fn inputs: attention_fp8's launch (hdim 128 decode on FP8's decode tile, 128 keys;
    prefill at 192 keys per tile); decode splits the keys, and deterministic=True keeps one split count whatever
    sm_margin (the determinism-strict gate's claim)."""
    import flashcore

    q, k, v = fp8(4, 1, 32, 128), fp8(4, 3000, 8, 128), fp8(4, 3000, 8, 128)
    plan = flashcore.plan(q, k, v)
    assert plan.point == FP8_DECODE[128] and plan.block_n == 128 and plan.pack_gqa and plan.num_splits > 1
    assert flashcore.plan(fp8(1, 1000, 8, 128), k[:1], v[:1]).block_n == 192
    fixed = {flashcore.plan(q, k, v, deterministic=True, sm_margin=m).num_splits for m in (0, 66, 120)}
    assert len(fixed) == 1


def test_fp8_causal_sections_count_fp8_kv_bytes() -> None:
    """The dynamic order's sections hold the (batch, head) pairs whose K/V fit the L2 budget: FP8 K and V^T take half
    the bytes of 16-bit K and V, so an FP8 causal call at S keys is cut like a bf16 call at S / 2 keys, whose K and V
    take the same bytes (counted at 16-bit size they ended causal calls unevenly: docs/perf-notes.md step 8.22).
    Compared at equal bytes, not as "twice the pairs": the section count rounds up, so on a GPU whose L2 budget is
    not a multiple of the pair size (the H200's) twice the pairs per section does not hold exactly."""
    import flashcore
    from flashcore.tuning import TileConfig

    q = fp8(4, 4096, 16, 128)
    q16 = torch.randn(4, 2048, 16, 128, device="cuda", dtype=torch.bfloat16)
    plan8 = flashcore.plan(q, q, q, causal=True)
    plan16 = flashcore.plan(q16, q16, q16, causal=True, tile=TileConfig(block_n=176, schedule="dynamic"))
    assert plan8.dynamic and plan16.dynamic
    assert plan8.section_heads == plan16.section_heads


def test_fp8_hdim256_causal_sections_take_two_thirds_of_the_l2(monkeypatch: pytest.MonkeyPatch) -> None:
    """FP8 hdim 256 causal sections take two thirds of the L2 where every other call takes a third (kernel/tile_choice.h
    fp8_l2_section_pct; docs/perf-notes.md 8.37): twice hdim 128's K and V^T per pair, so as many pairs per section as
    hdim 128's. A share named in fc_params (here through the FP8 calls' default configuration) still wins."""
    import flashcore
    from flashcore import tuning

    q128, q256 = fp8(4, 4096, 16, 128), fp8(4, 4096, 16, 256)
    plan128 = flashcore.plan(q128, q128, q128, causal=True)
    plan256 = flashcore.plan(q256, q256, q256, causal=True)
    assert plan128.dynamic and plan256.dynamic
    assert plan256.section_heads == plan128.section_heads
    monkeypatch.setattr(tuning, "DEFAULT", tuning.TileConfig(l2_section_pct=33))
    third = flashcore.plan(q256, q256, q256, causal=True)
    assert third.section_heads < plan256.section_heads


def test_fp8_cuda_graph_replays_clear_the_launch_words_each_time() -> None:
    """A causal call's tile counter and V^T flags are cleared by a kernel of their own that the attention kernel follows
    as a programmatic dependent launch (kernel/zero_words.cuh): captured in a CUDA graph, both replay, so every replay
    on fresh inputs gives the eager call's bits (a counter left at its last value would skip tiles: NaN poison)."""
    torch.manual_seed(5)
    b, s, h, d = 2, 2000, 12, 128  # 384 tiles of 128 rows: more than the SMs, so the order is dynamic
    q, k, v = fp8(b, s, h, d), fp8(b, s, h, d), fp8(b, s, h, d)
    qd, kd, vd = descales(b, h)
    out = torch.full((b, s, h, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    kw = {"q_descale": qd, "k_descale": kd, "v_descale": vd, "causal": True, "v_transpose": "pass"}
    attention_fp8(q, k, v, out=out, **kw)  # warm-up outside the capture (plan cache, module load)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        attention_fp8(q, k, v, out=out, **kw)
    for _ in range(3):
        for t in (q, k, v):
            t.copy_(fp8(*t.shape))
        out.fill_(float("nan"))
        graph.replay()
        want, _ = attention_fp8(q, k, v, **kw)
        torch.cuda.synchronize()
        assert torch.equal(out, want)
