"""How many exponentials ptxas put inside each consumer turn (BAR.SYNC .. BAR.ARV), from static SASS.

    cuobjdump -sass build/libflashcore.so > flashcore.sass
    python3 bench/ring_turn.py flashcore.sass [--kernel E4m3] [--kernel Li128]

The softmax ring's named barriers order the warpgroups' turns, but ptxas moves register-only work across them: the
same source compiles to a turn of 3 MUFU.EX2 or of 68 (docs/perf-notes.md 8.27, 8.43), and FP8 hdim 128 ran 2-7 %
slower whenever most of a step's exponentials landed inside. This prints, for each kernel whose name holds every
--kernel string, each BAR.SYNC with the MUFU.EX2s before its BAR.ARV and after it (up to the next BAR.SYNC), so a build
can be checked before it is timed. No GPU needed: cuobjdump reads a local build's sm_90a cubins on a CPU-only machine
too (PyPI's nvidia-cuda-cuobjdump wheel ships it under nvidia/cu13/bin; docs/perf-notes.md 8.44).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sass_stalls import opcode  # noqa: E402

from harness.support.disasm import sass_instructions  # noqa: E402


def turns(code: list[str]) -> list[tuple[int, int, int]]:
    """(index of BAR.SYNC, MUFU.EX2 before the next BAR.ARV, MUFU.EX2 from there to the next BAR.SYNC or the end)."""
    syncs = [i for i, t in enumerate(code) if opcode(t).startswith("BAR.SYNC")]
    out = []
    for n, s in enumerate(syncs):
        end = syncs[n + 1] if n + 1 < len(syncs) else len(code)
        arv = next((i for i in range(s + 1, end) if opcode(code[i]).startswith("BAR.ARV")), end)
        inside = sum(opcode(code[i]).startswith("MUFU.EX2") for i in range(s + 1, arv))
        after = sum(opcode(code[i]).startswith("MUFU.EX2") for i in range(arv, end))
        out.append((s, inside, after))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("sass", help="cuobjdump -sass output")
    ap.add_argument("--kernel", action="append", default=[], help="keep kernels whose name holds this (repeatable)")
    args = ap.parse_args()
    with open(args.sass) as f:
        found = sass_instructions(f.read())
    picked = {k: v for k, v in found.items() if all(s in k for s in args.kernel)}
    if not picked:
        print(f"{args.sass}: no kernel matches {args.kernel}", file=sys.stderr)
        return 1
    for name, code in sorted(picked.items()):
        rows = turns(code)
        print(f"{name}: {len(code)} instructions, {len(rows)} turns")
        for s, inside, after in rows:
            print(f"  BAR.SYNC at {s:5d}: {inside:3d} MUFU.EX2 in the turn, {after:3d} after it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
