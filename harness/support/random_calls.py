"""Random attention calls, drawn fresh per run, each judged against the float32 reference (harness/support/
random_judge.py): the random-shapes gate (harness/gates/random_shapes.py) and tests/test_random_*_gpu.py run them.

- dense: flashcore.attention (bf16, fp16; every head dim of the table, multiples of 8 up to 256, and its v pairs) and
  flashcore.attention_fp8 (E4M3, head dims 64/128/256, random [B, Hkv] descales): batch, K/V heads, a GQA group,
  query and key lengths (often at a tile edge; decode rows; Sq > Sk, whose first rows see no key under causal
  masking), causal or not, sometimes q, k, v as views of one packed qkv (or kv) tensor; out and lse poisoned (NaN);
- serving: flash_attn_varlen_func (1-5 packed sequences, zero-length ones included, seqused_k and seqused_q
  sometimes: only the used query rows are judged) and flash_attn_with_kvcache (one int length or per-sequence
  lengths, cache slots, paged caches in a random page order (pages of 1-256 keys), slots with pages, left-padded
  caches, packed queries (cu_seqlens_q), appends of 0-64 tokens, decode or a few query rows; the cache must then
  hold exactly the appended tokens), both with sliding windows and soft-capping sometimes.
`fc` is the flashcore module (or the gate's copy with a planted kernel fault); `device` "cuda" (a CPU run goes
through fallback="sdpa", which the tests use to check this module without a GPU).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from flashcore import head_dims
from harness.support.fp8 import DESCALE_RANGE
from harness.support.gpu import torch_dtype
from harness.support.random_judge import Judge, judge, lse_rows, out_rows, score_magnitude

if TYPE_CHECKING:
    import torch

EDGES = (1, 2, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 383, 385, 511, 513, 1000, 2049, 4097)
SERVING_EDGES = (0, 1, 2, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257, 1000)


def randn(gen: torch.Generator, device: str, dtype: str, *shape: int) -> torch.Tensor:
    """Standard-normal values drawn from `gen`, rounded to `dtype` (harness/schema.py's names: bf16, fp16, e4m3)."""
    import torch

    return torch.randn(*shape, generator=gen, device=device).to(torch_dtype(dtype))


def length(rng: random.Random, edges: tuple[int, ...], top: float) -> int:
    """A sequence length: a tile edge 45 % of the time, else log-uniform in [1, top]."""
    if rng.random() < 0.45:
        return rng.choice(edges)
    return max(1, int(math.exp(rng.uniform(0.0, math.log(top)))))


@dataclass(frozen=True)
class Failure:
    family: str  # "dense" or "serving"
    index: int  # the draw's number in its family (with the seed, it repeats the draw)
    what: str
    problem: str


# ---- dense calls ------------------------------------------------------------------------------------------------


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
        dv = "" if self.head_dim_v == self.head_dim else f"/{self.head_dim_v}"
        return (f"{self.dtype} B{self.batch} Sq{self.seqlen_q} Sk{self.seqlen_k} Hq{self.heads_q} Hkv{self.heads_kv} "
                f"D{self.head_dim}{dv}{' causal' if self.causal else ''}{' packed' if self.packed else ''}")


def draw_shape(rng: random.Random, max_scores: int) -> Shape:
    """One dense call's shape; batch x heads_q x Sq x Sk <= max_scores (the references' score matrices)."""
    heads_kv = rng.choice((1, 1, 2, 3, 4, 8))
    group = rng.choice((1, 1, 2, 4, 5, 8))
    seqlen_q = 1 if rng.random() < 0.15 else length(rng, EDGES, 6000.0)
    seqlen_k = length(rng, EDGES, 6000.0)
    batch = rng.randint(1, 3)
    while batch * heads_kv * group * seqlen_q * seqlen_k > max_scores:
        if batch > 1:
            batch -= 1
        elif seqlen_q >= seqlen_k and seqlen_q > 1:
            seqlen_q = (seqlen_q + 1) // 2
        else:
            seqlen_k = (seqlen_k + 1) // 2
    dtype = rng.choice(("bf16", "fp16", "e4m3", "e4m3"))
    head_dim = rng.choice(head_dims.FP8 if dtype == "e4m3" else head_dims.SUPPORTED)
    # v's head dim: its own, or (half the time) another the table pairs with it (DeepSeek's q/k 192, v 128)
    others = head_dims.HEAD_DIM_V[head_dim][1:] if dtype != "e4m3" else ()
    head_dim_v = rng.choice(others) if others and rng.random() < 0.5 else head_dim
    return Shape(dtype=dtype, batch=batch, seqlen_q=seqlen_q, seqlen_k=seqlen_k, heads_q=heads_kv * group,
                 heads_kv=heads_kv, head_dim=head_dim, head_dim_v=head_dim_v, causal=rng.random() < 0.5,
                 packed=rng.random() < 0.3)


def dense_inputs(s: Shape, gen: torch.Generator, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rand = functools.partial(randn, gen, device, s.dtype)
    b, d = s.batch, s.head_dim
    if s.head_dim_v != d:
        v = rand(b, s.seqlen_k, s.heads_kv, s.head_dim_v)
        return rand(b, s.seqlen_q, s.heads_q, d), rand(b, s.seqlen_k, s.heads_kv, d), v
    if s.packed and s.seqlen_q == s.seqlen_k and s.heads_q == s.heads_kv:
        qkv = rand(b, s.seqlen_q, 3, s.heads_q, d)
        return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    q = rand(b, s.seqlen_q, s.heads_q, d)
    if s.packed:
        kv = rand(b, s.seqlen_k, 2, s.heads_kv, d)
        return q, kv[:, :, 0], kv[:, :, 1]
    return q, rand(b, s.seqlen_k, s.heads_kv, d), rand(b, s.seqlen_k, s.heads_kv, d)


def check_dense(fc: ModuleType, s: Shape, gen: torch.Generator, j: Judge, device: str) -> str | None:
    """One dense call: None when it passes the judge, else what failed."""
    import torch

    from flashcore import reference

    q, k, v = dense_inputs(s, gen, device)
    fp8 = s.dtype == "e4m3"
    out = torch.full((s.batch, s.seqlen_q, s.heads_q, s.head_dim_v), float("nan"), device=device,
                     dtype=torch.bfloat16 if fp8 else torch_dtype(s.dtype))
    lse = torch.full((s.batch, s.heads_q, s.seqlen_q), float("nan"), device=device)
    scale = s.head_dim ** -0.5
    fallback = {} if device == "cuda" else {"fallback": "sdpa"}
    if fp8:
        lo, hi = DESCALE_RANGE
        ds = [torch.rand(s.batch, s.heads_kv, generator=gen, device=device) * (hi - lo) + lo for _ in range(3)]
        fc.attention_fp8(q, k, v, q_descale=ds[0], k_descale=ds[1], v_descale=ds[2], causal=s.causal, out=out,
                         lse=lse)
        q32, k32, v32 = (reference.dequantize(x, d, s.heads_kv) for x, d in zip((q, k, v), ds, strict=True))
    else:
        fc.attention(q, k, v, causal=s.causal, out=out, lse=lse, **fallback)
        q32, k32, v32 = q.float(), k.float(), v.float()
    ref, ref_lse = reference.dense(q32, k32, v32, causal=s.causal, scale=scale)
    # The torch computation that rounds as the kernel does: P to the GEMM's input type, the output to out's type.
    pt, _ = reference.dense(q32, k32, v32, causal=s.causal, scale=scale, p_dtype=torch_dtype(s.dtype))
    slack = lse_rows(j.fp8_score_share * score_magnitude(q32, k32, scale)) if fp8 else None
    return judge(j, out_rows(out), lse_rows(lse), out_rows(ref), lse_rows(ref_lse), out_rows(pt), fp8, slack)


def run_dense(fc: ModuleType, seed: int, draws: int, j: Judge, max_scores: int, device: str = "cuda",
              progress: Callable[[int, str, str | None], None] | None = None) -> list[Failure]:
    """`draws` dense calls from `seed`; the failing ones (an exception is a failure too: every drawn call is within
    the documented limits)."""
    import torch

    rng = random.Random(seed)
    gen = torch.Generator(device=device).manual_seed(seed)
    failures = []
    for i in range(draws):
        s = draw_shape(rng, max_scores)
        try:
            problem = check_dense(fc, s, gen, j, device)
        except Exception as e:  # noqa: BLE001 - the draw's verdict
            problem = f"raised {type(e).__name__}: {e}"
        if progress is not None:
            progress(i, str(s), problem)
        if problem:
            failures.append(Failure("dense", i, str(s), problem))
    return failures


# ---- serving calls ----------------------------------------------------------------------------------------------


def serving_features(rng: random.Random) -> dict[str, Any]:
    """What every serving draw shares: input type, heads, head dim, causal, window, softcap, chunks (FA3's
    attention_chunk: below, at and above a K/V block)."""
    heads_kv = rng.choice((1, 2, 4))
    window = (-1, -1)
    if rng.random() < 0.3:
        window = (rng.choice((-1, 0, 1, 63, 200)), rng.choice((-1, 0, 1, 17, 128)))
    return {"dtype": rng.choice(("bf16", "fp16")), "heads_kv": heads_kv, "heads_q": heads_kv * rng.choice((1, 2, 4)),
            "head_dim": rng.choice(head_dims.SUPPORTED), "causal": rng.random() < 0.5, "window": window,
            "softcap": rng.choice((5.0, 30.0)) if rng.random() < 0.3 else 0.0,
            "chunk": rng.choice((7, 64, 128, 300)) if rng.random() < 0.2 else 0}


def describe(f: dict[str, Any]) -> str:
    extra = (" causal" if f["causal"] else "") + (f" window{f['window']}" if f["window"] != (-1, -1) else "")
    extra += f" softcap{f['softcap']:g}" if f["softcap"] else ""
    extra += f" chunk{f['chunk']}" if f["chunk"] else ""
    return f"{f['dtype']} Hq{f['heads_q']} Hkv{f['heads_kv']} D{f['head_dim']}{extra}"


def sequence_refs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  f: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One sequence's reference out [Sq, H, D] and lse [H, Sq], and out when P is rounded as the kernel rounds it."""
    from flashcore import reference

    kw = {"causal": f["causal"], "scale": f["head_dim"] ** -0.5, "window": f["window"], "softcap": f["softcap"],
          "chunk": f["chunk"]}
    ref, ref_lse = reference.sequence(q.float(), k.float(), v.float(), **kw)
    pt, _ = reference.sequence(q.float(), k.float(), v.float(), p_dtype=torch_dtype(f["dtype"]), **kw)
    return ref, ref_lse, pt


def packed_refs(parts: Iterable[tuple[slice, torch.Tensor, torch.Tensor, torch.Tensor]], f: dict[str, Any],
                rows: int, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """sequence_refs of several sequences in the judge's packed layout (out [rows, H, D], lse [H, rows]): parts are
    (the sequence's rows, its q, k, v); rows in no part stay out 0 / lse -inf."""
    import torch

    ref = torch.zeros(rows, f["heads_q"], f["head_dim"], device=device)
    pt = torch.zeros_like(ref)
    ref_lse = torch.full((f["heads_q"], rows), -math.inf, device=device)
    for rs, q, k, v in parts:
        ref[rs], ref_lse[:, rs], pt[rs] = sequence_refs(q, k, v, f)
    return ref, ref_lse, pt
