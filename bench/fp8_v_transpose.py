"""FP8: V^T from the copy the kernel writes ("pass") against V transposed in shared memory ("smem"), timed in
alternating rounds in one process on one GPU, over query rows per K/V head (the quantity kernel/tile_choice.h
use_fp8_vt_smem decides on) for each head dim, causal or not, plus decode shapes. Prints which way is faster per shape
and which way "auto" takes, so the rule's thresholds can be read off the table (docs/perf-notes.md steps 8.16, 8.17).

    PYTHONPATH=. python3 bench/fp8_v_transpose.py [--dims=64,128,256] [--quick]   # $OUT/fp8_v_transpose.json

Each shape keeps about the same work (batch x heads x query rows x keys); keys = query rows (prefill) or 8K (decode).
Needs an H100.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving_fa3 import paired  # noqa: E402

import flashcore  # noqa: E402
from flashcore.fp8 import attention_fp8  # noqa: E402

E4M3 = torch.float8_e4m3fn


def shapes(dim: int, quick: bool) -> list[tuple[int, int, int, int, int, bool]]:
    """(batch, heads_q, heads_kv, seqlen_q, seqlen_k, causal)."""
    out = []
    for rows in ([1024, 2048] if quick else [512, 1024, 2048, 4096]):
        batch = max(1, 4 * 8192 // rows)  # B4 S8K's batch x rows
        for causal in (False, True):
            out.append((batch, 16, 16, rows, rows, causal))
    out.append((64, 32, 8, 1, 8192, False))  # decode, GQA 4
    out.append((16, 16, 16, 1, 4096, False))
    return out


def main() -> None:
    dims = [128, 256]
    quick = "--quick" in sys.argv
    for a in sys.argv[1:]:
        if a.startswith("--dims="):
            dims = [int(x) for x in a.split("=", 1)[1].split(",")]
    torch.manual_seed(0)
    rows_out = []
    for dim in dims:
        for b, hq, hkv, sq, sk, causal in shapes(dim, quick):
            q = torch.randn(b, sq, hq, dim, device="cuda").to(E4M3)
            k, v = (torch.randn(b, sk, hkv, dim, device="cuda").to(E4M3) for _ in range(2))
            d = [torch.rand(b, hkv, device="cuda") + 0.5 for _ in range(3)]

            def run(mode: str, q=q, k=k, v=v, d=d, causal=causal):  # type: ignore[no-untyped-def]
                return lambda: attention_fp8(q, k, v, q_descale=d[0], k_descale=d[1], v_descale=d[2], causal=causal,
                                             v_transpose=mode)

            same = torch.equal(run("pass")()[0], run("smem")()[0])
            pass_ms, smem_ms = paired(run("pass"), run("smem"))
            auto = flashcore.plan(q, k, v, causal=causal).v_transpose
            rows = sq * (hq // hkv)
            name = f"D{dim} B{b} H{hq}/{hkv} Sq{sq} Sk{sk}{' causal' if causal else ''}"
            best = "smem" if smem_ms < pass_ms else "pass"
            rows_out.append({"name": name, "rows_per_kv_head": rows, "pass_ms": pass_ms, "smem_ms": smem_ms,
                             "faster": best, "auto": auto, "same_bits": same})
            print(f"{name:44s} rows/kv {rows:6d}  pass {pass_ms:8.3f} ms  smem {smem_ms:8.3f} ms  "
                  f"pass/smem {pass_ms / smem_ms:6.3f}  faster {best}  auto {auto}  same_bits {same}", flush=True)
    out = Path(os.environ.get("OUT", ".")) / "fp8_v_transpose.json"
    out.write_text(json.dumps(rows_out, indent=1))


if __name__ == "__main__":
    main()
