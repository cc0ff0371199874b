"""The import graph of flashcore/ and harness/, read from the source (ast: every import statement, at module level
and inside functions; those under `if TYPE_CHECKING:` are left out, they never run): flashcore/ has no cycle, and
harness/ none but the allowlisted ones, each of which must still be a cycle (so the list only shrinks)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def modules(package: str) -> dict[str, Path]:
    """Dotted name -> file of every module under REPO/package (a package's name is its __init__.py's)."""
    found = {}
    for path in sorted((REPO / package).rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes inside `if TYPE_CHECKING:` blocks."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The known modules that module `name` (at `path`) imports anywhere in its body."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_only(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod; `from mod import name` imports mod
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` of a name inside a module: its module
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def graph(*packages: str) -> dict[str, set[str]]:
    files = {n: p for pkg in packages for n, p in modules(pkg).items()}
    return {n: imports(n, p, set(files)) for n, p in files.items()}


def cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_module_and_function_level_imports() -> None:
    edges = graph("flashcore")
    assert "flashcore.launch" in edges["flashcore.forward"]  # module level
    assert "flashcore.ops" in edges["flashcore.api"]  # inside a function (attention under torch.compile)
    assert "flashcore.forward" not in edges["flashcore.call"]


def test_a_planted_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_flashcore_has_no_import_cycle() -> None:
    assert cycles(graph("flashcore")) == []


def test_harness_has_no_import_cycle() -> None:
    assert [sorted(c) for c in cycles(graph("harness", "flashcore"))] == []
