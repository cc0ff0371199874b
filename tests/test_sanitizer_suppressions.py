"""The reviewed suppressions file: the shipped one is empty; every entry needs match criteria and a written
justification, and any problem is a ConfigError naming the file, the key and the value."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_sanitizer_parser import load

from harness.sanitizer.suppressions import Suppression, apply, load_suppressions
from harness.schema import ConfigError

REPO = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sanitizer-suppressions.yaml"
    path.write_text(text)
    return path


def test_shipped_file_is_empty() -> None:
    assert load_suppressions(REPO / "gates" / "sanitizer-suppressions.yaml") == ()


def test_entry_loads_with_optional_regexes(tmp_path: Path) -> None:
    path = write(tmp_path, "suppressions:\n  - tool: racecheck\n    kind: shared-memory race\n"
                           "    file: '^loader\\.h:'\n    justification: async-proxy writes, see NVIDIA bug 123\n")
    (s,) = load_suppressions(path)
    assert s == Suppression("racecheck", "shared-memory race", "async-proxy writes, see NVIDIA bug 123", "",
                            r"^loader\.h:")


@pytest.mark.parametrize(("body", "key", "why"), [
    ("  - {tool: racecheck, kind: shared-memory race}\n", "suppressions[0].justification", "required"),
    ("  - {tool: racecheck, kind: shared-memory race, justification: '  '}\n", "suppressions[0].justification",
     "non-empty"),
    ("  - {tool: racecheck, justification: why}\n", "suppressions[0].kind", "required"),
    ("  - {tool: nocheck, kind: leak, justification: why}\n", "suppressions[0].tool", "must be one of"),
    ("  - {tool: memcheck, kind: leak, justification: why, kernel: '(unclosed'}\n", "suppressions[0].kernel",
     "not a regular expression"),
    ("  - {tool: memcheck, kind: leak, justification: why, line: 3}\n", "suppressions[0].line", "unknown key"),
    ("  - {tool: memcheck, kind: leak, justification: why}\n", "suppressions[0].kernel", "blanket"),
    ("  - {tool: memcheck, kind: leak, justification: why, kernel: ''}\n", "suppressions[0].kernel", "non-empty"),
    ("  - {tool: memcheck, kind: leak, justification: why, file: '.*'}\n", "suppressions[0].file",
     "matches any text"),
    ("  - {tool: memcheck, kind: leak, justification: why, kernel: 'x|'}\n", "suppressions[0].kernel",
     "matches any text"),
])
def test_bad_entries_are_refused(tmp_path: Path, body: str, key: str, why: str) -> None:
    path = write(tmp_path, "suppressions:\n" + body)
    with pytest.raises(ConfigError) as e:
        load_suppressions(path)
    assert e.value.key == key and why in e.value.why and e.value.file == str(path)


@pytest.mark.parametrize("text", ["", "suppressions:\n", "suppressions: {}\n", "other: []\n"])
def test_the_list_itself_is_required(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError):
        load_suppressions(write(tmp_path, text))


def test_matching_uses_tool_kind_kernel_and_file() -> None:
    log = load("kernel-racecheck-old-race")
    base = Suppression("racecheck", "shared-memory race", "test")
    assert all(f.suppressed for f in apply(log, (base,)).findings)
    only_34 = Suppression("racecheck", "shared-memory race", "test", kernel="cp_async", file=r"loader\.h:13")
    assert [f.suppressed for f in apply(log, (only_34,)).findings] == [True, True]
    assert not any(f.suppressed for f in apply(log, (Suppression("memcheck", "shared-memory race", "t"),)).findings)
    assert not any(f.suppressed for f in apply(log, (Suppression("racecheck", "leak", "t"),)).findings)
    assert not any(f.suppressed for f in apply(log, (Suppression("racecheck", "shared-memory race", "t",
                                                                  kernel="ldmatrix"),)).findings)


def test_blanket_suppression_cannot_silence_a_real_invalid_global_write(tmp_path: Path) -> None:
    from harness.results import Status
    from harness.sanitizer.verdict import judge

    blanket = write(tmp_path, "suppressions:\n  - {tool: memcheck, kind: invalid global write, justification: x}\n")
    with pytest.raises(ConfigError) as e:
        load_suppressions(blanket)
    assert (e.value.file, e.value.key, e.value.value) == (str(blanket), "suppressions[0].kernel", "")
    log = load("memcheck-oob")
    assert judge(apply(log, ())).status is Status.FAIL  # the write the blanket silenced stays red
    named = write(tmp_path, "suppressions:\n  - {tool: memcheck, kind: invalid global write, justification: x, "
                            "kernel: '^oob_write\\('}\n")
    assert all(f.suppressed for f in apply(log, load_suppressions(named)).findings if f.kind == "invalid global write")
