"""The code's shape: floors that import only downwards, a small top level, no import circle
inside ``rewriter/``, no module over 600 lines.

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
#: Modules allowed directly in ``rewriter/`` besides packages (``__init__``/``__main__`` count).
MAX_TOP_LEVEL = 8

#: The floors of ``rewriter/``, lowest first: a module may import its own floor and the floors
#: below it, never one above. Each entry is a top-level module or package of ``rewriter``
#: (``docs/architecture.md`` draws the same order).
LAYERS: list[tuple[str, ...]] = [
    ("rewriter", "errors", "defaults", "ui"),  # the ground floor (``rewriter`` is __init__)
    ("host",),       # child processes, supervision, memory, file system, package data
    ("ir",),         # Model, GraphDef helpers, static evaluation, loops, patterns, ranges
    ("targets",),    # op tables, constraints, verdicts, converter prediction, artifacts
    ("rules",),      # one file per rewrite rule
    ("frontends",),  # every TF format -> Model
    ("rewrite",),    # the pass engine and the planner
    ("verify",),     # runners, metrics, tolerance, int8 error, histograms
    ("export",),     # TFLite, ONNX, SavedModel
    ("surgery",),    # checkpoints: restore, unfreeze, merge
    ("tune",),       # recover, QAT, pre-quantisation, int8 range
    ("job",),        # the main job: stages, results, pipeline
    ("report",),     # report.json / .md / .html renderers
    ("batch",),      # manifest, local pool, Ray
    ("commands",),   # one module per subcommand
    ("cli", "__main__"),
]
#: Test helpers: a leaf that tests and benchmarks import and the library never does.
LEAVES = ("testing",)


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
    assert "rewriter.targets.target" in graph and "rewriter.targets.artifact" in graph
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
    assert len(sizes) > 50 and "rewriter/job/pipeline.py" in sizes
    over = {k: v for k, v in sizes.items() if v > MAX_LINES}
    assert over == {}, f"modules over {MAX_LINES} lines (split them): {over}"


def test_the_split_modules_stay_apart():
    """The two circles of issue 15 stay broken: the artifact reader needs no target, and the
    base runner module needs no runner built on it."""
    graph = import_graph()
    assert graph["rewriter.targets.artifact"] <= {"rewriter.errors", "rewriter.targets.opfacts"}
    assert "rewriter.verify.tflm" not in graph["rewriter.verify.runners"]
    assert "rewriter.verify.runners" in graph["rewriter.verify.tflm"]


def _unit(module: str) -> str:
    """The floor entry a module belongs to: ``rewriter.ir.model`` -> ``ir``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _floor_of() -> dict[str, int]:
    return {unit: i for i, floor in enumerate(LAYERS) for unit in floor}


def upward_imports(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) pairs where the imported module sits on a higher floor, or is a
    leaf (test helper) imported by the library."""
    floor = _floor_of()
    out = set()
    for a, targets in graph.items():
        if _unit(a) in LEAVES:
            continue
        for b in targets:
            ua, ub = _unit(a), _unit(b)
            if ub in LEAVES or (ub != ua and floor[ub] > floor[ua]):
                out.add((a, b))
    return out


def test_every_module_has_a_floor():
    graph = import_graph()
    floor = _floor_of()
    homeless = sorted({_unit(m) for m in graph} - set(floor) - set(LEAVES))
    assert homeless == [], f"add these to LAYERS (tests/test_structure.py): {homeless}"


def test_no_import_up_a_floor():
    graph = import_graph()
    up = upward_imports(graph)
    # importing `rewriter.report.build` also imports the package `rewriter.report.build`: list the module
    found = {(a, b) for a, b in up if not any(c.startswith(b + ".") for a2, c in up if a2 == a)}
    assert found == set(), "imports up a floor (see LAYERS):\n" + "\n".join(
        f"{a} -> {b}" for a, b in sorted(found))


def test_the_floor_check_sees_an_import_up(tmp_path):
    graph = {"rewriter.ir.model": {"rewriter.job.pipeline", "rewriter.errors"},
             "rewriter.job.pipeline": {"rewriter.ir.model"},
             "rewriter.rules.base": {"rewriter.testing"},
             "rewriter.testing": {"rewriter.job.pipeline"}}
    assert upward_imports(graph) == {("rewriter.ir.model", "rewriter.job.pipeline"),
                                     ("rewriter.rules.base", "rewriter.testing")}


def test_a_small_top_level():
    top = sorted(p.name for p in (ROOT / PACKAGE).glob("*.py"))
    assert "cli.py" in top
    assert len(top) <= MAX_TOP_LEVEL, (
        f"{len(top)} modules directly in rewriter/ (at most {MAX_TOP_LEVEL}; put the others in "
        f"a package by role): {top}")
