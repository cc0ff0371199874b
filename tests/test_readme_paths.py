"""README's claims that can be checked offline: it is short, every repository path, make target and harness
command it names exists, its Python examples call what flashcore has with arguments it takes, and it cites no
internal issue or step number (those belong to docs/journal.md and docs/perf-notes.md)."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
from pathlib import Path

import pytest

from harness.cli import main as harness_main

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MAX_LINES = 150
# Named in README or the guide but not repository paths: a schema id, and run-directory paths inside a report.
NOT_PATHS = {"flashcore.run/1", "logs/...", "logs/sanitizer-all/"}
BUILT = ("build/", "reports/ci", "reports/history.sqlite")  # outputs of make build / a run: absent from a clone
INTERNAL_REFS = re.compile(r"\b(issue|step|steps|session)s? #?\d+(\.\d+)?\b", re.IGNORECASE)


def _text() -> str:
    return README.read_text()


def _named_paths(text: str) -> set[str]:
    return {m for m in re.findall(r"`([\w.-]+/[\w./-]+)`", text)
            if "<" not in m and "*" not in m and not m.startswith(BUILT)} - NOT_PATHS


def make_targets() -> set[str]:
    """The Makefile's targets as make itself reads them (includes and generated gate-phaseN names too); -n: no
    recipe runs, and `help`'s only echoes."""
    db = subprocess.run(["make", "-pn", "help"], cwd=REPO, capture_output=True, text=True, timeout=60).stdout
    return {m for m in re.findall(r"^([A-Za-z][\w.-]*):(?!=)", db, re.MULTILINE)}


def test_readme_is_at_most_150_lines() -> None:
    assert len(_text().splitlines()) <= MAX_LINES


@pytest.mark.parametrize("doc", ["README.md", "docs/guide.md"])
def test_every_path_a_user_page_names_exists(doc: str) -> None:
    named = _named_paths((REPO / doc).read_text())
    assert len(named) > 10  # the pattern still finds the page's paths
    assert sorted(p for p in named if not (REPO / p).exists()) == []


def test_the_path_check_catches_a_missing_path() -> None:
    named = _named_paths("see `docs/nowhere.md` and `kernel/`")
    assert [p for p in named if not (REPO / p).exists()] == ["docs/nowhere.md"]


def test_the_roadmap_is_in_the_repository() -> None:
    assert "`docs/ROADMAP.md`" in _text() and (REPO / "docs" / "ROADMAP.md").read_text().startswith(
        "# FlashCore roadmap")


@pytest.mark.parametrize("doc", ["README.md", "docs/guide.md"])
def test_every_make_target_a_user_page_names_is_in_the_makefile(doc: str) -> None:
    targets = make_targets()
    assert {"test", "gate-phase7", "tune", "bench-baseline", "build", "prepare"} <= targets  # the reading works
    named = set(re.findall(r"`make ([\w-]+)", (REPO / doc).read_text()))
    assert {"test", "gate-phaseN"} <= named
    named = {"gate-phase7" if n == "gate-phaseN" else n for n in named}  # the phase-N pattern: one real phase
    missing = sorted(n for n in named if n not in targets)
    assert missing == [], f"{doc} names make targets the Makefile lacks: {missing}"


def test_a_made_up_target_is_not_in_the_makefile() -> None:
    assert "no-such-target" not in make_targets()


@pytest.mark.parametrize(("doc", "some"), [("README.md", {"numbers", "render", "list"}),
                                           ("docs/guide.md", {"gate", "merge", "parse", "history", "render"})])
def test_every_harness_command_a_user_page_names_runs(doc: str, some: set[str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    commands = set(re.findall(r"python -m harness (\w+)", (REPO / doc).read_text()))
    assert some <= commands
    for command in sorted(commands):
        with pytest.raises(SystemExit) as done:
            harness_main([command, "--help"])
        assert done.value.code == 0, command
        assert "usage:" in capsys.readouterr().out


def test_readme_cites_no_internal_issue_or_step_number() -> None:
    assert INTERNAL_REFS.findall("as issue 16 and step 8.54 and session 29 said") != []
    hits = [line for line in _text().splitlines() if INTERNAL_REFS.search(line)]
    assert hits == []


def example_problems(text: str) -> tuple[int, list[str]]:
    """(how many flashcore calls the ```python blocks of `text` make, what is wrong with them): a name flashcore
    lacks, a keyword its function does not take, more positional arguments than it has."""
    names: dict[str, object] = {}
    calls, problems = 0, []
    for block in re.findall(r"```python\n(.*?)```", text, re.DOTALL):
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update({a.asname or a.name: importlib.import_module(a.name) for a in node.names
                              if a.name.startswith("flashcore")})
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flashcore"):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    if not hasattr(module, alias.name):
                        problems.append(f"{node.module} has no {alias.name}")
                    names[alias.asname or alias.name] = getattr(module, alias.name, None)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name | ast.Attribute):
                continue
            if (fn := _resolve(node.func, names)) is None:
                if isinstance(node.func, ast.Attribute) and _resolve(node.func.value, names) is not None:
                    problems.append(f"no {ast.unparse(node.func)}")
                continue
            calls += 1
            params = inspect.signature(fn).parameters  # type: ignore[arg-type]
            problems += [f"{ast.unparse(node.func)} takes no {kw.arg}=" for kw in node.keywords
                         if kw.arg not in params]
            positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            if len(node.args) > len(positional):
                problems.append(f"{ast.unparse(node.func)}: {len(node.args)} positional arguments")
    return calls, problems


def _resolve(node: ast.expr, names: dict[str, object]) -> object | None:
    """The flashcore object a call's function names (`flashcore.x`, `fct.register`, an imported name), else None."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, names)
        return getattr(owner, node.attr, None) if owner is not None else None
    return None


def test_readme_examples_call_what_flashcore_has_with_arguments_it_takes() -> None:
    calls, problems = example_problems(_text())
    assert problems == []
    assert calls >= 6  # attention, attention_fp8, the three FA3 names, register


def test_the_example_check_catches_a_wrong_name_keyword_and_arity() -> None:
    text = ("```python\nimport flashcore\nfrom flashcore import flash_attn_func, no_such_name\n"
            "flashcore.attention(q, k, v, casual=True)\nflashcore.attend(q)\n"
            "flashcore.attention(q, k, v, True)\n```\n")
    calls, problems = example_problems(text)
    assert calls == 2 and problems == ["flashcore has no no_such_name", "flashcore.attention takes no casual=",
                                       "no flashcore.attend", "flashcore.attention: 4 positional arguments"]
