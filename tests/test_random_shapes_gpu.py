"""Random shapes on the GPU: flashcore.attention (bf16, fp16) and flashcore.fp8.attention_fp8 against the float32
reference, on shapes drawn fresh for every run, so that the fixed cases of the other tests are not the only shapes the
kernel ever sees.

Each draw picks an input type, a head dim (64, 128, 256; 16-bit also 96, 192 and 192 with a 128 V), batch, K/V
heads and a GQA group, query and key lengths (often at a tile edge: 1, 63-65, 127-129, 191-193, ...; decode rows;
Sq > Sk, whose first rows see no key under causal masking), causal or not, and sometimes q, k and v as views of one
packed qkv (or kv) tensor. Inputs are fresh random values; out and lse are poisoned (NaN) before the call.
tests/random_judge.py judges the call: against the float32 reference, within 2 x the error of a torch computation
that rounds as the kernel does (FA3's FP8 rule, for every input type), rows without keys 0 / -inf, nothing NaN.
Every failure names the seed and the draw. FLASHCORE_FUZZ_SEED=N repeats a run; FLASHCORE_FUZZ_DRAWS sets the count.
The GPU tests are marked `gpu` (one planted-fault run proves the judge can fail); the check on the drawer runs
everywhere.
"""

from __future__ import annotations

import math
import os
import random
import secrets
from dataclasses import dataclass

import pytest
import torch

import flashcore
from flashcore import reference
from flashcore.faults import Fault
from flashcore.fp8 import attention_fp8
from tests.random_judge import FP8_SCORE_BITS, judge, rows_first, score_magnitude

SEED = int(os.environ.get("FLASHCORE_FUZZ_SEED") or secrets.randbits(31))
DRAWS = int(os.environ.get("FLASHCORE_FUZZ_DRAWS") or 200)
EDGES = (1, 2, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 383, 385, 511, 513, 1000, 2049, 4097)
MAX_SCORES = 1 << 27  # batch x heads_q x Sq x Sk: the references' score matrices stay under ~1 GB
E4M3 = torch.float8_e4m3fn
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": E4M3}


@dataclass(frozen=True)
class Shape:
    dtype: str
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_kv: int
    head_dim: int
    head_dim_v: int
    causal: bool
    packed: bool  # q, k, v (or k, v) are views of one packed tensor

    def __str__(self) -> str:
        return (f"{self.dtype} B{self.batch} Sq{self.seqlen_q} Sk{self.seqlen_k} Hq{self.heads_q} Hkv{self.heads_kv} "
                f"D{self.head_dim}{'' if self.head_dim_v == self.head_dim else f'/{self.head_dim_v}'}"
                f"{' causal' if self.causal else ''}{' packed' if self.packed else ''}")


def draw_shape(rng: random.Random) -> Shape:
    def length() -> int:
        if rng.random() < 0.45:
            return rng.choice(EDGES)
        return max(1, int(math.exp(rng.uniform(0.0, math.log(6000.0)))))

    heads_kv = rng.choice((1, 1, 2, 3, 4, 8))
    group = rng.choice((1, 1, 2, 4, 5, 8))
    seqlen_q = 1 if rng.random() < 0.15 else length()
    seqlen_k = length()
    batch = rng.randint(1, 3)
    while batch * heads_kv * group * seqlen_q * seqlen_k > MAX_SCORES:
        if batch > 1:
            batch -= 1
        elif seqlen_q >= seqlen_k and seqlen_q > 1:
            seqlen_q = (seqlen_q + 1) // 2
        else:
            seqlen_k = (seqlen_k + 1) // 2
    dtype = rng.choice(("bf16", "fp16", "fp8", "fp8"))
    head_dim = rng.choice((64, 128, 256) if dtype == "fp8" else (64, 96, 128, 192, 256))
    head_dim_v = 128 if head_dim == 192 and rng.random() < 0.5 else head_dim  # DeepSeek's q/k 192, v 128
    return Shape(dtype=dtype, batch=batch, seqlen_q=seqlen_q, seqlen_k=seqlen_k, heads_q=heads_kv * group,
                 heads_kv=heads_kv, head_dim=head_dim, head_dim_v=head_dim_v, causal=rng.random() < 0.5,
                 packed=rng.random() < 0.3)


def inputs(s: Shape, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    def rand(*shape: int) -> torch.Tensor:
        x = torch.randn(*shape, generator=gen, device="cuda")
        return x.to(DTYPES[s.dtype])

    b, d = s.batch, s.head_dim
    if s.head_dim_v != d:
        return rand(b, s.seqlen_q, s.heads_q, d), rand(b, s.seqlen_k, s.heads_kv, d), rand(b, s.seqlen_k, s.heads_kv,
                                                                                        s.head_dim_v)
    if s.packed and s.seqlen_q == s.seqlen_k and s.heads_q == s.heads_kv:
        qkv = rand(b, s.seqlen_q, 3, s.heads_q, d)
        return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    q = rand(b, s.seqlen_q, s.heads_q, d)
    if s.packed:
        kv = rand(b, s.seqlen_k, 2, s.heads_kv, d)
        return q, kv[:, :, 0], kv[:, :, 1]
    return q, rand(b, s.seqlen_k, s.heads_kv, d), rand(b, s.seqlen_k, s.heads_kv, d)


def check(s: Shape, gen: torch.Generator, fault: int = 0) -> str | None:
    """None when the call passes the judge, else what failed. fault: a planted kernel fault (flashcore.faults)."""
    q, k, v = inputs(s, gen)
    out = torch.full((s.batch, s.seqlen_q, s.heads_q, s.head_dim_v), float("nan"), device="cuda",
                     dtype=torch.bfloat16 if s.dtype == "fp8" else DTYPES[s.dtype])
    lse = torch.full((s.batch, s.heads_q, s.seqlen_q), float("nan"), device="cuda")
    scale = s.head_dim ** -0.5
    if s.dtype == "fp8":
        descales = [torch.rand(s.batch, s.heads_kv, generator=gen, device="cuda") * 1.5 + 0.25 for _ in range(3)]
        attention_fp8(q, k, v, q_descale=descales[0], k_descale=descales[1], v_descale=descales[2], causal=s.causal,
                      out=out, lse=lse, debug_fault=fault)
        q32, k32, v32 = (reference.dequantize(x, d, s.heads_kv) for x, d in zip((q, k, v), descales, strict=True))
    else:
        flashcore.attention(q, k, v, causal=s.causal, out=out, lse=lse, debug_fault=fault)
        q32, k32, v32 = q.float(), k.float(), v.float()
    ref, ref_lse = reference.dense(q32, k32, v32, causal=s.causal, scale=scale)
    # The torch computation that rounds as the kernel does: P to the GEMM's input type, the output to out's type.
    pt, _ = reference.dense(q32, k32, v32, causal=s.causal, scale=scale, p_dtype=DTYPES[s.dtype])
    slack = None
    if s.dtype == "fp8":  # [B, Hq, Sq] like lse
        slack = rows_first(ref, FP8_SCORE_BITS * score_magnitude(q32, k32, scale))[1]
    pt = rows_first(pt, ref_lse)[0]
    out, lse = rows_first(out, lse)
    ref, ref_lse = rows_first(ref, ref_lse)
    return judge(out, lse, ref, ref_lse, pt, 2e-3 if s.dtype == "fp8" else 1e-3, slack)


def run_draws(seed: int, draws: int, fault: int = 0) -> list[str]:
    """What failed, one line per failing draw."""
    rng = random.Random(seed)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    failures = []
    for i in range(draws):
        s = draw_shape(rng)
        try:
            problem = check(s, gen, fault)
        except Exception as e:  # a refused shape is a finding too: every drawn shape is within the documented limits
            problem = f"raised {type(e).__name__}: {e}"
        print(f"[random-shapes] {i + 1}/{draws} {s}: {problem or 'ok'}", flush=True)
        if problem:
            failures.append(f"draw {i}: {s}: {problem}")
    return failures


@pytest.mark.gpu
def test_random_shapes_match_the_reference() -> None:
    failures = run_draws(SEED, DRAWS)
    head = f"FLASHCORE_FUZZ_SEED={SEED} ({len(failures)} of {DRAWS} draws failed):\n"
    assert not failures, head + "\n".join(failures)


@pytest.mark.gpu
@pytest.mark.parametrize(("fault", "at_least"), [(Fault.SKIP_ROW, 24), (Fault.TAIL_MASK, 1)])
def test_the_judge_flags_a_planted_fault(fault: Fault, at_least: int) -> None:
    # A fixed seed: the planted run must fail the same way every time. SKIP_ROW leaves a row of every query tile
    # unwritten (every draw); TAIL_MASK lets one key past Sk in (draws whose Sk is not a multiple of the tile's keys,
    # where the leaked weight beats the bound).
    failures = run_draws(1, 24, int(fault))
    assert len(failures) >= at_least, failures


def test_draws_stay_within_the_documented_limits() -> None:
    rng = random.Random(SEED)
    for _ in range(200):
        s = draw_shape(rng)
        assert s.head_dim in ((64, 128, 256) if s.dtype == "fp8" else (64, 96, 128, 192, 256))
        assert s.head_dim_v == s.head_dim or (s.head_dim, s.head_dim_v) == (192, 128)
        assert s.heads_q % s.heads_kv == 0
        assert s.batch * s.heads_q * s.seqlen_q * s.seqlen_k <= MAX_SCORES
        assert min(s.batch, s.seqlen_q, s.seqlen_k) >= 1
