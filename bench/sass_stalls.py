"""Warp-stall samples per SASS instruction, from Nsight Compute's source page, for kernel development.

    ncu --clock-control none --section SourceCounters --section WarpStateStats -o rep ... python3 bench/ncu_pair.py ...
    ncu -i rep.ncu-rep --page source --print-source sass --csv > sass.csv
    python3 bench/sass_stalls.py sass.csv [--list]

Prints the kernel's stall samples by reason and by opcode, then its hottest loop: the instructions executed as often as
the most-executed MUFU (the steady-state step of the block loop), with the named barriers and wgmma waits in it, how
many MUFUs lie between each BAR.SYNC and the next BAR.ARV, and the loop's samples between those landmarks. --list
prints every instruction of the loop with its samples and top three stall reasons.
"""

from __future__ import annotations

import argparse
import collections
import csv
import sys


def load(path: str) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = next((r for r in rows if r and r[0] == "Address"), None)
    if header is None:
        raise SystemExit(f"{path}: no 'Address' header row (ncu --page source --print-source sass --csv)")
    return header, [dict(zip(header, r, strict=False)) for r in rows if r and r[0].startswith("0x")]


def num(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def opcode(source: str) -> str:
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--list", action="store_true", help="every instruction of the hottest loop")
    args = ap.parse_args()
    header, rows = load(args.csv)
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    samples = [num(r["Warp Stall Sampling (All Samples)"]) for r in rows]
    executed = [int(num(r["Instructions Executed"])) for r in rows]
    total = sum(samples) or 1.0
    print(f"{len(rows)} instructions, {total:.0f} samples")
    by_reason = collections.Counter({h: sum(num(r[h]) for r in rows) for h in reasons})
    for h, v in by_reason.most_common(8):
        print(f"  {h:24s} {v:8.0f} {100 * v / total:5.1f} %")
    by_op: collections.Counter[str] = collections.Counter()
    for r, s in zip(rows, samples, strict=True):
        by_op[opcode(r["Source"]).split(".")[0]] += s
    print("by opcode: " + ", ".join(f"{o} {100 * v / total:.1f} %" for o, v in by_op.most_common(10)))

    mufu = collections.Counter(e for r, e in zip(rows, executed, strict=True) if opcode(r["Source"]).startswith("MUFU"))
    if not mufu:
        return 0
    hot = max(mufu, key=lambda e: e * mufu[e])
    loop = [i for i, e in enumerate(executed) if e == hot]
    lo, hi = loop[0], loop[-1]
    loop_total = sum(samples[lo:hi + 1]) or 1.0
    print(f"hottest loop: instructions {lo}-{hi}, executed {hot} times each, "
          f"{100 * loop_total / total:.1f} % of samples")
    marks = [i for i in range(lo, hi + 1) if opcode(rows[i]["Source"]).startswith(("BAR.", "WARPGROUP.DEPBAR"))]
    edges = [lo, *marks, hi + 1]
    for a, b in zip(edges, edges[1:], strict=False):
        if b <= a:
            continue
        n_mufu = sum(opcode(rows[i]["Source"]).startswith("MUFU") for i in range(a, b))
        share = 100 * sum(samples[a:b]) / loop_total
        first = rows[a]["Source"].strip()[:44]
        print(f"  {a:5d}-{b - 1:5d} {first:44s} {b - a:4d} instr, {n_mufu:3d} MUFU, {share:5.1f} %")
    sync = None
    for i in range(lo, hi + 1):
        op = opcode(rows[i]["Source"])
        if op.startswith("BAR.SYNC"):
            sync = i
        elif op.startswith("BAR.ARV") and sync is not None:
            n_mufu = sum(opcode(rows[j]["Source"]).startswith("MUFU") for j in range(sync, i))
            print(f"  BAR.SYNC at {sync} -> BAR.ARV at {i}: {n_mufu} MUFU between (of {mufu[hot]} in the loop)")
            sync = None
    if args.list:
        for i in range(lo, hi + 1):
            top = sorted(((num(rows[i][h]), h[6:]) for h in reasons), reverse=True)[:3]
            why = " ".join(f"{h}:{v:.0f}" for v, h in top if v)
            print(f"{i:5d} {samples[i]:6.0f} {rows[i]['Source'].strip()[:60]:60s} {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
