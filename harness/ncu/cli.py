"""`python -m harness parse ncu FILE`: a saved `ncu --csv --page raw --print-units base` output as JSON.

Per kernel (name, launch count, grid, block, registers, shared memory): the median of every metric over its
launches and each launch's values, as numbers (null where the cell was "n/a" or not numeric). Device
attributes are listed once. Exit 0 when parsed; 2 when the file cannot be read or holds no launch (the
message says why, and how to fix a profiler error such as ERR_NVGPUCTRPERM).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from harness.ncu.parse import NcuCsv, NcuParseError, group_kernels, parse_csv, to_number

EXIT_UNPARSEABLE = 2


def to_json(csv: NcuCsv) -> dict[str, Any]:
    metrics = csv.metric_columns
    kernels = [{**k.facts(),
                "median": {m: k.median(m) for m in metrics},
                "per_launch": [{"id": x.id, "metrics": {m: x.metrics.get(m) for m in metrics}} for x in k.launches]}
               for k in group_kernels(csv.launches)]
    device = {k: (v if to_number(v) is None else to_number(v)) for k, v in csv.device().items()}
    return {"launches": len(csv.launches), "kernels": kernels, "units": {m: csv.units.get(m, "") for m in metrics},
            "device": device, "ncu_errors": list(csv.errors)}


def parse_command(args: argparse.Namespace) -> int:
    try:
        text = args.file.read_text(errors="replace")
    except OSError as e:
        print(f"flashcore harness: cannot read {args.file}: {e.strerror or e}", file=sys.stderr)
        return EXIT_UNPARSEABLE
    try:
        csv = parse_csv(text)
    except NcuParseError as e:
        print(f"flashcore harness: {args.file}: {e}", file=sys.stderr)
        return EXIT_UNPARSEABLE
    if not csv.launches:
        print(f"flashcore harness: {args.file}: no kernel launch in the CSV (did the kernel filter match?)",
              file=sys.stderr)
        return EXIT_UNPARSEABLE
    print(json.dumps({"file": str(args.file), **to_json(csv)}, indent=2))
    return 0
