"""`python -m harness tune rekey --old-lib OLD.so --new-lib NEW.so`: carry the tuned tables over a kernel source change
that left the machine code as it was.

The tables of flashcore/tuned.yaml are keyed by fc_kernel_id(), a hash of the kernel sources, so moving code, renaming
a file or rewording a comment makes every table stale although the GPU runs the same instructions. This command dumps
the SASS of every kernel of both libraries (harness/tune/sass.py) and, only when each kernel of the old library is
identical in the new one but FP8 ones (which no table names: the tables hold bf16 and fp16 buckets) and the new one
adds none but FP8 kernels, other objects' copies of unchanged kernels (the same SASS under the same name) and the
kernels of a head dim the old library had no kernel of (refused when a table names a head dim that now runs on one),
rewrites the kernel_id of every table measured on the old library's kernel to the new library's, recording where it
came from:

    kernel_id: <new id>
    rekeyed_from: {kernel_id: <old id>, sass_sha256: <digest of every kernel's SASS>, kernels: <count>,
                   added_fp8: <FP8 kernels only in the new library, when any>,
                   added_copies: <copies of unchanged kernels in another object, when any>,
                   added_head_dims: <the kernel head dims only the new library has (a list), when any>,
                   changed_fp8: <FP8 kernels whose SASS changed, when any>}

Otherwise it refuses, naming the kernels that differ, and the file stays as it was: those tables need `make tune`.
The old library must be a build of the sources the tables were measured on (its fc_kernel_id is their kernel_id).
"""

from __future__ import annotations

import argparse
import ctypes
import re
import sys
from collections.abc import Callable
from pathlib import Path

from harness.tune.sass import SassComparison, SassError, compare_libraries

DEFAULT_TABLE = Path("flashcore/tuned.yaml")


class RekeyError(RuntimeError):
    """Why a table file was left as it was."""


def library_kernel_id(library: Path) -> str:
    """fc_kernel_id() of a built library (dlopen needs no GPU)."""
    try:
        lib = ctypes.CDLL(str(library.resolve()))
    except OSError as e:
        raise RekeyError(f"{library}: cannot load it: {e}") from None
    fn = lib.fc_kernel_id
    fn.restype = ctypes.c_char_p
    value = fn()
    return value.decode() if value else ""


def rekey_text(text: str, old_id: str, new_id: str, sass: SassComparison) -> tuple[str, int]:
    """The table file with every `kernel_id: old_id` line of a table replaced by new_id and its `rekeyed_from`
    record (an earlier record of that table, which follows its kernel_id, is replaced); the count of tables
    rewritten. Line edits keep the file's order, comments and formatting."""
    if not sass.tables_hold:
        raise RekeyError("the SASS differs: " + ", ".join(sass.names.get(n, n) for n in sass.differing()))
    out: list[str] = []
    count = 0
    record_pad: str | None = None  # the indent of the rewritten table's keys while its old record may follow
    dropping = False
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip(" ")
        indent = line[: len(line) - len(stripped)]
        if dropping and stripped.strip() and len(indent) > len(record_pad or ""):
            continue  # a line of the old record
        dropping = False
        if record_pad is not None and indent == record_pad and stripped.startswith("rekeyed_from:"):
            dropping = True
            continue
        record_pad = None
        m = re.fullmatch(r"(\s*(?:- )?)kernel_id: *['\"]?([0-9A-Za-z]+)['\"]? *\n?", line)
        if m and m.group(2) == old_id:
            pad = " " * len(m.group(1))
            out.append(f"{m.group(1)}kernel_id: {new_id}\n")
            out.append(f"{pad}rekeyed_from:\n{pad}  kernel_id: {old_id}\n{pad}  sass_sha256: {sass.new_digest}\n"
                       f"{pad}  kernels: {sass.total}\n")
            if fp8 := len(sass.only_new) - len(sass.copies) - len(sass.added_head_dim_kernels):
                out.append(f"{pad}  added_fp8: {fp8}\n")
            if sass.changed:
                out.append(f"{pad}  changed_fp8: {len(sass.changed)}\n")
            if sass.copies:
                out.append(f"{pad}  added_copies: {len(sass.copies)}\n")
            if sass.added_head_dims:  # a block list, as flashcore.tuning.dump_tables writes it back
                out.append(f"{pad}  added_head_dims:\n" + "".join(f"{pad}  - {d}\n" for d in sass.added_head_dims))
            count += 1
            record_pad = pad
            continue
        out.append(line)
    return "".join(out), count


def rekey(table: Path, old_lib: Path, new_lib: Path, say: Callable[[str], None] = print) -> int:
    """Rewrite `table` in place when every kernel's SASS is identical; returns the tables rewritten."""
    from flashcore.head_dims import KERNEL_HEAD_DIMS, kernel_head_dim
    from flashcore.tuning import parse_tables

    old_id, new_id = library_kernel_id(old_lib), library_kernel_id(new_lib)
    if not old_id or not new_id or old_id == "unknown" or new_id == "unknown":
        raise RekeyError(f"a library without a kernel id (old {old_id!r}, new {new_id!r}): build both with make build")
    text = table.read_text()
    tables = parse_tables(text, str(table))
    if not any(t.kernel_id == old_id for t in tables):
        raise RekeyError(f"{table}: no table is keyed by the old library's kernel {old_id} (tables: "
                         f"{', '.join(sorted({t.kernel_id for t in tables})) or 'none'})")
    if old_id == new_id:
        raise RekeyError(f"both libraries are kernel {old_id}: nothing to rekey")
    say(f"comparing the SASS of {old_lib} (kernel {old_id}) and {new_lib} (kernel {new_id})")
    sass = compare_libraries(old_lib, new_lib)
    for line in sass.lines():
        say(line)
    unknown = sorted(set(sass.added_head_dims) - set(KERNEL_HEAD_DIMS))
    if unknown:
        raise RekeyError(f"kernels of head dims {', '.join(map(str, unknown))} are new, but flashcore/head_dims.py "
                         f"KERNEL_HEAD_DIMS ({', '.join(map(str, KERNEL_HEAD_DIMS))}) does not list them")
    moved = sorted({e.head_dim for t in tables if t.kernel_id == old_id for e in t.entries
                    if kernel_head_dim(e.head_dim) in sass.added_head_dims})
    if moved:
        raise RekeyError(f"the tables name head dims {', '.join(map(str, moved))}, which now run on a kernel the old "
                         "library did not have: re-run make tune")
    new_text, count = rekey_text(text, old_id, new_id, sass)
    rewritten = parse_tables(new_text, str(table))  # the result must still parse, every table in its place
    if [t.gpu for t in rewritten] != [t.gpu for t in tables] or \
            [len(t.entries) for t in rewritten] != [len(t.entries) for t in tables]:
        raise RekeyError("the rewritten file lost a table or an entry; left as it was")
    table.write_text(new_text)
    say(f"{table}: {count} table(s) rekeyed {old_id} -> {new_id} (SASS sha256 {sass.new_digest[:16]})")
    return count


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness tune rekey", description=__doc__.splitlines()[0])
    ap.add_argument("--old-lib", type=Path, required=True, help="a build of the sources the tables were measured on")
    ap.add_argument("--new-lib", type=Path, required=True, help="a build of the current sources (make build)")
    ap.add_argument("--table", type=Path, default=DEFAULT_TABLE, help=f"the table file (default {DEFAULT_TABLE})")
    args = ap.parse_args(argv)
    try:
        rekey(args.table, args.old_lib, args.new_lib)
    except (RekeyError, SassError) as e:
        print(f"flashcore tune rekey: refused: {e}", file=sys.stderr)
        return 1
    return 0
