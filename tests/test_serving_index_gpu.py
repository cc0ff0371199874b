"""FA3's per-sequence index arguments on the H100 against the float32 reference (flashcore/reference.py): seqused_q
on packed batches (0, 1 and every row used, GQA, causal and not, windows, softcap, head dims 64/128/256, bf16 and
fp16). Fresh random inputs per case; out and lse are poisoned with NaN before the call; the used rows are compared
and the rows past seqused_q must still hold the poison (the kernel never writes them)."""

from __future__ import annotations

import math

import pytest
import torch

from flashcore import reference, serving

pytestmark = pytest.mark.gpu
ATOL, RTOL = 2e-2, 2e-2  # 16-bit output (bf16: 8 mantissa bits) of softmax-weighted sums of N(0, 1) values


def rand(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(dtype)


def ints(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device="cuda")


def starts(lengths: list[int]) -> list[int]:
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


def poisoned(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, math.nan, dtype=dtype, device="cuda")


def close(out: torch.Tensor, ref: torch.Tensor, lse: torch.Tensor, ref_lse: torch.Tensor) -> None:
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), ref, atol=ATOL, rtol=RTOL)
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), seen)  # rows without a key: lse -inf exactly there
    torch.testing.assert_close(lse[seen], ref_lse[seen], atol=1e-3, rtol=1e-3)


SEQUSED_Q = [
    # (q lengths, k lengths, seqused_q, seqused_k or None, heads q, heads kv, causal, window, softcap)
    ([5, 0, 1, 300, 129, 64], [5, 7, 1, 300, 500, 64], [3, 0, 1, 0, 129, 17], None, 4, 2, True, (-1, -1), 0.0),
    ([5, 0, 1, 300, 129, 64], [9, 0, 3, 260, 129, 700], [5, 0, 0, 299, 1, 64], None, 4, 4, False, (-1, -1), 0.0),
    ([1, 1, 1, 1], [513, 1, 77, 1024], [1, 0, 1, 0], None, 8, 1, True, (-1, -1), 0.0),  # decode-shaped, packed GQA
    ([700, 3, 190], [700, 3, 190], [450, 3, 65], [700, 1, 100], 2, 2, True, (-1, -1), 0.0),
    ([400, 257], [400, 300], [129, 256], [399, 300], 2, 1, True, (100, 0), 0.0),
    ([333, 129], [333, 600], [200, 64], None, 4, 2, False, (64, 17), 0.0),
    ([300, 45], [512, 45], [1, 45], [512, 20], 4, 4, True, (-1, -1), 30.0),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("case", SEQUSED_Q, ids=[f"seqused_q{i}" for i in range(len(SEQUSED_Q))])
def test_seqused_q_matches_the_reference_of_the_used_rows(case: tuple, d: int, dtype: torch.dtype) -> None:
    lq, lk, uq, uk, hq, hkv, causal, window, cap = case
    total_q = sum(lq) + 3  # 3 rows in no sequence
    q = rand(total_q, hq, d, dtype=dtype)
    k, v = rand(sum(lk), hkv, d, dtype=dtype), rand(sum(lk), hkv, d, dtype=dtype)
    out, lse = poisoned(total_q, hq, d, dtype=dtype), poisoned(hq, total_q, dtype=torch.float32)
    serving.varlen(q, k, v, ints(starts(lq)), ints(starts(lk)), max(lq), max(lk), seqused_q=ints(uq),
                   seqused_k=None if uk is None else ints(uk), causal=causal, window_size=window, softcap=cap,
                   out=out, lse=lse)
    cq, ck = starts(lq), starts(lk)
    written = torch.zeros(total_q, dtype=torch.bool, device="cuda")
    for b in range(len(lq)):
        rows = slice(cq[b], cq[b] + uq[b])
        keys = slice(ck[b], ck[b] + (lk[b] if uk is None else uk[b]))
        ref, ref_lse = reference.sequence(q[rows], k[keys], v[keys], causal=causal, scale=1 / math.sqrt(d),
                                          window=window, softcap=cap)
        close(out[rows], ref, lse[:, rows], ref_lse)
        written[rows] = True
    assert out[~written].isnan().all() and lse[:, ~written].isnan().all()


def test_seqused_q_on_the_repeat_call_path_reads_the_new_counts() -> None:
    lq, dtype = [64, 200], torch.bfloat16
    q, k = rand(sum(lq), 4, 128, dtype=dtype), rand(sum(lq), 2, 128, dtype=dtype)
    cu = ints(starts(lq))
    for used in ([64, 200], [10, 3], [0, 199]):  # one signature: the second and third calls take the fast path
        out, lse = serving.varlen(q, k, k, cu, cu, max(lq), max(lq), seqused_q=ints(used), causal=True)
        for b, n in enumerate(used):
            rows = slice(starts(lq)[b], starts(lq)[b] + n)
            ref, ref_lse = reference.sequence(q[rows], k[starts(lq)[b]:starts(lq)[b + 1]],
                                              k[starts(lq)[b]:starts(lq)[b + 1]], causal=True, scale=128 ** -0.5)
            close(out[rows], ref, lse[:, rows], ref_lse)
