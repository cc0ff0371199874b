"""Step 8.43: which wgmma kernels of a build have the same PTX as two other builds (line info and labels stripped).

    python3 step8.43-ptxcmp.py head.ptx ns2.ptx new.ptx     (each from `make ptx BUILD_DIR=...`)
"""

import hashlib
import re
import sys


def kernels(path: str) -> dict[str, str]:
    out: dict[str, str] = {}
    name, body = None, []
    for line in open(path):
        m = re.match(r"\.(?:visible )?\.entry (\S+)\(", line)
        if m:
            if name:
                out[name] = hashlib.md5("".join(body).encode()).hexdigest()
            name, body = m.group(1), []
            continue
        text = line.strip()
        if name is None or text.startswith((".loc", ".file", "//")):
            continue
        body.append(re.sub(r"\$L__\w+", "L", text) + "\n")
    if name:
        out[name] = hashlib.md5("".join(body).encode()).hexdigest()
    return out


head, ns2, new = (kernels(p) for p in sys.argv[1:4])
for k in sorted(new):
    if "wgmma" in k:
        tag = ("=head" if head.get(k) == new[k] else "") + ("=ns2" if ns2.get(k) == new[k] else "")
        print(re.sub(r".*kernelI(.*)EEvN.*", r"\1", k), tag or "NEW")
