"""Inputs, calls and references of the workloads that are not plain dense ones (harness/schema.py: the varlen,
kvcache and paged layouts, sliding windows, soft-capping): what the correctness, determinism and benchmark code runs
on them. A plain dense workload keeps its own path (harness/support/gpu.py, torch SDPA as the baseline).

Inputs follow flashcore.serving (FA3's layouts): varlen packs the sequences' tokens ([total, H, D] with int32
cu_seqlens); kvcache gives each sequence seqlen_k cache slots of which the first seqlens_k[b] are its keys; paged
cuts those caches into pages of page_size keys stored in a shuffled order behind an int32 page table. Values are
standard normal (q times q_scale); with `nan_tails` the cache rows past each sequence's length hold NaN, which
FlashCore promises never to read into a result (flashcore/serving.py).

The accuracy baseline is the one FA3's tests use where torch has no kernel for the call (SDPA has no per-sequence
lengths and no soft-capping): the same attention computed by torch in the inputs' 16-bit dtype (scores, softmax and
P V rounded as a 16-bit kernel rounds them), judged like ours against the fp32 reference of flashcore/reference.py.
"""

from __future__ import annotations

import itertools
import math
from types import ModuleType
from typing import TYPE_CHECKING, Any

from harness.schema import Workload
from harness.support import gpu, reference
from harness.support.batch import Batch

if TYPE_CHECKING:
    import torch

BASELINE = "torch 16-bit"  # the name the reports give the baseline of these workloads (FP8: fp8.BASELINE)
CHUNK_BYTES = 256 << 20  # 16-bit scores per chunk of query rows in the baseline


def make(wl: Workload, seed: int, device: str, nan_tails: bool = False) -> Batch:
    """Fresh random inputs for `wl` (any layout but plain dense)."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    dt = gpu.torch_dtype(wl.dtype)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=device, dtype=dt)

    hq, hkv, d, dv = wl.heads_q, wl.heads_kv, wl.head_dim, wl.dim_v
    if wl.layout == "varlen":
        sq, sk = list(wl.seqlens_q), list(wl.seqlens_k)
        q, k, v = randn(sum(sq), hq, d), randn(sum(sk), hkv, d), randn(sum(sk), hkv, dv)
        cu_q, cu_k = offsets(sq, device), offsets(sk, device)
        return Batch(wl, q.mul_(wl.q_scale), k, v, cu_q=cu_q, cu_k=cu_k)
    q = randn(wl.batch, wl.seqlen_q, hq, d).mul_(wl.q_scale)
    k, v = randn(wl.batch, wl.seqlen_k, hkv, d), randn(wl.batch, wl.seqlen_k, hkv, dv)
    if wl.dense:
        return Batch(wl, q, k, v)
    if nan_tails:
        for b, n in enumerate(wl.seqlens_k):
            k[b, n:], v[b, n:] = math.nan, math.nan
    lengths = torch.tensor(wl.seqlens_k, dtype=torch.int32, device=device)
    batch = Batch(wl, q, k, v, lengths=lengths)
    if wl.layout == "paged":
        per = wl.seqlen_k // wl.page_size
        order = torch.randperm(wl.batch * per, generator=g, device=device)
        pages = torch.empty_like(k.view(-1, wl.page_size, hkv, d))
        pages[order] = k.view(-1, wl.page_size, hkv, d)
        v_pages = torch.empty_like(v.view(-1, wl.page_size, hkv, dv))
        v_pages[order] = v.view(-1, wl.page_size, hkv, dv)
        batch.k, batch.v, batch.page_table = pages, v_pages, order.to(torch.int32).view(wl.batch, per)
    return batch


def offsets(lengths: list[int], device: str) -> torch.Tensor:
    import torch

    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)


def inputs_for(wl: Workload, seed: int, device: str, nan_tails: bool = True) -> Any:
    """A draw of inputs in the form run() takes: (q, k, v) for a plain dense workload, else a Batch (by default with
    NaN in the cache rows past each sequence's length; FP8 inputs with their descales)."""
    if wl.fp8:
        from harness.support import fp8

        return fp8.make(wl, seed, device)
    return gpu.make_inputs(wl, seed, device) if wl.plain else make(wl, seed, device, nan_tails)


def run(fc: ModuleType, wl: Workload, inputs: Any, out: torch.Tensor, lse: torch.Tensor, **options: Any) -> None:
    """One call of flashcore on inputs_for's draw into the given (poisoned) buffers; waits for it."""
    if isinstance(inputs, Batch):
        import torch

        inputs.flashcore(fc, out, lse, **options)()
        if inputs.q.is_cuda:
            torch.cuda.synchronize()
    else:
        q, k, v = inputs
        gpu.call_kernel(fc, wl, q, k, v, out, lse, **options)


def baseline(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: float,
             window: tuple[int, int], softcap: float) -> torch.Tensor:
    """One sequence (q [Sq, Hq, D], k and v [Sk, Hkv, D]) in q's 16-bit dtype: out [Sq, Hq, Dv] (0 on rows that see
    no key). The scaled scores, their soft-capping and softmax's output are rounded to 16 bits as FA3's tests'
    low-precision reference rounds them."""
    import torch

    from flashcore import reference as truth

    sq, hq, _ = q.shape
    sk, hkv = k.shape[0], k.shape[1]
    out = torch.zeros(sq, hq, v.shape[2], dtype=q.dtype, device=q.device)
    if sq == 0 or sk == 0:
        return out
    kt = k.repeat_interleave(hq // hkv, dim=1).permute(1, 2, 0)  # [Hq, D, Sk]
    vt = v.repeat_interleave(hq // hkv, dim=1).permute(1, 0, 2)  # [Hq, Sk, Dv]
    step = max(1, CHUNK_BYTES // max(1, 2 * hq * sk))
    for start in range(0, sq, step):
        rows = slice(start, min(start + step, sq))
        s = torch.matmul((q[rows] * scale).permute(1, 0, 2), kt)  # [Hq, n, Sk], 16-bit
        if softcap > 0:
            s = torch.tanh(s / softcap) * softcap
        s = s.masked_fill(~truth.visible(sq, sk, rows, causal, window, q.device), -math.inf)
        p = torch.softmax(s, dim=-1).nan_to_num_(0.0)  # a row that sees no key: NaN -> 0
        out[rows] = torch.matmul(p, vt).permute(1, 0, 2)
    return out


def compare(batch: Batch, out: torch.Tensor, lse: torch.Tensor) -> reference.ErrorStats:
    """Errors of ours and of the 16-bit baseline against the fp32 reference, sequence by sequence, and of our LSE.
    FP8 inputs: harness/support/fp8.py's reference and baseline."""
    import torch

    from flashcore import reference as truth

    if batch.descales is not None:
        from harness.support import fp8

        return fp8.compare(batch, out, lse)
    wl = batch.wl
    scale = 1.0 / math.sqrt(wl.head_dim)
    kw: dict[str, Any] = {"causal": wl.causal, "scale": scale, "window": wl.window, "softcap": wl.softcap}
    acc = reference.Errors()
    with reference.true_fp32():
        for where, q, k, v in batch.sequences():
            ref, lse_ref = truth.sequence(q, k, v, **kw)  # [Sq, Hq, Dv], [Hq, Sq]
            base = baseline(q, k, v, **kw)
            ours_lse = lse[:, where] if wl.layout == "varlen" else lse[where]
            acc.add(out[where], base, ref, ours_lse, lse_ref, torch.isfinite(lse_ref))
    return acc.stats()
