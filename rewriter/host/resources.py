"""Where the data the tool reads lives: the op tables, and the source checkout when there is one.

``op_tables/`` sits at the top of the repository (one data file per target) and is shipped in the
wheel as the package ``rewriter.op_tables`` (``setup.py`` maps it). Installed code finds it with
:mod:`importlib.resources`; a source checkout (an editable install, or ``PYTHONPATH`` pointing at
a work tree) reads the ``op_tables/`` beside its own ``rewriter/``, so the tables read are always
those of the code that runs, never another checkout's.
"""

from __future__ import annotations

import importlib.resources
from functools import cache
from pathlib import Path

from rewriter.errors import UserError

#: A file every op table directory holds (the TF -> target op lowering).
_MARKER = "_tf_lowering.toml"


def source_checkout() -> Path | None:
    """The repository root when this code runs from a source checkout, else None (installed)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "op_tables" / _MARKER).is_file() else None


@cache
def op_tables_dir() -> Path:
    """The directory of the op tables (``*.toml``) for the code that is running."""
    root = source_checkout()
    if root is not None:
        return root / "op_tables"
    try:
        found = importlib.resources.files("rewriter.op_tables")
    except ModuleNotFoundError:
        found = None
    path = Path(str(found)) if found is not None else None
    if path is None or not (path / _MARKER).is_file():
        raise UserError("the op tables are missing from this installation of rewriter "
                        "(rewriter/op_tables/*.toml); reinstall the package")
    return path
