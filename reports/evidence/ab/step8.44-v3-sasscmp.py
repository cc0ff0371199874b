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

sys.path.insert(0, "bench")
sys.path.insert(0, ".")
from harness.support.disasm import sass_instructions  # noqa: E402


def masked(code: list[str]) -> list[str]:
    return [re.sub(r"0x[0-9a-f]+", "X", x) for x in code]


head, v3, v2 = (sass_instructions(open(path).read()) for path in sys.argv[1:4])
exact = mod = diff = 0
for name, code in head.items():
    if "attention_forward_wgmma" not in name and "combine_splits" not in name:
        continue
    name3 = re.sub(r"(ELb[01]ELb[01])(EEEv)", r"\1ELb0\2", name) if "wgmma" in name else name
    code3 = v3.get(name3)
    if code == code3:
        exact += 1
    elif code3 and masked(code) == masked(code3):
        mod += 1
    else:
        diff += 1
        print("differs:", name[20:100], len(code), len(code3 or []))
print(f"without the tail vs head: {exact} identical, {mod} identical but for constants, {diff} differ")
same = mod2 = diff2 = 0
for name, code in v3.items():
    if "ELb0ELb0ELb1EEEv" in name:
        code2 = v2.get(name.replace("ELb0ELb0ELb1EEEv", "ELb0ELb0EEEv"))
        if code2 == code:
            same += 1
        elif code2 and masked(code2) == masked(code):
            mod2 += 1
        else:
            diff2 += 1
            print("tail differs from v2:", name[30:100])
print(f"tail kernels vs v2 as timed: {same} identical, {mod2} but for constants, {diff2} differ")
