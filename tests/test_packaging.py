"""The package as users install it: the wheel carries everything, and dependencies are honest.

The wheel test builds the wheel from the sources (no network: no build isolation), installs it
with pip into a fresh virtual environment and runs the console script from a directory outside
the repository, with ``PYTHONPATH`` unset, so nothing of the checkout can be imported. The third
party packages come from the interpreter running the tests, added to the fresh environment as
plain path entries (their ``.pth`` files, e.g. an editable install of this repo, are not run):
installing TensorFlow again would take minutes and prove nothing about our wheel. That the
declared dependencies are the ones the code imports is checked by the second test, and
``.ci/run`` also installs the wheel with its dependencies resolved by pip.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from rewriter.host.resources import source_checkout

from .conftest import MODELS, ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: What the sdist/wheel build reads from the checkout.
_BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "rewriter", "op_tables")


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    """A wheel built from the checkout, installed by pip into a fresh venv outside the repo."""
    base = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    src = base / "src"
    src.mkdir()
    for name in _BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    dist = base / "dist"
    proc = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                 "--no-index", "-q", "-w", str(dist), str(src)], cwd=base, env=env)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = dist.glob("rewriter-*.whl")
    venv = base / "venv"
    proc = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=base)
    assert proc.returncode == 0, proc.stderr
    python = venv / "bin" / "python"
    proc = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                 "--no-index", "-q", str(wheel)], cwd=base, env=env)
    assert proc.returncode == 0, proc.stderr
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   cwd=base).stdout.strip()
    deps = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(purelib) / "_test_dependencies.pth").write_text("\n".join(deps) + "\n")
    work = base / "elsewhere"
    work.mkdir()
    shutil.copy2(MODELS / "convbn_elu.keras", work / "model.keras")
    shutil.copy2(MODELS / "calibration.npy", work / "calibration.npy")
    return {"venv": venv, "python": python, "rewrite": venv / "bin" / "rewrite", "work": work,
            "wheel": wheel, "env": env}  # type: ignore[dict-item]


def test_wheel_carries_the_op_tables_and_runs_outside_the_repository(installed):
    from rewriter.targets import target_names

    work, env = installed["work"], installed["env"]
    where = _run([str(installed["python"]), "-c",
                  "import rewriter, rewriter.host.resources as r; print(rewriter.__file__); "
                  "print(r.source_checkout()); print(r.op_tables_dir())"], cwd=work, env=env)
    assert where.returncode == 0, where.stderr
    module, checkout, tables = where.stdout.split()
    venv = str(installed["venv"])
    assert module.startswith(venv) and tables.startswith(venv) and checkout == "None"
    assert Path(tables, "edgetpu.toml").is_file()

    proc = _run([str(installed["rewrite"]), "targets", "--json"], cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr
    assert [t["name"] for t in json.loads(proc.stdout)] == target_names()


def test_installed_wheel_checks_and_runs_the_quick_start_model(installed):
    work, env, rewrite = installed["work"], installed["env"], str(installed["rewrite"])
    proc = _run([rewrite, "check", "model.keras", "--target", "edgetpu", "--json"],
                cwd=work, env=env)
    assert proc.returncode == 1, proc.stderr  # ELU: the Edge TPU lacks it until rewritten
    result = json.loads(proc.stdout)
    assert result["target"] == "edgetpu" and result["ok"] is False
    assert {u["fix"] for u in result["unsupported"] if u["fix"]} >= {"elementwise_ramps"}

    proc = _run([rewrite, "model.keras", "--target", "edgetpu", "--calibration",
                 "calibration.npy", "-o", "out"], cwd=work, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((work / "out" / "report.json").read_text())
    assert report["ok"] is True and report["unsupported_after"] == []
    assert (work / "out" / "model.tflite").stat().st_size > 0


def test_installed_docs_command_needs_an_output_directory(installed):
    proc = _run([str(installed["rewrite"]), "docs", "--check"], cwd=installed["work"],
                env=installed["env"])
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: no source checkout") and "--out" in proc.stderr


@pytest.mark.slow
def test_installed_docs_command_writes_the_pages(installed):
    """Generating every page plans every activation on every target (tens of seconds): the
    source checkout's pages are checked in the default run (tests/test_op_tables.py)."""
    proc = _run([str(installed["rewrite"]), "docs", "--out", "pages"], cwd=installed["work"],
                env=installed["env"])
    assert proc.returncode == 0, proc.stderr
    assert (installed["work"] / "pages" / "edgetpu.md").is_file()


def test_source_checkout_reads_its_own_tables():
    from rewriter.host.resources import op_tables_dir

    assert source_checkout() == ROOT
    assert op_tables_dir() == ROOT / "op_tables"


# ----------------------------------------------------------------------------- dependencies
def _norm(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_norm(Requirement(r).name) for r in project["dependencies"]}
    extras = {k: {_norm(Requirement(r).name) for r in v}
              for k, v in project["optional-dependencies"].items()}
    return core, extras


def _imported_modules() -> dict[str, set[str]]:
    """Top-level modules imported by rewriter/ (also ``python -m X`` subprocesses) -> files."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "rewriter").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, (ast.List, ast.Tuple)):
                items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
                names = [m for flag, m in zip(items, items[1:]) if flag == "-m" and m]
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(path.name)
    return found


#: Modules whose distribution is not installed here (imported only on other Pythons).
_NOT_INSTALLED = {"tomli": "tomli"}
#: Extras declared ahead of the code that imports them, with the reason.
_PENDING_EXTRAS = {"qat": "issue 11's --qat (TFMOT quantization-aware training)"}


def test_every_import_is_declared_and_every_dependency_is_imported():
    core, extras = _declared()
    by_module = packages_distributions()
    used: dict[str, set[str]] = {}  # imported module -> the distributions providing it
    for module in _imported_modules():
        if module in sys.stdlib_module_names or module in ("rewriter", "__future__"):
            continue
        used[module] = ({_norm(d) for d in by_module.get(module, [])}
                        or {_NOT_INSTALLED[module]})
    declared = core | set().union(*extras.values())
    undeclared = sorted(m for m, dists in used.items() if not dists & declared)
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
    dists_used = set().union(*used.values())
    assert not core - dists_used, f"declared but never imported: {sorted(core - dists_used)}"
    for extra, names in extras.items():
        if extra in ("dev", *_PENDING_EXTRAS):
            continue
        assert names <= dists_used, f"[{extra}] declares {sorted(names - dists_used)}, unused"
    assert "tflite-micro" in extras["tflm"] and "tflite-micro" not in core
    assert "jinja2" not in core | set().union(*extras.values())


def test_tflite_micro_is_pinned_to_one_build():
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (req,) = [Requirement(r) for r in project["optional-dependencies"]["tflm"]]
    (spec,) = req.specifier
    assert spec.operator == "==", "a nightly range would pick a different build every day"


@pytest.mark.parametrize("dist", ["tensorflow", "tf-keras"])
def test_the_lowest_release_claimed_is_the_one_tested(dist):
    """The dependency's lowest version allowed by pyproject.toml is the minor release these tests
    run with: a claim of an older TensorFlow than the tests see fails here."""
    from importlib.metadata import version

    from packaging.requirements import Requirement
    from packaging.version import Version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (req,) = [Requirement(r) for r in project["dependencies"] if _norm(Requirement(r).name) == dist]
    lows = [Version(s.version) for s in req.specifier if s.operator in ("~=", ">=", "==")]
    assert lows, f"{req}: no lowest version claimed"
    lowest, tested = max(lows), Version(version(dist))
    assert (tested.major, tested.minor) == (lowest.major, lowest.minor), (
        f"pyproject.toml claims {req} but the tests run with {dist} {tested}")
