"""The SASS of every kernel of two builds of libflashcore.so, paired by name: identical, changed, or in one only.

    python -m harness.tune.sass OLD.so NEW.so [--json]

A kernel source change that only moves code (a function into another header, a comment) must leave the machine code
as it was; a tuned table measured on the old build then holds for the new one (harness/tune/rekey.py). The dump is
`cuobjdump --dump-sass` (the CUDA toolkit's, or the one the triton wheel ships: `pip install triton`; CUOBJDUMP
names another). Each kernel's text is compared whole, instruction encodings included, with only the listing's
addresses (`/*0a30*/`) and spacing taken out: a different register, stall count or instruction order is a change.
Exit code 0 when every kernel is identical and both builds have the same kernels, 1 otherwise, 2 when the dump
failed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")
_ADDRESS = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s*")  # the listing's offset at the start of an instruction line
_SPACE = re.compile(r"\s+")


class SassError(RuntimeError):
    """The SASS of a library could not be dumped (no cuobjdump, not a CUDA library, the tool failed)."""


def find_cuobjdump() -> Path:
    """CUOBJDUMP, cuobjdump on PATH, then the one inside the triton wheel (backends/nvidia/bin)."""
    if env := os.environ.get("CUOBJDUMP"):
        return Path(env)
    if found := shutil.which("cuobjdump"):
        return Path(found)
    spec = importlib.util.find_spec("triton")
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            tool = Path(root) / "backends" / "nvidia" / "bin" / "cuobjdump"
            if tool.is_file():
                return tool
    raise SassError("cuobjdump not found: install the CUDA toolkit's, or `python -m pip install triton` (it ships "
                    "one), or name it with CUOBJDUMP=/path/to/cuobjdump")


def dump_sass(library: Path, tool: Path | None = None) -> str:
    """`cuobjdump --dump-sass library`'s text."""
    if not library.is_file():
        raise SassError(f"{library}: no such file")
    tool = tool or find_cuobjdump()
    try:
        done = subprocess.run([str(tool), "--dump-sass", str(library)], capture_output=True, text=True, check=False)
    except OSError as e:
        raise SassError(f"{tool}: {e}") from None
    if done.returncode != 0:
        raise SassError(f"{tool} --dump-sass {library} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return done.stdout


# nvcc names an anonymous namespace `_GLOBAL__N__<8 hex digits>_<file>_<hash>`, the first hash changing with the
# build's directory: the same kernel built from another checkout has another name. Zeroed, the name keeps its length
# (so it still demangles) and pairs the two.
_ANON_NAMESPACE = re.compile(r"_GLOBAL__N__[0-9a-f]{8}_")


def parse_sass(text: str) -> dict[str, tuple[str, ...]]:
    """Kernel name (mangled, anonymous namespaces' build hash zeroed) -> its listing, one normalized line per
    instruction or encoding word. A name that occurs in two objects of the library gets `#2`, `#3`, ... in listing
    order."""
    kernels: dict[str, tuple[str, ...]] = {}
    name: str | None = None
    lines: list[str] = []

    def close() -> None:
        if name is not None:
            key, n = name, 1
            while key in kernels:
                n += 1
                key = f"{name}#{n}"
            kernels[key] = tuple(lines)

    for raw in text.splitlines():
        if m := _FUNCTION.match(raw):
            close()
            name, lines = _ANON_NAMESPACE.sub("_GLOBAL__N__00000000_", m.group(1)), []
        elif raw.startswith("Fatbin ") or raw.strip().startswith(("code for ", ".target")):
            close()  # the next object's header: the listing of the last kernel ended
            name, lines = None, []
        elif name is not None and (line := _SPACE.sub(" ", _ADDRESS.sub("", raw)).strip()):
            lines.append(line)
    close()
    return kernels


def demangle(names: list[str]) -> dict[str, str]:
    """Mangled -> demangled by c++filt where it is installed; the names themselves otherwise."""
    tool = shutil.which("c++filt")
    if tool is None or not names:
        return {n: n for n in names}
    done = subprocess.run([tool], input="\n".join(n.split("#")[0] for n in names), capture_output=True, text=True,
                          check=False)
    out = done.stdout.splitlines()
    if done.returncode != 0 or len(out) != len(names):
        return {n: n for n in names}
    return {n: d + (f" #{n.split('#')[1]}" if "#" in n else "") for n, d in zip(names, out, strict=True)}


def digest(kernels: dict[str, tuple[str, ...]]) -> str:
    """sha256 over every kernel's name and normalized listing, in name order: equal digests, equal machine code."""
    h = hashlib.sha256()
    for name in sorted(kernels):
        h.update(name.encode() + b"\n" + "\n".join(kernels[name]).encode() + b"\n\n")
    return h.hexdigest()


def is_attention_kernel(name: str) -> bool:
    """The attention kernels (the Hopper wgmma kernel and the phase-1 reference), not the combine and zero kernels."""
    return "attention_forward" in name


# The kernels whose first template argument is the kernel head dim (mangled `<name>ILi<hd>E`): the Hopper attention
# kernel, its split-KV and stream-K tail combines.
_HEAD_DIM = re.compile(r"(?:attention_forward_wgmma_kernel|combine_splits_kernel|combine_tail_kernel)ILi(\d+)E")


def head_dim_of(name: str) -> int | None:
    """The head dim a Hopper attention or combine kernel is compiled for; None for other kernels (the zero kernel,
    the append, the phase-1 kernel)."""
    m = _HEAD_DIM.search(name)
    return int(m.group(1)) if m else None


def head_dims_of(kernels: Iterable[str]) -> set[int]:
    return {d for n in kernels if (d := head_dim_of(n)) is not None}


def is_fp8_kernel(name: str) -> bool:
    """An attention kernel instantiated for FP8 inputs (template argument flashcore::E4m3, mangled `4E4m3`)."""
    return is_attention_kernel(name) and "4E4m3" in name


@dataclass(frozen=True)
class SassComparison:
    """Two libraries' kernels paired by name. Pure data."""

    identical: tuple[str, ...]
    changed: tuple[str, ...]
    only_old: tuple[str, ...]
    only_new: tuple[str, ...]
    old_digest: str
    new_digest: str
    names: dict[str, str] = field(default_factory=dict)  # mangled -> demangled, for messages
    # Of only_new: another object's copy (`name#2`, ...) of a kernel identical in both, with the same SASS (two
    # objects instantiate one template: kernel/fp8_decode.cu's combine and zero kernels)
    copies: tuple[str, ...] = ()
    # Head dims whose kernels are all new: no kernel of the old library had them (a kernel head dim added, as 160 and
    # 224 beside 192 and 256). A table keyed by the old kernel names none of them (rekey checks its entries).
    added_head_dims: tuple[int, ...] = ()

    @property
    def added_head_dim_kernels(self) -> tuple[str, ...]:
        """The kernels only in the new library of an added head dim, FP8 ones and copies left out (counted apart)."""
        return tuple(n for n in self.only_new if head_dim_of(n) in self.added_head_dims and not is_fp8_kernel(n)
                     and n not in self.copies)

    @property
    def total(self) -> int:
        return len(self.identical) + len(self.changed) + len(self.only_old) + len(self.only_new)

    @property
    def same(self) -> bool:
        """Every kernel identical, none in one library only."""
        return not (self.changed or self.only_old or self.only_new)

    @property
    def tables_hold(self) -> bool:
        """Every kernel a tuned table can name is as it was: none gone, the changed ones FP8 kernels, which no table
        names (tables hold bf16 and fp16 buckets: flashcore/tuning.py), and the kernels only in the new library
        FP8 ones, copies of unchanged kernels or kernels of a head dim the old library had none of."""
        added = set(self.added_head_dim_kernels)
        return (not self.only_old and all(is_fp8_kernel(n) for n in self.changed)
                and all(is_fp8_kernel(n) or n in self.copies or n in added for n in self.only_new))

    def differing(self) -> tuple[str, ...]:
        """The kernels that are not identical in both, changed first."""
        return self.changed + self.only_old + self.only_new

    def summary(self) -> str:
        attention = sum(is_attention_kernel(n) for n in self.identical + self.changed + self.only_old + self.only_new)
        return (f"{self.total} kernels ({attention} attention): {len(self.identical)} identical, {len(self.changed)} "
                f"changed, {len(self.only_old)} only in the old library, {len(self.only_new)} only in the new one")

    def lines(self) -> list[str]:
        out = [self.summary()]
        for label, group in (("changed", self.changed), ("only old", self.only_old), ("only new", self.only_new)):
            out += [f"  {label}: {self.names.get(n, n)}" + (" (a copy of the unchanged kernel)" if n in self.copies
                                                             else "") for n in group]
        return out

    def to_dict(self) -> dict[str, object]:
        return {"total": self.total, "identical": list(self.identical), "changed": list(self.changed),
                "only_old": list(self.only_old), "only_new": list(self.only_new), "copies": list(self.copies),
                "added_head_dims": list(self.added_head_dims),
                "old_digest": self.old_digest,
                "new_digest": self.new_digest}


def compare_kernels(old: dict[str, tuple[str, ...]], new: dict[str, tuple[str, ...]]) -> SassComparison:
    both = sorted(set(old) & set(new))
    every = sorted(set(old) | set(new))
    unchanged = {n for n in both if old[n] == new[n]}

    def copy_of_unchanged(n: str) -> bool:
        base = n.split("#")[0]
        return "#" in n and base in unchanged and new[n] == new[base]

    return SassComparison(
        identical=tuple(n for n in both if n in unchanged),
        changed=tuple(n for n in both if n not in unchanged),
        only_old=tuple(sorted(set(old) - set(new))),
        only_new=tuple(sorted(set(new) - set(old))),
        old_digest=digest(old),
        new_digest=digest(new),
        names=demangle(every),
        copies=tuple(n for n in sorted(set(new) - set(old)) if copy_of_unchanged(n)),
        added_head_dims=tuple(sorted(head_dims_of(new) - head_dims_of(old))),
    )


def compare_libraries(old: Path, new: Path, tool: Path | None = None) -> SassComparison:
    tool = tool or find_cuobjdump()
    return compare_kernels(parse_sass(dump_sass(old, tool)), parse_sass(dump_sass(new, tool)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.tune.sass", description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path, help="the reference build, e.g. a copy of build/libflashcore.so of main")
    ap.add_argument("new", type=Path, help="the build to compare")
    ap.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = ap.parse_args(argv)
    try:
        result = compare_libraries(args.old, args.new)
    except SassError as e:
        print(f"sass: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_dict(), indent=1) if args.json else "\n".join(result.lines()))
    return 0 if result.same else 1


if __name__ == "__main__":
    sys.exit(main())
