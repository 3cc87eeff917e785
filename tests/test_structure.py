"""The code's shape: no import circle inside ``rewriter/``, no module over 600 lines.

Imports are read from the source (``ast``), at module level, inside functions (a lazy import is
still a dependency: it only moves the circle to run time) and under ``if TYPE_CHECKING:`` (a
type-only circle is still two modules that cannot be understood apart). Importing ``pkg.sub``
from outside ``pkg`` runs ``pkg/__init__.py`` first, so it counts as an import of ``pkg`` too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "rewriter"
MAX_LINES = 600
#: Trees whose Python modules the size limit covers.
SIZED = ("rewriter", "benchmarks", "tests", "models")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, wherever it stands."""
    return (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))


def imported_modules(name: str, is_package: bool, tree: ast.AST,
                     known: set[str]) -> set[str]:
    """The project modules that module ``name`` imports (package inits included)."""
    targets: set[str] = set()
    for node in _import_nodes(tree):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = name.split(".") if is_package else name.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        targets.add(base)
        targets.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import submodule`
    out: set[str] = set()
    for target in targets:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            inside = name == prefix or name.startswith(prefix + ".")
            if prefix in known and prefix != name and (i == len(parts) or not inside):
                out.add(prefix)
    return out


def import_graph(root: Path = ROOT / PACKAGE) -> dict[str, set[str]]:
    paths = {module_name(p): p for p in root.rglob("*.py")}
    known = set(paths)
    return {name: imported_modules(name, p.name == "__init__.py",
                                   ast.parse(p.read_text(), str(p)), known)
            for name, p in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _edges_within(graph: dict[str, set[str]], comp: Iterable[str]) -> list[str]:
    members = set(comp)
    return [f"{a} -> {b}" for a in sorted(members) for b in sorted(graph[a] & members)]


def test_no_import_circle_inside_rewriter():
    graph = import_graph()
    assert "rewriter.targets.target" in graph and "rewriter.artifact" in graph
    found = cycles(graph)
    assert found == [], "import circles:\n" + "\n".join(
        "; ".join(_edges_within(graph, c)) for c in found)


def test_the_cycle_finder_sees_lazy_and_type_only_imports_and_package_inits(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub.facts import X\n")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.judge import judge\n")
    (pkg / "sub" / "facts.py").write_text("X = 1\n")
    (pkg / "sub" / "judge.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.b\n"
        "def judge():\n    from pkg.a import read\n")
    (pkg / "b.py").write_text("import pkg.a\n")

    def graph() -> dict[str, set[str]]:
        paths = {".".join(p.relative_to(tmp_path).with_suffix("").parts).removesuffix(
            ".__init__"): p for p in pkg.rglob("*.py")}
        return {n: imported_modules(n, p.name == "__init__.py", ast.parse(p.read_text()),
                                    set(paths)) for n, p in paths.items()}

    # a -> pkg.sub (its __init__ runs first) -> pkg.sub.judge -> (lazily) a, and
    # judge -> (for types only) b -> a
    assert cycles(graph()) == [["pkg.a", "pkg.b", "pkg.sub", "pkg.sub.judge"]]
    (pkg / "sub" / "__init__.py").write_text("")
    assert cycles(graph()) == []


def _sized_modules() -> list[Path]:
    return sorted(p for tree in SIZED for p in (ROOT / tree).rglob("*.py"))


def test_no_module_over_600_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for p in _sized_modules()}
    assert len(sizes) > 50 and "rewriter/pipeline.py" in sizes
    over = {k: v for k, v in sizes.items() if v > MAX_LINES}
    assert over == {}, f"modules over {MAX_LINES} lines (split them): {over}"


def test_the_split_modules_stay_apart():
    """The two circles of issue 15 stay broken: the artifact reader needs no target, and the
    base runner module needs no runner built on it."""
    graph = import_graph()
    assert "rewriter.targets" not in graph["rewriter.artifact"]
    assert "rewriter.verify.tflm" not in graph["rewriter.verify.runners"]
    assert "rewriter.verify.runners" in graph["rewriter.verify.tflm"]
