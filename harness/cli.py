"""`python -m harness gate --phase N`, `python -m harness list` and `python -m harness tune`.

gate: load the YAML -> select phases 1..N -> run -> write the report directory -> print the table -> exit code
(0 only when every gate passed; 1 otherwise; 2 for a bad gate file or bad arguments).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import secrets
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flashcore.faults import BY_NAME
from harness.config import load_config
from harness.results import RunResult
from harness.run_files import compress_logs
from harness.schema import PHASES, Config, ConfigError

if TYPE_CHECKING:
    from harness.history.report import TrendReport

EXIT_CONFIG = 2
# Test-only kernel faults (flashcore.attention's debug_fault): each must turn a gate red (make selftest).
FAULTS = BY_NAME  # --plant-fault names: flashcore/faults.py


def make_run_id(phase: int, environment: dict[str, Any]) -> str:
    """`20250101T120000Z-phase1-abc1234` (UTC time, phase, short commit; `-dirty` when the tree is)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    commit = str(environment.get("git_commit") or "")[:7] or "nocommit"
    dirty = "-dirty" if environment.get("git_dirty") else ""
    return f"{stamp}-phase{phase}-{commit}{dirty}"


def write_reports(run: RunResult, run_dir: Path, trends: TrendReport | None = None) -> tuple[dict[str, Path],
                                                                                            str | None]:
    """The renderers' files (index.html, results.json, summary.md); results.json alone when they are absent.
    `trends`: the history's section of the HTML report.

    Returns the paths and, when a renderer failed, why (the run then fails: a report is required)."""
    try:
        from harness.render import write_all
    except ImportError:
        return {"json": _write_json(run, run_dir)}, None
    try:
        return dict(write_all(run, run_dir, trends)), None
    except Exception as e:  # noqa: BLE001 - keep the verdict even if a renderer breaks
        return {"json": _write_json(run, run_dir)}, f"report renderer failed: {type(e).__name__}: {e}"


def _write_json(run: RunResult, run_dir: Path) -> Path:
    path = run_dir / "results.json"
    path.write_text(json.dumps(run.to_dict(), indent=2, default=str) + "\n")
    return path


def _placement(args: argparse.Namespace, config: Config, names: list[str], only: list[str] | None) -> tuple[
        list[str] | None, tuple[int, int] | None, list[int] | None]:
    """(the gates this process runs, --shard's (I, N), --gpus' list); ValueError / ConfigError when they clash or
    are malformed (harness/shard.py)."""
    if not (args.shard or args.gpus):
        return only, None, None
    from harness import shard, shard_runners
    from harness.support.gpu import visible_gpu_count

    settings = config.once(shard.SHARD_FILE, shard.load_shard_settings)
    if args.shard and args.gpus:
        raise ValueError("--shard and --gpus: choose one (a runner's share, or this host's GPUs)")
    if only is not None or args.plant_fault:
        raise ValueError(f"{'--shard' if args.shard else '--gpus'} picks the gates itself (no --only, no "
                         "--plant-fault)")
    if args.shard:
        if not args.run_id:
            raise ValueError("--shard needs --run-id ID, one id every share of the run is given (python -m harness "
                             "merge joins only shares of one run)")
        shard_of = shard_runners.parse_shard(args.shard)
        return shard_runners.shard_gates(names, *shard_of, settings), shard_of, None
    return None, None, shard.gpu_list(args.gpus, visible_gpu_count)


def cmd_gate(args: argparse.Namespace, config: Config) -> int:
    from harness import env
    from harness.engine import run_phase
    from harness.render.terminal import render

    if args.phase not in [p.number for p in config.phases]:
        known = ", ".join(str(p.number) for p in config.phases)
        print(f"flashcore harness: phase {args.phase} is not in {config.gates_dir}/phases.yaml ({known})",
              file=sys.stderr)
        return EXIT_CONFIG
    names = [g.name for g in config.gates_through(args.phase)]
    only = [n.strip() for n in args.only.split(",") if n.strip()] if args.only else None
    if only is not None and (unknown := [n for n in only if n not in names]):
        print(f"flashcore harness: --only {', '.join(unknown)}: not a gate of phases 1..{args.phase} "
              f"({', '.join(names)})", file=sys.stderr)
        return EXIT_CONFIG
    try:
        if args.run_id is not None and not re.fullmatch(r"[A-Za-z0-9._-]+", args.run_id):
            raise ValueError(f"--run-id {args.run_id!r}: letters, digits, '.', '_' and '-' only (it names the run "
                             "directory)")
        only, shard_of, gpus = _placement(args, config, names, only)
    except (ValueError, ConfigError) as e:
        print(f"flashcore harness: {e}", file=sys.stderr)
        return EXIT_CONFIG
    repo_root = Path.cwd()
    environment = env.collect(repo_root)
    run_id = args.run_id or make_run_id(args.phase, environment)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    if shard_of is not None:  # every share of the run: one run id and one seed (merge checks both)
        environment.update(shard=f"{shard_of[0]}/{shard_of[1]}", shard_run=args.run_id)
        run_id = f"{args.run_id}-{shard_of[0]}of{shard_of[1]}"
        seed = args.seed if args.seed is not None else zlib.crc32(args.run_id.encode()) % 2**31
    environment["seed"] = seed
    run_dir = Path(args.out) if args.out else Path("reports") / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    fault = FAULTS[args.plant_fault] if args.plant_fault else 0
    if gpus is None:
        run = run_phase(config, args.phase, run_id=run_id, run_dir=run_dir, environment=environment,
                        repo_root=repo_root, seed=seed, fault=fault, only=only)
    else:
        run = _run_sharded(args, config, gpus, run_id, run_dir, environment, repo_root, seed)
    run = compress_logs(run, run_dir)
    history_line, trends = "", None
    if not args.no_history:  # first, so the report's trend section shows this run too
        from harness.history.cli import record_run, run_trends

        history_line = record_run(run.to_dict(), config, str(run_dir / "results.json"))
        trends = run_trends(config, run.run_id, str(environment.get("gpu") or ""))
    paths, render_error = write_reports(run, run_dir, trends)
    print(render(run, color=sys.stdout.isatty()))
    main_file = paths.get("html") or paths.get("json") or next(iter(paths.values()), run_dir)
    print(f"report: {main_file}")
    if history_line:
        print(history_line)
    if render_error:
        print(f"flashcore harness: {render_error}", file=sys.stderr)
        return 1
    return run.exit_code


def _run_sharded(args: argparse.Namespace, config: Config, gpus: list[int], run_id: str, run_dir: Path,
                 environment: dict[str, Any], repo_root: Path, seed: int) -> RunResult:
    """The phase over several GPUs (harness/shard.py), the gates balanced by their last wall times in the history."""
    from harness import shard
    from harness.engine import run_phase
    from harness.history.cli import history_path
    from harness.history.trends import HISTORY_FILE, load_history_settings

    try:
        seconds = shard.last_gate_seconds(history_path(config.once(HISTORY_FILE, load_history_settings)))
    except ConfigError:
        seconds = {}

    def first(names: Sequence[str]) -> RunResult:
        return run_phase(config, args.phase, run_id=run_id, run_dir=run_dir, environment=environment,
                         repo_root=repo_root, seed=seed, only=names)

    return shard.run_sharded(config, args.phase, gpus, first, seed, run_dir, args.gates_dir, seconds)


def cmd_list(config: Config) -> int:
    for phase in config.phases:
        print(f"phase {phase.number}: {phase.name}")
        for g in phase.gates:
            params = ", ".join(f"{k}={v}" for k, v in vars(g.params).items() if k != "workloads")
            wl = getattr(g.params, "workloads", None)
            print(f"  {g.name}: {params}" + (f"\n    workloads: {', '.join(wl)}" if wl else ""))
        if not phase.gates:
            print("  (no gates yet)")
    print("\nworkloads:")
    width = max(len(n) for n in config.workloads)
    for wl in config.workloads.values():
        print(f"  {wl.name:<{width}}  {wl.kind:<13}  {wl.label}")
    print("\nsets:")
    for name, members in config.sets.items():
        print(f"  {name}: {', '.join(members)}")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness", description="FlashCore phase-gated validation")
    sub = ap.add_subparsers(dest="command", required=True)
    gate = sub.add_parser("gate", help="run the gates of phases 1..N and write a report")
    gate.add_argument("--phase", type=int, required=True, choices=list(PHASES), metavar="N", help="phase 1..7")
    gate.add_argument("--gates-dir", type=Path, default=Path("gates"), help="directory of the YAML (default gates)")
    gate.add_argument("--out", type=Path, help="run directory (default reports/<run-id>)")
    gate.add_argument("--seed", type=int, help="base seed (default: a fresh one, recorded in the report)")
    gate.add_argument("--plant-fault", choices=sorted(FAULTS), help="test-only: plant a kernel fault (run must fail)")
    gate.add_argument("--only", metavar="GATES", help="comma-separated: run only these gates of phases 1..N")
    gate.add_argument("--gpus", metavar="all|I,J", help="spread the gates over these GPUs, workers_per_gpu each "
                      "(harness/shard.py, gates/shard.yaml); one merged report")
    gate.add_argument("--shard", metavar="I/N", help="run share I of N (the build gate on every share): one runner "
                      "of several, each given the same --run-id; `python -m harness merge` joins their results.json")
    gate.add_argument("--run-id", metavar="ID", help="the run's id (default: UTC time, phase, commit); with --shard, "
                      "the id every share shares (each share's is ID-IofN; its seed, unless --seed, comes from ID)")
    mrg = sub.add_parser("merge", help="join the results.json of the shards of one phase (gate --shard I/N) into one "
                         "report and exit code")
    mrg.add_argument("results", type=Path, nargs="+", help="each shard's results.json")
    mrg.add_argument("--phase", type=int, required=True, choices=list(PHASES), metavar="N")
    mrg.add_argument("--out", type=Path, required=True, help="directory for the merged report")
    mrg.add_argument("--gates-dir", type=Path, default=Path("gates"))
    mrg.add_argument("--exit-codes", action="store_true", help="each share's `gate` exit code is in the file "
                     "exit-code beside its results.json (ci/gpu_job.sh): one that its results contradict, or none, "
                     "is an ERROR")
    gate.add_argument("--no-history", action="store_true",
                      help="do not append the run to the history (gates/history.yaml, $FLASHCORE_HISTORY)")
    prs = sub.add_parser("parse", help="re-judge a saved tool output offline and print JSON")
    prs.add_argument("kind", choices=["sanitizer", "ncu"], help="which tool wrote the file")
    prs.add_argument("file", type=Path, help="the saved log (sanitizer) or CSV (ncu)")
    prs.add_argument("--tool", choices=["memcheck", "racecheck", "synccheck", "initcheck"],
                     help="sanitizer tool (inferred from the log when omitted)")
    st = sub.add_parser("selftest", help="GPU: plant one fault per gate and check that each gate fails")
    st.add_argument("--cases", help="comma-separated case names (default: every case)")
    st.add_argument("--share", metavar="I/N",
                    help="the I-th of the N shares gates/selftest.yaml names (together: every case once)")
    bench = sub.add_parser("bench", help="GPU: run the benchmark suite (bench/), print a table; --update-baseline")
    from harness.bench.cli import add_arguments as bench_arguments

    bench_arguments(bench)
    # `tune` takes its own arguments (harness/tune/runner.py); main() hands them over before this parser runs.
    sub.add_parser("tune", help="GPU: time the tile configurations, write flashcore/tuned.yaml (make tune; "
                                "python -m harness tune --help)")
    ren = sub.add_parser("render", help="re-render a report (index.html, summary.md, results.json) from a stored "
                                        "results.json")
    ren.add_argument("results", type=Path, help="a results.json written by make gate-phaseN")
    ren.add_argument("--out", type=Path, required=True, help="directory for the report (created; files replaced)")
    hist = sub.add_parser("history", help="print the last runs and each series' trend, flagging changes beyond "
                                          "the run-to-run spread; --import stored results.json files")
    from harness.history.cli import add_arguments as history_arguments

    history_arguments(hist)
    lst = sub.add_parser("list", help="print phases, gates, workloads and sets")
    lst.add_argument("--gates-dir", type=Path, default=Path("gates"))
    return ap


def cmd_render(args: argparse.Namespace) -> int:
    """The report of a stored run, written again: exit 0 when written, EXIT_CONFIG when the file is unusable."""
    from harness.render.stored import StoredRunError, read_run

    try:
        run = read_run(args.results)
    except StoredRunError as e:
        print(f"flashcore harness: {e}", file=sys.stderr)
        return EXIT_CONFIG
    args.out.mkdir(parents=True, exist_ok=True)
    paths, error = write_reports(run, args.out)
    if error:
        print(f"flashcore harness: {error}", file=sys.stderr)
        return 1
    print(f"{run.run_id} ({run.status.value}, {len(run.gates)} gates): " + ", ".join(str(p) for p in paths.values()))
    return 0


def cmd_merge(args: argparse.Namespace, config: Config) -> int:
    """The shards of one phase as one report: exit 0 when every gate passed, 1 otherwise, EXIT_CONFIG when a file
    is unusable or the files are not the distinct shares of one run."""
    from harness import shard_runners
    from harness.render.stored import StoredRunError, read_run
    from harness.shard import SHARD_FILE, load_shard_settings

    sources = [str(f) for f in args.results]
    try:
        runs = [read_run(f) for f in args.results]
        if wrong := [s for s, r in zip(sources, runs, strict=True) if r.phase != args.phase]:
            raise StoredRunError(f"not a phase-{args.phase} run: {', '.join(wrong)}")
        shard_runners.check_shares(runs, sources, config.once(SHARD_FILE, load_shard_settings).first)
    except (StoredRunError, shard_runners.MergeRefused, ConfigError) as e:
        print(f"flashcore harness: merge refused: {e}", file=sys.stderr)
        return EXIT_CONFIG
    codes = [recorded_exit_code(f.parent / "exit-code") for f in args.results] if args.exit_codes else None
    run = shard_runners.merge_runs(config, args.phase, runs, sources, codes)
    args.out.mkdir(parents=True, exist_ok=True)
    paths, error = write_reports(run, args.out)
    from harness.render.terminal import render

    print(render(run, color=sys.stdout.isatty()))
    print(f"report: {paths.get('html') or paths.get('json')}")
    if error:
        print(f"flashcore harness: {error}", file=sys.stderr)
        return 1
    return run.exit_code


def recorded_exit_code(path: Path) -> int | None:
    """The exit code a share's job wrote (one integer), None when the file is absent or holds anything else."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def cmd_parse(args: argparse.Namespace) -> int:
    if args.kind == "sanitizer":
        from harness.sanitizer.cli import parse_command
    else:
        from harness.ncu.cli import parse_command
    return parse_command(args)


def main(argv: list[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # inside the try: a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:  # `python -m harness list | head`: the reader left; no traceback, no second error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["tune"]:
        from harness.tune.runner import main as tune_main

        return tune_main(argv[1:])
    if argv[:1] == ["numbers"]:  # README's table of current numbers (harness/numbers.py parses its own arguments)
        from harness.numbers import main as numbers_main

        return numbers_main(argv[1:])
    args = parser().parse_args(argv)
    if args.command == "parse":
        return cmd_parse(args)
    if args.command == "bench":
        from harness.bench.cli import bench_command

        return bench_command(args)
    if args.command == "render":
        return cmd_render(args)
    if args.command == "history":
        from harness.history.cli import history_command

        return history_command(args)
    if args.command == "selftest":
        from harness import selftest

        return selftest.main(cases=args.cases, share=args.share)
    try:
        config = load_config(args.gates_dir)
    except ConfigError as e:
        print(f"flashcore harness: bad gate file: {e}", file=sys.stderr)
        return EXIT_CONFIG
    if args.command == "list":
        return cmd_list(config)
    if args.command == "merge":
        return cmd_merge(args, config)
    return cmd_gate(args, config)
