"""Are two builds bit-identical? Runs bf16, fp16 and FP8 attention at hdim 64/128/256 (causal and not, ragged GQA,
decode, S 4K) on fixed-seed inputs and saves or compares every output and LSE. One build per process:

    FLASHCORE_LIB=<old>.so python3 bench/bitcmp.py save /tmp/ref.pt
    FLASHCORE_LIB=<new>.so python3 bench/bitcmp.py compare /tmp/ref.pt     # exit 1 when any tensor differs

Needs an H100. A change that should not move a bit (docs/perf-notes.md step 8.7) is checked this way.
"""

from __future__ import annotations

import sys

import torch

import flashcore
from flashcore.fp8 import attention_fp8

E4M3 = torch.float8_e4m3fn
# (batch, seqlen q, seqlen k, heads q, heads kv, head dim, causal)
CASES = [(2, 1000, 1300, 8, 2, d, c) for d in (64, 128, 256) for c in (False, True)] + [
    (4, 1, 3000, 32, 8, 128, False), (2, 4096, 4096, 16, 16, 128, True)]


def outputs() -> dict[str, torch.Tensor]:
    outs: dict[str, torch.Tensor] = {}
    gen = torch.Generator(device="cuda")
    for case in CASES:
        b, sq, sk, hq, hkv, d, causal = case
        gen.manual_seed(sq * 7 + sk + d + causal)
        q = torch.randn(b, sq, hq, d, device="cuda", generator=gen)
        k, v = (torch.randn(b, sk, hkv, d, device="cuda", generator=gen) for _ in range(2))
        for dt in (torch.bfloat16, torch.float16):
            o, lse = flashcore.attention(q.to(dt), k.to(dt), v.to(dt), causal=causal)
            outs[f"{dt} {case}"], outs[f"{dt} lse {case}"] = o.cpu(), lse.cpu()
        ds = [torch.rand(b, hkv, device="cuda", generator=gen) + 0.5 for _ in range(3)]
        o, lse = attention_fp8(q.to(E4M3), k.to(E4M3), v.to(E4M3), q_descale=ds[0], k_descale=ds[1],
                               v_descale=ds[2], causal=causal)
        outs[f"fp8 {case}"], outs[f"fp8 lse {case}"] = o.cpu(), lse.cpu()
    return outs


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "compare"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, path = sys.argv[1:]
    print(f"library {flashcore.library_path()}")
    outs = outputs()
    if mode == "save":
        torch.save(outs, path)
        print(f"saved {len(outs)} tensors to {path}")
        return 0
    ref = torch.load(path)
    differ = [name for name, t in outs.items() if name not in ref or not torch.equal(t, ref[name])]
    print(f"bit-identical: {len(outs) - len(differ)}/{len(outs)}" + (f"; differ: {differ}" if differ else ""))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
