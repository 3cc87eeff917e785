"""Key paths of a JSON report, for proving a restructure keeps every key.

``key_paths(obj)`` lists every key as a dotted path (``equivalence.artifact.outputs.*.cosine``);
list items add ``[]`` (``rules_applied[].rule``) and dicts keyed by data (output names, op
names, Vela's CSV columns) add ``*``, so the set depends on the report's structure, not on the
model's names.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

#: Dicts whose keys are data, not structure: output names, op names, CSV columns.
DATA_KEYED = tuple(re.compile(p) for p in (
    r"^equivalence\.[^.]+\.outputs$", r"^export\.ops$", r"^plots\.histograms\.[^.]+$",
    r"^vela\.summary$", r"^vela\.cpu_by_op$"))

EXPECTED_FILE = Path(__file__).resolve().parent / "data" / "report_keys.json"


def key_paths(obj: Any, prefix: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(obj, dict):
        wild = any(p.match(prefix) for p in DATA_KEYED)
        for key, value in obj.items():
            name = "*" if wild else key
            path = f"{prefix}.{name}" if prefix else name
            out.add(path)
            out |= key_paths(value, path)
    elif isinstance(obj, list):
        for value in obj:
            out |= key_paths(value, prefix + "[]")
    return out


def expected(case: str) -> set[str]:
    """The key paths captured for ``case`` before the issue-15 restructure."""
    return set(json.loads(EXPECTED_FILE.read_text())[case])


def missing(case: str, report: dict[str, Any]) -> list[str]:
    """Captured key paths that ``report`` no longer has (additions are allowed)."""
    return sorted(expected(case) - key_paths(report))
