"""The registry of targets: every table file by name (and Ethos-U configs), loaded on demand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rewriter.errors import UserError
from rewriter.targets.tables import read_table, table_paths, validate_table
from rewriter.targets.target import Target


def _index() -> dict[str, Path]:
    names: dict[str, Path] = {}
    for path in table_paths():
        data = read_table(path)
        for n in data.get("configs") or [data["name"]]:
            names[n] = path
    return names


def target_names() -> list[str]:
    return list(_index())


def load_target(name: str, opset: int | None = None) -> Target:
    """The target called ``name`` (a table name or an Ethos-U accelerator config)."""
    names = _index()
    if name not in names:
        raise UserError(f"unknown target {name!r}; known: {', '.join(names)} "
                        "(see `rewrite targets`)")
    return Target(read_table(names[name]), name, opset)


def target_from_table(data: dict[str, Any], name: str | None = None,
                      opset: int | None = None) -> Target:
    """A Target from table data given in memory (validated like a table file)."""
    validate_table(Path(f"{data.get('name', '<table>')}.toml"), data)
    return Target(data, name or (data.get("configs") or [data["name"]])[0], opset)


def list_targets() -> list[Target]:
    return [load_target(n) for n in target_names()]


def table_targets() -> list[Target]:
    """One Target per table file (the first config of a multi-config table)."""
    out = []
    for path in table_paths():
        data = read_table(path)
        out.append(Target(data, (data.get("configs") or [data["name"]])[0]))
    return out
