"""`python -m harness parse sanitizer LOG [--tool T]`: re-judge a saved log offline; JSON on stdout.

Exit 0 when the file was read and parsed, whatever the verdict (the JSON says it); 2 when it cannot be read.
Offline, the exit code and the program's completion line are unknown: the verdict comes from the log alone.
"""

from __future__ import annotations

import argparse
import json
import sys

from harness.sanitizer.parser import parse
from harness.sanitizer.verdict import judge


def parse_command(args: argparse.Namespace) -> int:
    try:
        text = args.file.read_bytes().decode("utf-8", errors="replace")
    except OSError as e:
        print(f"flashcore harness: cannot read {args.file}: {e.strerror or e}", file=sys.stderr)
        return 2
    log = parse(text, args.tool)
    judgement = judge(log)
    out = {"file": str(args.file), "tool": log.tool, **judgement.to_dict(), **log.to_dict()}
    print(json.dumps(out, indent=2))
    return 0
