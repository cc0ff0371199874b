"""FP8 LSE and output error against the fp32 reference of the dequantized inputs: FlashCore and FA3 on the same draws
(the FP8 workloads of gates/workloads.yaml, two seeds each). On an H100 with fa3-fwd: python3 bench/fp8_lse_fa3.py"""
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path.cwd()))
import flashcore  # noqa: E402
from flashcore import reference as truth  # noqa: E402
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
        qd, kd, vd = b.descales
        out, lse = flashcore.attention_fp8(b.q, b.k, b.v, q_descale=qd, k_descale=kd, v_descale=vd, causal=wl.causal)
        fo, flse = fa3.flash_attn_func(b.q, b.k, b.v, causal=wl.causal, q_descale=qd, k_descale=kd, v_descale=vd,
                                       return_attn_probs=True)[:2]
        q, k, v = (truth.dequantize(x, s, wl.heads_kv) for x, s in zip((b.q, b.k, b.v), b.descales, strict=True))
        e = {"lo": 0.0, "lf": 0.0, "oo": 0.0, "of": 0.0, "ob": 0.0}
        torch.backends.cuda.matmul.allow_tf32 = False
        scale = 1 / math.sqrt(wl.head_dim)
        for i in range(wl.batch):
            ref, lref = truth.sequence(q[i], k[i], v[i], causal=wl.causal, scale=scale)
            base, _ = truth.sequence(q[i], k[i], v[i], causal=wl.causal, scale=scale, p_dtype=torch.float8_e4m3fn)
            seen = torch.isfinite(lref)
            e["lo"] = max(e["lo"], (lse[i] - lref)[seen].abs().max().item())
            e["lf"] = max(e["lf"], (flse[i] - lref)[seen].abs().max().item())
            e["oo"] = max(e["oo"], (out[i].float() - ref).abs().max().item())
            e["of"] = max(e["of"], (fo[i].float() - ref).abs().max().item())
            e["ob"] = max(e["ob"], (base.bfloat16().float() - ref).abs().max().item())
        print(f"{name:22s} {seed:4d} " + " ".join(f"{e[c]:10.5f}" for c in ("lo", "lf", "oo", "of", "ob")), flush=True)
        del b, out, lse, fo, flse, q, k, v
        torch.cuda.empty_cache()
