"""flashcore.vllm: vLLM's vllm_flash_attn names as vLLM's FLASH_ATTN backend calls them (a paged cache through
block_table and seqused_k, packed queries of prefills and decodes in one batch, an out buffer), against the float32
reference sequence by sequence; packed keys through cu_seqlens_k; what it refuses by name. On the CPU
(fallback="sdpa"); the kernel path is flashcore.serving's, tested on the GPU with it."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
import flashcore  # noqa: E402
from flashcore import UnsupportedArgument, reference, vllm  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:flashcore")
HQ, HKV, D, BLOCK = 4, 2, 64, 16


def _t(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).bfloat16()


def _batch() -> dict[str, Any]:
    """Three sequences as vLLM schedules them: a prefill of 20 new tokens (37 in all), two decodes (60 and 5); q has
    one padding row past them (in no sequence)."""
    q_lens, seq_lens = [20, 1, 1], [37, 60, 5]
    blocks = torch.randperm(16, generator=torch.Generator().manual_seed(3))[:12].to(torch.int32).view(3, 4)
    cu_q = torch.tensor([0, 20, 21, 22], dtype=torch.int32)
    return {"q": _t(sum(q_lens) + 1, HQ, D, seed=1), "k": _t(16, BLOCK, HKV, D, seed=2),
            "v": _t(16, BLOCK, HKV, D, seed=4), "cu_seqlens_q": cu_q, "max_seqlen_q": 20,
            "seqused_k": torch.tensor(seq_lens, dtype=torch.int32), "max_seqlen_k": 60, "block_table": blocks}


def _expected(b: dict[str, Any], **mods: Any) -> torch.Tensor:
    cu, out = b["cu_seqlens_q"].tolist(), []
    for i, n in enumerate(b["seqused_k"].tolist()):
        kb, vb = reference.cached_keys(b["k"], b["v"], i, n, None, b["block_table"])
        o, _ = reference.sequence(b["q"][cu[i]:cu[i + 1]], kb, vb, scale=D ** -0.5, **mods)
        out.append(o)
    return torch.cat(out)


def test_a_paged_batch_of_a_prefill_and_decodes_matches_fp32_written_into_out() -> None:
    b = _batch()
    out = torch.full((23, HQ, D), float("nan"), dtype=torch.bfloat16)
    got = vllm.flash_attn_varlen_func(**b, out=out, causal=True, softmax_scale=D ** -0.5, window_size=[8, 0],
                                      softcap=20.0, fa_version=3, num_splits=0, fallback="sdpa")
    assert got.data_ptr() == out.data_ptr()
    want = _expected(b, causal=True, window=(8, 0), softcap=20.0)
    torch.testing.assert_close(out[:22].float(), want, atol=2e-2, rtol=2e-2)
    assert out[22].isnan().all()


def test_sinks_and_the_lse_come_back_as_vllm_asks() -> None:
    b = _batch()
    sinks = torch.randn(HQ, generator=torch.Generator().manual_seed(5))
    out, lse = vllm.flash_attn_varlen_func(**b, causal=True, s_aux=sinks, return_softmax_lse=True, fallback="sdpa")
    assert lse.shape == (HQ, 23)
    torch.testing.assert_close(out[:22].float(), _expected(b, causal=True, sinks=sinks), atol=2e-2, rtol=2e-2)


def test_packed_keys_with_cu_seqlens_k_are_fa3s_varlen() -> None:
    q, k, v = _t(9, HQ, D, seed=6), _t(12, HKV, D, seed=7), _t(12, HKV, D, seed=8)
    cu_q, cu_k = torch.tensor([0, 4, 9], dtype=torch.int32), torch.tensor([0, 5, 12], dtype=torch.int32)
    got = vllm.flash_attn_varlen_func(q, k, v, 5, cu_q, 7, cu_seqlens_k=cu_k, causal=True, fallback="sdpa")
    want = flashcore.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 7, causal=True, fallback="sdpa")
    assert torch.equal(got, want)


@pytest.mark.parametrize(("kw", "name"), [({"dropout_p": 0.1}, "dropout_p"),
                                          ({"alibi_slopes": torch.ones(HQ)}, "alibi_slopes"),
                                          ({"cp_world_size": 2}, "cp_world_size")])
def test_what_flashcore_does_not_compute_is_refused_by_name(kw: dict[str, Any], name: str) -> None:
    with pytest.raises(UnsupportedArgument, match=f"^{name}: "):
        vllm.flash_attn_varlen_func(**_batch(), fallback="sdpa", **kw)


@pytest.mark.parametrize(("kw", "match"), [
    ({"cu_seqlens_k": torch.tensor([0, 1, 2, 3], dtype=torch.int32)}, "pass one of cu_seqlens_k"),
    ({"block_table": None}, "seqused_k without block_table"),
    ({"fa_version": 4}, "fa_version is 4"),
])
def test_calls_vllm_flash_attn_asserts_against_raise_naming_why(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(flashcore.FlashCoreError, match=match):
        vllm.flash_attn_varlen_func(**{**_batch(), **kw}, fallback="sdpa")


def test_no_gpu_here_says_why_fa3_is_not_served() -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine: the reason depends on its GPU")
    assert not vllm.is_fa_version_supported(3)
    assert "no CUDA GPU" in (vllm.fa_version_unsupported_reason(3) or "")
    assert "not FA4" in (vllm.fa_version_unsupported_reason(4) or "")


@pytest.mark.gpu
def test_vllms_paged_call_on_the_kernel_matches_fp32_and_leaves_padding_rows() -> None:
    b = {k: (x.cuda() if isinstance(x, torch.Tensor) else x) for k, x in _batch().items()}
    out = torch.full((23, HQ, D), float("nan"), dtype=torch.bfloat16, device="cuda")
    vllm.flash_attn_varlen_func(**b, out=out, causal=True, window_size=[8, 0], softcap=20.0, fa_version=3)
    flashcore.check_errors()
    cpu = {k: (x.cpu() if isinstance(x, torch.Tensor) else x) for k, x in b.items()}
    torch.testing.assert_close(out[:22].float().cpu(), _expected(cpu, causal=True, window=(8, 0), softcap=20.0),
                               atol=2e-2, rtol=2e-2)
    assert out[22].isnan().all()


def test_an_out_buffer_with_inputs_that_need_grad_is_refused_and_left_alone() -> None:
    b = _batch()
    b["q"] = b["q"].clone().requires_grad_()
    out = torch.zeros(23, HQ, D, dtype=torch.bfloat16)
    with pytest.raises(flashcore.FlashCoreError, match="an out buffer with inputs that require grad is refused"):
        vllm.flash_attn_varlen_func(**b, out=out, causal=True, fallback="sdpa")
    assert not out.requires_grad and not out.any()


def test_vllms_scheduler_metadata_takes_its_positional_order() -> None:
    lengths = torch.tensor([37, 60, 5], dtype=torch.int32)
    got = vllm.get_scheduler_metadata(3, 20, 60, HQ, HKV, D, lengths, torch.bfloat16, None, None, None, None, BLOCK, 0,
                                      True, (-1, -1), True)
    want = flashcore.get_scheduler_metadata(3, 20, 60, HQ, HKV, D, lengths, page_size=BLOCK, causal=True,
                                            has_softcap=True)
    assert torch.equal(got, want)
