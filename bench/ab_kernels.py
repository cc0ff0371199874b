"""A/B timing of FlashCore builds side by side with FA3 and cuDNN, for kernel development (docs/perf-notes.md).

    python3 bench/ab_kernels.py NAME=build_a/libflashcore.so NAME2=build_b/libflashcore.so[@l2=PCT] [--shapes a,b]
        [--rounds N] [--flush-mib 256]

Each build is loaded with ctypes (its own handle, so several builds run in one process), checked against an fp32
reference on fresh random inputs (error <= 2 x SDPA's error + 1e-5 on a sample of heads, every element written; FP8
shapes, `fp8-*`: FA3's FP8 rule on batch entry 0, against torch rounding P to E4M3), then every backend of a shape is
timed in the same interleaved rounds (CUDA events around a batch of calls). Prints per-call times and paired ratios
(median over rounds of the per-round ratio) against the first build, and which builds' outputs differ from its bits.
A build may name a launch setting after `@`: `l2=PCT` (fc_params.l2_section_pct: the share of L2 one section of the
dynamic tile order may fill) or `schedule=N` (fc_params.schedule: 1 static, 2 dynamic, 3 static without the stream-K
tail where the library has one, docs/perf-notes.md 8.44), so one library can be timed against itself with another
setting.
The gates judge speed with the benchmark suite (make bench / gate-phase4); this is the quick loop between steps.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from flashcore import _lib  # noqa: E402
from harness.bench.backends import Unavailable, import_fa3  # noqa: E402
from harness.bench.timing import L2Flusher, sleep_cycles  # noqa: E402
from harness.support import fp8 as fp8_inputs  # noqa: E402

# name: (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, dtype)
SHAPES = {
    "d128": (4, 16, 16, 8192, 8192, 128, False, "bf16"),
    "d128-causal": (4, 16, 16, 8192, 8192, 128, True, "bf16"),
    "d64": (4, 16, 16, 8192, 8192, 64, False, "bf16"),
    "d256": (4, 16, 16, 8192, 8192, 256, False, "bf16"),
    "d256-causal": (4, 16, 16, 8192, 8192, 256, True, "bf16"),
    # the head dims of their own kernels since they stopped running padded on 128 and 256 (FA3 runs both natively)
    "d96": (4, 16, 16, 8192, 8192, 96, False, "bf16"),
    "d96-causal": (4, 16, 16, 8192, 8192, 96, True, "bf16"),
    "d192": (4, 16, 16, 8192, 8192, 192, False, "bf16"),
    "d192-causal": (4, 16, 16, 8192, 8192, 192, True, "bf16"),
    # vLLM's head dims that FA3 runs padded (160 on its 192 kernel, 224 on 256) and FlashCore on kernels of their own
    "d160": (4, 16, 16, 8192, 8192, 160, False, "bf16"),
    "d160-causal": (4, 16, 16, 8192, 8192, 160, True, "bf16"),
    "s2k-d160-causal": (16, 16, 16, 2048, 2048, 160, True, "bf16"),
    "d224": (4, 16, 16, 8192, 8192, 224, False, "bf16"),
    "d224-causal": (4, 16, 16, 8192, 8192, 224, True, "bf16"),
    "s2k-d224-causal": (16, 16, 16, 2048, 2048, 224, True, "bf16"),
    "decode-d160": (64, 32, 8, 1, 8192, 160, False, "bf16"),
    "decode-d224": (64, 32, 8, 1, 8192, 224, False, "bf16"),
    # hdim 32: FA3 runs it on its 64 kernel
    "d32": (4, 16, 16, 8192, 8192, 32, False, "bf16"),
    "d32-causal": (4, 16, 16, 8192, 8192, 32, True, "bf16"),
    "s2k-d32-causal": (16, 16, 16, 2048, 2048, 32, True, "bf16"),
    "decode-d32": (64, 32, 8, 1, 8192, 32, False, "bf16"),
    "d128-fp16": (8, 16, 16, 4096, 4096, 128, False, "fp16"),
    "s1k-causal": (16, 16, 16, 1024, 1024, 128, True, "bf16"),
    "s2k": (16, 16, 16, 2048, 2048, 128, False, "bf16"),
    "s2k-causal": (16, 16, 16, 2048, 2048, 128, True, "bf16"),
    "s2k-d64-causal": (16, 16, 16, 2048, 2048, 64, True, "bf16"),
    "gqa-causal": (2, 32, 8, 2048, 2048, 128, True, "bf16"),
    "odd-heads": (3, 7, 7, 4097, 4097, 128, False, "bf16"),
    "decode": (64, 32, 32, 1, 8192, 128, False, "bf16"),
    "decode-b1-gqa": (1, 32, 8, 1, 65536, 128, False, "bf16"),
    # long context at batch 1 (issue 12: report only); no fp32 reference check past MAX_CHECK_KEYS keys
    "long-64k": (1, 16, 16, 65536, 65536, 128, False, "bf16"),
    "long-128k": (1, 16, 16, 131072, 131072, 128, False, "bf16"),
    "long-64k-causal": (1, 16, 16, 65536, 65536, 128, True, "bf16"),
    "long-128k-causal": (1, 16, 16, 131072, 131072, 128, True, "bf16"),
    # FP8 (E4M3, descales drawn as harness/support/fp8.py does): perf-fp8's hdim 128/256 prefill, and non-causal
    # calls of 4K query rows whose key counts give the causal S4K tiles' average block count (11.3 of 192 keys) and
    # half of it: per-tile against per-block cost (docs/perf-notes.md step 8.18)
    "fp8-s4k": (4, 16, 16, 4096, 4096, 128, False, "fp8"),
    "fp8-s4k-causal": (4, 16, 16, 4096, 4096, 128, True, "fp8"),
    "fp8-s8k": (4, 16, 16, 8192, 8192, 128, False, "fp8"),
    "fp8-s8k-causal": (4, 16, 16, 8192, 8192, 128, True, "fp8"),
    "fp8-s4k-d256-causal": (4, 16, 16, 4096, 4096, 256, True, "fp8"),
    "fp8-s4k-d256": (4, 16, 16, 4096, 4096, 256, False, "fp8"),
    "fp8-s8k-d256-causal": (4, 16, 16, 8192, 8192, 256, True, "fp8"),
    "fp8-s8k-d256": (4, 16, 16, 8192, 8192, 256, False, "fp8"),
    "fp8-s8k-d64": (4, 16, 16, 8192, 8192, 64, False, "fp8"),
    "fp8-s8k-d64-causal": (4, 16, 16, 8192, 8192, 64, True, "fp8"),
    "fp8-s4k-k2176": (4, 16, 16, 4096, 2176, 128, False, "fp8"),
    "fp8-s4k-k1088": (4, 16, 16, 4096, 1088, 128, False, "fp8"),
    # GQA (4 query heads per K/V head) under causal masking: the V^T copy's work order by sections of K/V heads
    "fp8-gqa-causal": (2, 32, 8, 4096, 4096, 128, True, "fp8"),
}
DEFAULT_SHAPES = [s for s in SHAPES if not s.startswith(("long-", "fp8-"))]
MAX_CHECK_KEYS = 32768  # the reference's fp32 score matrix of one head: S^2 * 4 bytes (4 GB at 32K)
E4M3 = torch.float8_e4m3fn


class Build:
    def __init__(self, name: str, spec: str) -> None:
        self.name = name
        path, _, setting = spec.partition("@")
        self.l2_pct = self.schedule = 0
        if setting:
            key, _, value = setting.partition("=")
            if key == "l2" and value.isdigit() and 0 <= int(value) <= 100:
                self.l2_pct = int(value)
            elif key == "schedule" and value.isdigit() and 0 <= int(value) <= 3:
                self.schedule = int(value)
            else:
                raise SystemExit(f"{name}: unknown setting {setting!r} (l2=PCT, 0..100; schedule=0..3)")
        self.lib = ctypes.CDLL(path)
        self.lib.fc_attention_forward.argtypes = [ctypes.POINTER(_lib.FcParams), ctypes.c_void_p]
        self.lib.fc_plan.argtypes = [ctypes.POINTER(_lib.FcParams), ctypes.POINTER(_lib.FcPlanInfo)]
        self.lib.fc_last_error.restype = ctypes.c_char_p

    def prepare(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                causal: bool, descales: tuple[torch.Tensor, ...] = ()):
        def strides(t: torch.Tensor) -> _lib.Strides:
            return _lib.Strides(t.stride(0), t.stride(1), t.stride(2))

        dtype = {torch.bfloat16: _lib.FC_BF16, torch.float16: _lib.FC_FP16, E4M3: _lib.FC_E4M3}[q.dtype]
        p = _lib.FcParams(
            q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), o=out.data_ptr(), lse=lse.data_ptr(),
            batch=q.shape[0], heads_q=q.shape[2], heads_kv=k.shape[2], seqlen_q=q.shape[1], seqlen_k=k.shape[1],
            head_dim=q.shape[3], q_stride=strides(q), k_stride=strides(k), v_stride=strides(v),
            o_stride=strides(out), softmax_scale=q.shape[3] ** -0.5, causal=int(causal), dtype=dtype,
            l2_section_pct=self.l2_pct, schedule=self.schedule,
        )  # fmt: skip
        for name, t in zip(("q_descale", "k_descale", "v_descale"), descales, strict=False):
            setattr(p, name, t.data_ptr())
            getattr(p, name + "_stride")[:] = [t.stride(0), t.stride(1)]
        info = _lib.FcPlanInfo()
        if self.lib.fc_plan(p, info) != 0:
            raise RuntimeError(f"{self.name}: fc_plan: {self.lib.fc_last_error().decode()}")
        ws = torch.empty(max(info.workspace_bytes, 16), dtype=torch.uint8, device=q.device)
        p.workspace, p.workspace_bytes = ws.data_ptr(), info.workspace_bytes
        stream = torch.cuda.current_stream().cuda_stream

        def call() -> None:
            if self.lib.fc_attention_forward(p, stream) != 0:
                raise RuntimeError(f"{self.name}: {self.lib.fc_last_error().decode()}")

        call.keep = (ws, p)  # type: ignore[attr-defined]
        return call, info


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, upcast: bool = False) -> torch.Tensor:
    """[B, S, H, D] attention through SDPA (bottom-right causal, GQA by repeating K/V heads)."""
    group = q.shape[2] // k.shape[2]
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    if upcast:
        qt, kt, vt = qt.float(), kt.float(), vt.float()
    kt, vt = kt.repeat_interleave(group, 1), vt.repeat_interleave(group, 1)
    mask = None
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        mask = torch.ones(sq, sk, dtype=torch.bool, device=q.device).tril(sk - sq)
    return F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask).transpose(1, 2)


def check(name: str, out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> str:
    """Error against an fp32 reference on at most 2 (batch, kv-group) slices, judged as the correctness gate does."""
    if not torch.isfinite(out).all():
        return f"{name}: NaN/Inf or unwritten (poison) elements"
    group = q.shape[2] // k.shape[2]
    worst = ""
    for b in sorted({0, q.shape[0] - 1}):
        for h in sorted({0, k.shape[2] - 1}):
            qs = q[b:b + 1, :, h * group:(h + 1) * group]
            ks, vs = k[b:b + 1, :, h:h + 1], v[b:b + 1, :, h:h + 1]
            ref = sdpa(qs, ks, vs, causal, upcast=True)
            ours = (out[b:b + 1, :, h * group:(h + 1) * group].float() - ref).abs().max().item()
            base = (sdpa(qs, ks, vs, causal).float() - ref).abs().max().item()
            if not ours <= 2 * base + 1e-5:
                worst = f"{name}: error {ours:.2e} > 2 x SDPA's {base:.2e} + 1e-5 (batch {b}, kv head {h})"
    return worst


def draw_inputs(shape: tuple) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """Random q, k, v [B, S, H, D] for a SHAPES entry from torch's default generator. `fp8` shapes: E4M3 values and
    descales (q, k, v), float32 [B, Hkv], in the FP8 workloads' range (harness/support/fp8.py); otherwise ()."""
    b, hq, hkv, sq, sk, d, _, dt = shape
    dtype = torch.float16 if dt == "fp16" else torch.bfloat16
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype)
    k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype)
    v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype)
    if dt != "fp8":
        return q, k, v, ()
    lo, hi = fp8_inputs.DESCALE_RANGE
    q, k, v = (t.to(E4M3) for t in (q, k, v))
    return q, k, v, tuple(torch.rand(b, hkv, device="cuda") * (hi - lo) + lo for _ in range(3))


def fa3_descales(descales: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    """FA3's keyword arguments for draw_inputs' descales (none for 16-bit inputs)."""
    return dict(zip(("q_descale", "k_descale", "v_descale"), descales, strict=False))


def load_fa3() -> tuple[Callable[..., object] | None, frozenset[str]]:
    """FA3's forward and the dtypes it takes ("bf16", "fp16", "e4m3"), or (None, frozenset()) with the reason
    printed."""
    try:
        fa3, _, dtypes = import_fa3()
    except Unavailable as e:
        print(f"FA3 not available: {e}")
        return None, frozenset()
    return fa3, dtypes


def fa3_call(fa3: Callable[..., object] | None, dtypes: frozenset[str], shape: tuple, q: torch.Tensor,
             k: torch.Tensor, v: torch.Tensor, descales: tuple[torch.Tensor, ...]) -> Callable[[], object] | None:
    """A call of FA3 on a SHAPES entry's inputs (draw_inputs'), or None where FA3 is missing or lacks the dtype."""
    causal, dt = shape[6], shape[7]
    if fa3 is None or ("e4m3" if dt == "fp8" else dt) not in dtypes:
        return None
    kw = fa3_descales(descales)
    return lambda: fa3(q, k, v, causal=causal, num_splits=0, **kw)


def fp8_references(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, descales: tuple[torch.Tensor, ...],
                   causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch entry 0's float32 attention of the dequantized inputs, and the torch implementation that rounds P to
    E4M3 as the kernel does, rounded to bf16: harness/support/fp8.py compare's two references, computed once per
    shape here (compare recomputes them for every output it judges)."""
    from flashcore import reference as truth
    from harness.support import reference

    hkv = k.shape[2]
    q0, k0, v0 = (truth.dequantize(x[:1], s[:1], hkv)[0] for x, s in zip((q, k, v), descales, strict=True))
    scale = q.shape[3] ** -0.5
    with reference.true_fp32():
        ref, _ = truth.sequence(q0, k0, v0, causal=causal, scale=scale)
        base, _ = truth.sequence(q0, k0, v0, causal=causal, scale=scale, p_dtype=E4M3)
    return ref, base.to(torch.bfloat16)


def check_fp8(name: str, out: torch.Tensor, refs: tuple[torch.Tensor, torch.Tensor]) -> str:
    """FA3's FP8 rule on batch entry 0: error <= 2 x the E4M3-P baseline's error + 1e-5, every element finite."""
    if not torch.isfinite(out).all():
        return f"{name}: NaN/Inf or unwritten (poison) elements"
    ref, base = refs
    ours, theirs = (out[0].float() - ref).abs().max().item(), (base.float() - ref).abs().max().item()
    if not ours <= 2 * theirs + 1e-5:
        return f"{name}: error {ours:.2e} > 2 x the E4M3-P baseline's {theirs:.2e} + 1e-5 (batch 0)"
    return ""


def time_rounds(calls: dict[str, object], rounds: int, batch_ms: float = 20.0,
                flush: L2Flusher | None = None) -> dict[str, list[float]]:
    """Per-call ms per round for every backend, backends interleaved (rotated order) inside each round.

    With `flush`, every timed call is a single call after an L2 flush and a 200 us sleep (the suite's method: cold
    L2, the CPU ahead of the GPU); without it, a batch of back-to-back calls per round (warm L2).
    """
    if flush is not None:
        return _time_flushed(calls, rounds, flush)
    reps = {}
    for name, fn in calls.items():
        for _ in range(3):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        reps[name] = max(1, min(200, int(batch_ms / max(start.elapsed_time(end), 1e-3))))
    times: dict[str, list[float]] = {n: [] for n in calls}
    names = list(calls)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = calls[name]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps[name]):
                fn()
            end.record()
            torch.cuda.synchronize()
            times[name].append(start.elapsed_time(end) / reps[name])
    return times


def _time_flushed(calls: dict[str, object], rounds: int, flush: L2Flusher) -> dict[str, list[float]]:
    for fn in calls.values():
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {n: [] for n in calls}
    names = list(calls)
    cycles = sleep_cycles(0.2)
    for r in range(rounds):
        events = []
        for name in names[r % len(names):] + names[:r % len(names)]:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flush()
            torch.cuda._sleep(cycles)  # the launches below are queued before the GPU reaches them
            start.record()
            calls[name]()
            end.record()
            events.append((name, start, end))
        torch.cuda.synchronize()
        for name, start, end in events:
            times[name].append(start.elapsed_time(end))
    return times


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+",
                    help="NAME=path/to/libflashcore.so[@l2=PCT|@schedule=N] (the first is the reference)")
    ap.add_argument("--shapes", default=",".join(DEFAULT_SHAPES), help=f"from: {', '.join(SHAPES)}")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--flush-mib", type=int, default=0,
                    help="time single calls after writing this many MiB (L2 cold, as the suite does); 0: warm batches")
    args = ap.parse_args()
    flush = L2Flusher(args.flush_mib) if args.flush_mib else None
    builds = [Build(*b.split("=", 1)) for b in args.builds]
    fa3, fa3_dtypes = load_fa3()
    failures = 0
    rows = []
    vs: dict[str, dict[str, dict[str, float]]] = {}
    for shape in args.shapes.split(","):
        b, hq, hkv, sq, sk, d, causal, dt = SHAPES[shape]
        fp8_in = dt == "fp8"
        dtype = torch.bfloat16 if dt in ("bf16", "fp8") else torch.float16
        torch.manual_seed(hash(shape) % 1000)
        q, k, v, descales = draw_inputs(SHAPES[shape])
        calls: dict[str, object] = {}
        first_out: torch.Tensor | None = None
        refs: tuple[torch.Tensor, torch.Tensor] | None = None
        for build in builds:
            out = torch.full(q.shape, float("nan"), device="cuda", dtype=dtype)
            lse = torch.empty(b, hq, sq, device="cuda")
            fn, info = build.prepare(q, k, v, out, lse, causal, descales)
            fn()
            torch.cuda.synchronize()
            if not args.no_check and sk <= MAX_CHECK_KEYS:
                if fp8_in and refs is None:
                    refs = fp8_references(q, k, v, descales, causal)
                msg = check_fp8(build.name, out, refs) if refs is not None else check(build.name, out, q, k, v, causal)
                if msg:
                    failures += 1
                    print(f"FAIL {shape}: {msg}")
            if first_out is None:
                first_out = out
            elif not torch.equal(out, first_out):
                print(f"{shape}: {build.name} differs from {builds[0].name} (max |diff| "
                      f"{(out.float() - first_out.float()).abs().max().item():.3g})")
            calls[build.name] = fn
        fa3_fn = fa3_call(fa3, fa3_dtypes, SHAPES[shape], q, k, v, descales)
        if fa3_fn is not None:
            calls["fa3"] = fa3_fn
        if hq == hkv and not fp8_in:
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
            from torch.nn.attention import SDPBackend, sdpa_kernel

            def cudnn(qt=qt, kt=kt, vt=vt, c=causal) -> None:
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    F.scaled_dot_product_attention(qt, kt, vt, is_causal=c)

            try:
                cudnn()
                calls["cudnn"] = cudnn
            except RuntimeError:
                pass
        times = time_rounds(calls, args.rounds, flush=flush)
        flops = 4 * b * hq * sq * sk * d * (0.5 if causal and sq == sk else 1.0)
        ref = builds[0].name
        med = {n: statistics.median(t) for n, t in times.items()}
        ratios = {n: statistics.median(a / o for a, o in zip(times[n], times[ref], strict=True))
                  for n in times if n != ref}
        cells = [f"{n} {med[n]:.3f}ms {flops / med[n] / 1e9:.0f}TF" for n in times]
        print(f"{shape:<15} " + " | ".join(cells))
        print(f"{'':<15} t(x)/t({ref}): " + " ".join(f"{n} {r:.3f}" for n, r in ratios.items()))
        for base in ("fa3", "cudnn"):
            if base in times:
                speed = {bd.name: statistics.median(x / o for x, o in zip(times[base], times[bd.name], strict=True))
                         for bd in builds}
                print(f"{'':<15} speed vs {base} (paired): " + " ".join(f"{n} {r:.3f}" for n, r in speed.items()))
                vs.setdefault(base, {})[shape] = speed
        rows.append((shape, med, ratios, flops))
    print("\nsummary (TFLOPS; ratio = time of backend / time of first build; >1: first build faster)")
    names = list(dict.fromkeys(n for r in rows for n in r[1]))
    print(f"{'shape':<15}" + "".join(f"{n:>12}" for n in names))
    for shape, med, _ratios, flops in rows:
        print(f"{shape:<15}" + "".join(f"{flops / med[n] / 1e9:>12.0f}" if n in med else f"{'-':>12}" for n in names))
    geo = {n: math.exp(statistics.mean(math.log(r[2][n]) for r in rows if n in r[2])) for n in names[1:]}
    print("geomean ratio vs first: " + " ".join(f"{n} {g:.3f}" for n, g in geo.items()))
    for base, per_shape in vs.items():
        print(f"speed vs {base} (paired; >1: the build is faster)")
        for shape, speed in per_shape.items():
            print(f"  {shape:<15}" + "".join(f"{n} {r:6.3f}  " for n, r in speed.items()))
        geo_b = {bd.name: math.exp(statistics.mean(math.log(sp[bd.name]) for sp in per_shape.values()))
                 for bd in builds}
        print("  geomean        " + "".join(f"{n} {g:6.3f}  " for n, g in geo_b.items()))
    print(f"check failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
