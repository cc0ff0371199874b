"""`python -m harness.shard_costs [RESULTS_JSON ...]`: the `seconds:` block of gates/shard.yaml from measured runs.

The placement of a run over several GPUs weighs each gate by its latest wall time in the history store, and by the
estimates shipped in gates/shard.yaml where the history has none (a first run on a new host). This prints those
estimates from the newest run of the history store (gates/history.yaml `file`, $FLASHCORE_HISTORY, or --db) or from
the given results.json files (.json.xz too; a later file wins per gate), rounded up to whole seconds, to paste over
the block when the gates' times have moved.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def seconds_block(seconds: Mapping[str, float], order: Sequence[str]) -> str:
    """'seconds:' and one '  gate: N' line per gate in `order` that has a time (N rounded up, at least 1)."""
    lines = ["seconds:"] + [f"  {g}: {max(1, math.ceil(seconds[g]))}" for g in order if g in seconds]
    return "\n".join(lines) + "\n"


def from_results(paths: Sequence[Path]) -> dict[str, float]:
    from harness.render.stored import read_run

    got: dict[str, float] = {}
    for path in paths:
        got.update({g.name: g.elapsed_s for g in read_run(path).gates if g.elapsed_s > 0})
    return got


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.shard_costs", description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="*", help="results.json files (default: the history store)")
    ap.add_argument("--db", type=Path, help="history file (default $FLASHCORE_HISTORY, else gates/history.yaml)")
    ap.add_argument("--gates-dir", type=Path, default=Path("gates"))
    args = ap.parse_args(argv)
    from harness.config import load_config
    from harness.render.stored import StoredRunError
    from harness.shard import last_gate_seconds

    if args.results:
        try:
            seconds = from_results(args.results)
        except StoredRunError as e:
            print(f"python -m harness.shard_costs: {e}", file=sys.stderr)
            return 1
    else:
        from harness.history.cli import history_path
        from harness.history.trends import load_history_settings

        seconds = last_gate_seconds(args.db or history_path(load_history_settings(args.gates_dir)))
    config = load_config(args.gates_dir)
    order = [g.name for p in config.phases for g in p.gates]
    if not seconds:
        print("no gate times found: run a phase first, or name a results.json", file=sys.stderr)
        return 1
    sys.stdout.write(seconds_block(seconds, order))
    return 0


if __name__ == "__main__":
    sys.exit(main())
