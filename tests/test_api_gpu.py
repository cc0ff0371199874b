"""flashcore.attention on the GPU: matches an fp32 reference, accepts strided views, plants faults.

Marked `gpu`: counted as skipped on CPU-only machines (see tests/conftest.py)."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402

pytestmark = pytest.mark.gpu


def reference(q, k, v, causal):  # fp32, explicit bottom-right mask, GQA by repeat
    group = q.shape[2] // k.shape[2]
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    kf, vf = kf.repeat_interleave(group, 1), vf.repeat_interleave(group, 1)
    s = qf @ kf.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i + (sk - sq), -math.inf)
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return (p @ vf).transpose(1, 2), lse


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", dtype=dtype)


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_matches_reference(d, causal, dtype):
    q, k, v = rand(2, 300, 4, d, dtype=dtype), rand(2, 300, 2, d, dtype=dtype), rand(2, 300, 2, d, dtype=dtype)
    out, lse = flashcore.attention(q, k, v, causal=causal)
    ref, ref_lse = reference(q, k, v, causal)
    assert (out.float() - ref).abs().max().item() < 2e-2
    assert (lse - ref_lse).abs().max().item() < 1e-3


def test_strided_view_and_rows_without_keys():
    base = rand(1, 1000, 4, 2, 128)  # q is a strided view: head stride 256
    q = base[..., 0, :]
    k, v = rand(1, 300, 4, 128), rand(1, 300, 4, 128)
    out, lse = flashcore.attention(q, k, v, causal=True)
    ref, _ = reference(q, k, v, True)
    assert (out.float() - ref).abs().max().item() < 2e-2
    assert torch.all(out[:, :700] == 0) and torch.all(lse[:, :, :700] == -math.inf)


def test_planted_tail_fault_changes_result():
    # 17 keys: the leaked 18th key (score 0 against zero-filled K) takes ~1/18 of the weight.
    q, k, v = (rand(1, 17, 2, 64, dtype=torch.float16) for _ in range(3))
    good, _ = flashcore.attention(q, k, v)
    bad, _ = flashcore.attention(q, k, v, debug_fault=1)
    assert (good.float() - bad.float()).abs().max().item() > 5e-3


def test_bad_input_raises_before_launch_and_context_survives():
    q = rand(1, 64, 2, 84)  # not a multiple of 8: FA3 refuses it too
    with pytest.raises(flashcore.FlashCoreError, match="head dim"):
        flashcore.attention(q, q, q)
    q, k, v = rand(1, 64, 2, 64), rand(1, 64, 2, 64), rand(1, 64, 2, 64)
    out, _ = flashcore.attention(q, k, v)
    assert torch.isfinite(out).all()


def test_a_repeat_call_takes_the_fast_path_and_gives_the_same_bits():
    """flashcore/fastpath.py: the second call with the same signature is not checked or planned again (the cache
    holds one entry for it), writes fresh outputs and gives the checked call's bits, split-KV included."""
    from flashcore import fastpath

    fastpath.clear()
    for shape_q, shape_k in (((2, 300, 8, 128), (2, 700, 2, 128)), ((1, 1, 32, 128), (1, 20000, 8, 128))):
        q, k, v = rand(*shape_q), rand(*shape_k), rand(*shape_k)
        first = flashcore.attention(q, k, v, causal=True)
        kept = fastpath.size()
        again = flashcore.attention(q, k, v, causal=True)
        assert fastpath.size() == kept
        assert again[0].data_ptr() != first[0].data_ptr()
        assert torch.equal(again[0], first[0]) and torch.equal(again[1], first[1])
        other = rand(*shape_q)  # new data, same signature: its own result
        ref_o, ref_lse = reference(other, k, v, True)
        o, lse = flashcore.attention(other, k, v, causal=True)
        assert (o.float() - ref_o).abs().max() < 2e-2 and (lse - ref_lse).abs().max() < 1e-3


def test_a_repeat_call_that_the_checks_refuse_is_still_refused():
    """After a good call, the same metadata at a misaligned address, or needing grad, gets the checked path's
    error; nothing reaches the kernel."""
    from flashcore import api

    buf = rand(2 * 300 * 4 * 64 + 8)
    q = buf[:-8].view(2, 300, 4, 64)
    k, v = rand(2, 300, 2, 64), rand(2, 300, 2, 64)
    flashcore.attention(q, k, v)
    calls = api.entry_calls()
    with pytest.raises(flashcore.FlashCoreError, match="16-byte"):
        flashcore.attention(buf[1:-7].view(2, 300, 4, 64), k, v)  # 2 bytes past the boundary
    with pytest.raises(flashcore.FlashCoreError, match="forward-only"):
        flashcore.attention(q, k, v.clone().requires_grad_())
    assert api.entry_calls() == calls
    with torch.no_grad():  # grad mode off: the same tensors are fine
        flashcore.attention(q, k, v.clone().requires_grad_())


def test_plan_reports_the_stream_k_tail_and_its_result_matches_whole_tiles():
    """B3 H7 S4097 hdim 128: 693 tiles of 128 rows. Where the last wave fills at most a quarter of the SMs
    (kernel/stream_tail.h kTailMaxFill; 33 of 132 on an H100 SXM) flashcore.plan reports its tiles cut into more
    pieces than tiles, at most one per CTA; schedule="whole" and causal calls run whole tiles. The cut run matches the
    fp32 reference as the whole-tile run does, and repeats its bits."""
    from flashcore.tuning import TileConfig

    q, k, v = rand(3, 4097, 7, 128), rand(3, 4097, 7, 128), rand(3, 4097, 7, 128)
    plan = flashcore.plan(q, k, v)
    rest = (3 * 7 * 33) % plan.ctas
    if not (0 < rest <= plan.ctas // 4):
        pytest.skip(f"{plan.ctas} CTAs: a last wave of {rest} tiles is not cut")
    assert plan.tail_tiles == rest and plan.tail_tiles < plan.tail_pieces <= plan.ctas
    whole = TileConfig(schedule="whole")
    assert flashcore.plan(q, k, v, tile=whole).tail_tiles == 0
    assert flashcore.plan(q, k, v, causal=True).tail_tiles == 0
    ref, ref_lse = reference(q, k, v, False)
    for tile in (None, whole):
        out, lse = flashcore.attention(q, k, v, tile=tile)
        assert (out.float() - ref).abs().max().item() < 2e-2
        assert (lse - ref_lse).abs().max().item() < 1e-3
    out, lse = flashcore.attention(q, k, v)
    again, again_lse = flashcore.attention(q, k, v)
    assert torch.equal(out, again) and torch.equal(lse, again_lse)
