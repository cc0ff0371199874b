"""FA3's own forward tests (its hopper/test_flash_attn.py) run on FlashCore: the outside check of "runs every call
FA3's users make". FA3's test files are not in this repository; pass a checkout's hopper/ folder:

    python tools/fa3_tests/run.py --hopper ~/flash-attention/hopper [--sample 150] [--tests test_flash_attn]

Its test file, padding.py and test_util.py are copied into a scratch folder beside the shim (shim/): a
flash_attn_interface module that is FlashCore's FA3-named functions, a torch reference of flash_attn's
apply_rotary_emb (so that FA3's rotary cases are generated), and a conftest that keeps the tests whose name starts
with --tests, whose dtype parameter holds --dtype, and a deterministic one in --sample of those (crc32 of the test
id). Backward is off (FLASH_ATTENTION_DISABLE_BACKWARD, FlashCore is forward-only); FA3's race-condition test still
calls backward and allocates 70 GiB, so it is left out unless --tests names it. Needs a Hopper GPU, einops and
pytest. Prints the passed and failed counts per test function, pytest's last line (skips included) and the most
common failure lines, and exits 1 when a test failed.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SHIM = Path(__file__).resolve().parent / "shim"
REPO = Path(__file__).resolve().parents[2]
FA3_FILES = ("test_flash_attn.py", "padding.py", "test_util.py")
OUTCOME = re.compile(r"^(PASSED|FAILED|ERROR) [^:]+::(\w+)")


def summary(log: str) -> tuple[dict[str, collections.Counter[str]], list[tuple[int, str]]]:
    """Per test function, its outcomes; and the failure lines ("E   ...") by count, most first."""
    by_test: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in log.splitlines():
        if m := OUTCOME.match(line):
            by_test[m.group(2)][m.group(1)] += 1
    errors = collections.Counter(line.strip()[:200] for line in log.splitlines() if line.startswith("E   "))
    return by_test, [(n, line) for line, n in errors.most_common(8)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hopper", type=Path, required=True, help="FA3's hopper/ folder (holds test_flash_attn.py)")
    ap.add_argument("--tests", default="test_flash_attn_", help="test function name prefix")
    ap.add_argument("--dtype", default="", help="keep tests whose dtype parameter holds this (e.g. float8)")
    ap.add_argument("--sample", type=int, default=1, help="keep one test in N (deterministic)")
    ap.add_argument("--timeout", type=int, default=3000, help="seconds for the whole pytest run")
    ap.add_argument("--log", type=Path, help="write pytest's output here")
    args = ap.parse_args(argv)
    missing = [f for f in FA3_FILES if not (args.hopper / f).is_file()]
    if missing:
        print(f"{args.hopper}: {', '.join(missing)} missing (FA3's hopper/ folder holds them)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="fa3-tests-") as tmp:
        shutil.copytree(SHIM, tmp, dirs_exist_ok=True)
        for f in FA3_FILES:
            shutil.copy(args.hopper / f, tmp)
        env = {**os.environ, "FLASH_ATTENTION_DISABLE_BACKWARD": "TRUE", "FA3_TEST": args.tests,
               "FA3_DTYPE": args.dtype, "FA3_SAMPLE": str(args.sample), "FA3_SKIP_RACE": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
        cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "test_flash_attn.py"]
        try:
            run = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=args.timeout)
            log, code = run.stdout + run.stderr, run.returncode
        except subprocess.TimeoutExpired as e:  # its output comes as bytes whatever text= said
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            log, code = f"{out}\ntimed out after {args.timeout} s", 124
    if args.log:
        args.log.write_text(log)
    by_test, errors = summary(log)
    print(f"{'test':36} {'passed':>7} {'failed':>7}")
    for name, counts in sorted(by_test.items()):
        print(f"{name:36} {counts['PASSED']:>7} {counts['FAILED'] + counts['ERROR']:>7}")
    print(log.strip().splitlines()[-1] if log.strip() else "no output")
    for n, line in errors:
        print(f"{n:>5}  {line}")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
