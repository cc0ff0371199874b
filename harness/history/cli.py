"""`python -m harness history`: print the last runs and the trend of each series, flagging a change beyond the
run-to-run spread; `--import FILE...` adds stored runs (results.json: CI artifacts; reports/evidence/ keeps them
xz-compressed, .json.xz, which is read as is) first.
The file: gates/history.yaml `file`, or $FLASHCORE_HISTORY (a CI runner keeps it outside the checkout), or --db."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from harness.history import store
from harness.history.report import TrendReport, trend_report
from harness.history.trends import HISTORY_FILE, HistorySettings, load_history_settings, render
from harness.schema import Config, ConfigError

EXIT_CONFIG = 2


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--gates-dir", type=Path, default=Path("gates"), help="directory of the YAML (default gates)")
    ap.add_argument("--db", type=Path, help="history file (default $FLASHCORE_HISTORY, else gates/history.yaml)")
    ap.add_argument("--import", dest="imports", type=Path, nargs="+", default=[], metavar="RESULTS_JSON",
                    help="add these stored runs first, .json or .json.xz (a run already there is skipped)")
    ap.add_argument("--gate", help="only this gate's series")
    ap.add_argument("--workload", help="only this workload's series")
    ap.add_argument("--flagged", action="store_true", help="only the series whose newest value moved")


def history_path(settings: HistorySettings, explicit: Path | None = None) -> Path:
    """--db, else $FLASHCORE_HISTORY, else gates/history.yaml's `file`."""
    if explicit is not None:
        return explicit
    env = os.environ.get("FLASHCORE_HISTORY")
    return Path(env) if env else Path(settings.file)


def history_command(args: argparse.Namespace) -> int:
    try:
        settings = load_history_settings(args.gates_dir)
        path = history_path(settings, args.db)
    except ConfigError as e:
        print(f"flashcore history: bad gate file: {e}", file=sys.stderr)
        return EXIT_CONFIG
    if not args.imports and not path.is_file():
        print(f"flashcore history: {path} does not exist yet: it is written by make gate-phaseN, or built from "
              "stored runs with --import reports/evidence/*.json*", file=sys.stderr)
        return 1
    try:
        db = store.open_db(path)
    except store.HistoryError as e:
        print(f"flashcore history: {e}", file=sys.stderr)
        return 1
    try:
        for f in args.imports:
            try:
                added = store.import_file(db, f)
            except store.HistoryError as e:
                print(f"flashcore history: skipped: {e}", file=sys.stderr)
                continue
            print(f"{'imported' if added else 'already there'}: {f}")
        print(f"history: {path}")
        print(render(db, settings, args.gate, args.workload, args.flagged))
    finally:
        db.close()
    return 0


def record_run(results: dict[str, object], config: Config, source: str) -> str:
    """Append a finished gate run; the line to print (never raises: a history problem must not lose the run's
    verdict, and the report is already written)."""
    try:
        path = history_path(config.once(HISTORY_FILE, load_history_settings))
        db = store.open_db(path)
    except (ConfigError, store.HistoryError, OSError) as e:
        return f"history: not recorded: {e}"
    try:
        added = store.record(db, results, source)
    except (store.HistoryError, OSError, ValueError) as e:
        return f"history: not recorded: {e}"
    finally:
        db.close()
    return f"history: {'recorded in' if added else 'already in'} {path} (python -m harness history)"


def run_trends(config: Config, run_id: str, gpu: str) -> TrendReport | None:
    """The report's trend section for a run just recorded; None when the history settings cannot be read (the
    report then has no trend section; record_run has said why)."""
    try:
        settings = config.once(HISTORY_FILE, load_history_settings)
    except ConfigError:
        return None
    return trend_report(history_path(settings), settings, run_id, gpu)
