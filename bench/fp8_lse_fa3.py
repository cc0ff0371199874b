"""FP8 LSE and output error against the fp32 reference of the dequantized inputs: FlashCore and FA3 on the same draws
(the FP8 workloads of gates/workloads.yaml, two seeds each), each judged by the correctness gate's own FP8 comparison
(harness/support/fp8.py compare; it recomputes the reference per call, which this one-off table can afford).
On an H100 with fa3-fwd: python3 bench/fp8_lse_fa3.py"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path.cwd()))
import flashcore  # noqa: E402
from harness.bench.backends import import_fa3_module  # noqa: E402
from harness.config import load_config  # noqa: E402
from harness.support import fp8  # noqa: E402

fa3, where, _ = import_fa3_module()
config = load_config(Path("gates"))
print(f"FA3: {where}")
COLUMNS = ("lse ours", "lse fa3", "out ours", "out fa3", "out P-e4m3")
print(f"{'workload':22s} {'seed':>4s} " + " ".join(f"{c:>10s}" for c in COLUMNS))
for name in [*config.sets["fp8"], *config.sets["fp8-bench"]]:
    wl = config.workloads[name]
    for seed in (1, 2):
        b = fp8.make(wl, seed, "cuda")
        out, lse = b.flashcore(flashcore, None, None)()
        fa3_out, fa3_lse = fa3.flash_attn_func(b.q, b.k, b.v, **b.options(), return_attn_probs=True)[:2]
        ours, theirs = fp8.compare(b, out, lse), fp8.compare(b, fa3_out, fa3_lse)
        row = (ours.lse_err, theirs.lse_err, ours.err_ours, theirs.err_ours, ours.err_sdpa)
        print(f"{name:22s} {seed:4d} " + " ".join(f"{x:10.5f}" for x in row), flush=True)
        del b, out, lse, fa3_out, fa3_lse
        torch.cuda.empty_cache()
