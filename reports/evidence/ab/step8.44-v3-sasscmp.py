"""Per-kernel SASS identity of step 8.44's v3 against head and against v2 as timed (docs/perf-notes.md 8.44).

    cuobjdump -sass <lib> > <lib>.sass   (for head, v3 and v2)
    python3 step8.44-v3-sasscmp.py head.sass v3.sass v2.sass    (from the repository root)

Head's kernels have two bool template arguments (kSplit, kSoftcap), v3's three (kTail last): each head kernel is
compared with v3's kTail = false copy, each v3 kTail = true kernel with v2's (which had the tail code in every kernel).
"Identical but for constants": the same instructions once every hex literal (parameter-bank offsets, branch targets)
is masked.
"""

import re
import sys
from collections import Counter

sys.path.insert(0, "bench")
sys.path.insert(0, ".")
from harness.support.disasm import sass_instructions  # noqa: E402


def masked(code: list[str]) -> list[str]:
    return [re.sub(r"0x[0-9a-f]+", "X", x) for x in code]


def verdict(code: list[str], other: list[str] | None) -> str:
    """'identical', 'constants' (identical once hex literals are masked) or 'differs'."""
    if code == other:
        return "identical"
    return "constants" if other and masked(code) == masked(other) else "differs"


head, v3, v2 = (sass_instructions(open(path).read()) for path in sys.argv[1:4])
# head's kernels against v3's kTail = false copies (combine_splits_kernel keeps its name)
plain = Counter()
for name, code in head.items():
    if "attention_forward_wgmma" in name or "combine_splits" in name:
        name3 = re.sub(r"(ELb[01]ELb[01])(EEEv)", r"\1ELb0\2", name) if "wgmma" in name else name
        plain[v := verdict(code, v3.get(name3))] += 1
        if v == "differs":
            print("differs:", name[20:100], len(code), len(v3.get(name3) or []))
print(f"without the tail vs head: {plain['identical']} identical, {plain['constants']} identical but for constants, "
      f"{plain['differs']} differ")
# v3's kTail = true kernels against v2's (one kernel served both)
tail = Counter()
for name, code in v3.items():
    if "ELb0ELb0ELb1EEEv" in name:
        tail[v := verdict(code, v2.get(name.replace("ELb0ELb0ELb1EEEv", "ELb0ELb0EEEv")))] += 1
        if v == "differs":
            print("tail differs from v2:", name[30:100])
print(f"tail kernels vs v2 as timed: {tail['identical']} identical, {tail['constants']} but for constants, "
      f"{tail['differs']} differ")
