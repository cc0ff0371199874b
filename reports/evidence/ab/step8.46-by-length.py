"""Step 8.46 follow-up: the causal step by tile length, and block 4's phases by tile length, from the raw stamps of
bench/tile_timeline.py --out (kernel/timeline.h layout [cta][tile][role][stamp]).

    xz -dk step8.46-stamps/tl-fp8-s4k-causal.pt.xz
    python3 step8.46-by-length.py step8.46-stamps/tl-fp8-s4k-causal.pt
"""

import collections
import statistics
import sys

import torch

t = torch.load(sys.argv[1])
CTAS, TILES = t.shape[0], t.shape[1]
by_n, by_k = collections.defaultdict(list), collections.defaultdict(list)
for c in range(CTAS):
    for k in range(1, TILES):
        for wg in range(2):
            s = t[c, k, wg].tolist()
            n = s[7]
            if s[6] == 0 or n < 4:
                continue
            step = (s[4] - s[3]) / (n - 1)
            by_n[n].append(step)
            by_k[k].append(n)
print("step (cycles) by tile length in blocks: " + " ".join(
    f"{n}:{statistics.median(v):.0f}({len(v)})" for n, v in sorted(by_n.items())))
print("median tile length by a CTA's tile index: " + " ".join(
    f"{k}:{statistics.median(v):.0f}" for k, v in sorted(by_k.items())))
names = ("kv_wait", "turn", "issue", "s_wait", "softmax", "pv_wait", "pack")
phases = collections.defaultdict(lambda: collections.defaultdict(list))
for c in range(CTAS):
    for k in range(1, TILES):
        n = t[c, k, 0, 7].item()
        for wg in range(2):
            s = t[c, k, 4 + wg].tolist()
            if s[7] == 0 or s[0] == 0:
                continue
            for i, name in enumerate(names):
                phases[n][name].append(s[i + 1] - s[i])
for n in sorted(phases):
    if n >= 5:
        print(f"block 4 of {n}-block tiles (cycles): " + " ".join(
            f"{name} {statistics.median(v):.0f}" for name, v in phases[n].items()))
