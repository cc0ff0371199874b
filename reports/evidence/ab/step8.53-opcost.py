"""What one extra stream operation (a 4-byte fill kernel, as FA3's semaphore zeroing) costs inside a timed call:
FlashCore's library call and FA3's, each alone and after 1 or 2 fills, flushed rounds as bench/ab_kernels.py."""
import ctypes
import glob
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ab_kernels as ab  # noqa: E402

lib = sys.argv[1]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 30
flush = ab.L2Flusher(256)
fa3, dtypes = ab.load_fa3()
buf = torch.empty(4, dtype=torch.uint8, device="cuda")
_cands = [p for d in sys.path for p in glob.glob(os.path.join(d, "nvidia", "**", "libcudart.so*"), recursive=True)]
cudart = ctypes.CDLL(_cands[0]) if _cands else None
print("cudart:", _cands[:1])


def memset():
    cudart.cudaMemsetAsync(ctypes.c_void_p(buf.data_ptr()), 0, ctypes.c_size_t(4),
                           ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
for shape in ("fp8-s4k-causal", "fp8-s4k"):
    b, hq, hkv, sq, sk, d, causal, dt = ab.SHAPES[shape]
    torch.manual_seed(7)
    q, k, v, ds = ab.draw_inputs(ab.SHAPES[shape])
    out = torch.full(q.shape, float("nan"), device="cuda", dtype=torch.bfloat16)
    lse = torch.empty(b, hq, sq, device="cuda")
    fc, _ = ab.Build("fc", lib).prepare(q, k, v, out, lse, causal, ds)
    f3 = ab.fa3_call(fa3, dtypes, ab.SHAPES[shape], q, k, v, ds)

    def with_fills(fn, n, op=None):
        def call():
            for _ in range(n):
                (op or buf.zero_)()
            fn()
        return call
    calls = {"fc": fc, "fc+1": with_fills(fc, 1), "fc+2": with_fills(fc, 2)}
    if cudart is not None:
        calls |= {"fc+m1": with_fills(fc, 1, memset), "fc+m2": with_fills(fc, 2, memset)}
    if f3 is not None:
        calls |= {"fa3": f3, "fa3+1": with_fills(f3, 1), "fa3+2": with_fills(f3, 2)}
        if cudart is not None:
            calls["fa3+m1"] = with_fills(f3, 1, memset)
    t = ab.time_rounds(calls, rounds, flush=flush)
    med = {n: statistics.median(x) * 1000 for n, x in t.items()}
    diff = {n: statistics.median((a - o) * 1000 for a, o in zip(t[n], t[n.split("+")[0]], strict=True))
            for n in t if "+" in n}
    print(f"{shape}: median us " + " ".join(f"{n} {m:.1f}" for n, m in med.items()))
    print(f"{shape}: paired extra us " + " ".join(f"{n} {m:.2f}" for n, m in diff.items()))
