"""STL/LDL counts per (kernel, source line) in `nvdisasm -g` output read from stdin (docs/perf-notes.md 8.44).

    cuobjdump -xelf all build/libflashcore.so; for c in *.cubin; do nvdisasm -g -c $c; done \\
        | python3 step8.44-spills.py E4m3 Li256

Prints, for each kernel whose name holds every argument, its spill instructions by source line, most first.
"""

import collections
import re
import sys

filters = sys.argv[1:]
kernel = None
where = None
counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
for text in sys.stdin:
    m = re.match(r"\s*\.text\.(\S+):", text) or re.match(r"^(_Z\w+):", text)
    if m:
        kernel = m.group(1)
        continue
    m = re.search(r'//## File "([^"]+)", line (\d+)', text)
    if m:
        where = f"{m.group(1).split('/')[-1]}:{m.group(2)}"
        continue
    if kernel and all(f in kernel for f in filters) and re.search(r"\b(STL|LDL)(\.\w+)*\b", text):
        counts[kernel][(where, "STL" if "STL" in text else "LDL")] += 1
for kernel, c in counts.items():
    print("==", kernel[:110])
    for (line, op), n in sorted(c.items(), key=lambda x: -x[1])[:25]:
        print(f"   {op} {n:3d}  {line}")
