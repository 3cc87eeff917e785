"""The rule catalogue: every module of this package that defines ``RULES`` contributes its rules.

Adding a rule is adding a file (see :mod:`rewriter.rules.base` for how to write one). The
catalogue answers "which rules remove op X", ordered best first (exact rules, then the smallest
bound), which is what the planner and the ``check`` report's ``fix`` column use.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from rewriter.errors import UserError
from rewriter.rules.base import Bound, Match, Reject, Rule

__all__ = ["Bound", "Match", "Reject", "Rule", "all_rules", "get_rule", "rules_for_op",
           "rule_for_op"]

#: Modules of this package that hold infrastructure, not rules.
_NOT_RULES = frozenset({"base", "testing"})


@lru_cache(maxsize=1)
def _catalogue() -> tuple[Rule, ...]:
    found: dict[str, Rule] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name in _NOT_RULES or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for rule in getattr(module, "RULES", ()):
            if not rule.name or rule.name in found:
                raise ValueError(f"rule name {rule.name!r} in {info.name} is empty or taken")
            found[rule.name] = rule
    return tuple(sorted(found.values(), key=Rule.sort_key))


def all_rules() -> list[Rule]:
    """Every registered rule, best first (exact, then smallest bound, then name)."""
    return list(_catalogue())


def get_rule(name: str) -> Rule:
    """The rule called ``name``; :class:`UserError` listing the known names otherwise."""
    for rule in _catalogue():
        if rule.name == name:
            return rule
    known = ", ".join(r.name for r in _catalogue())
    raise UserError(f"unknown rule {name!r}; known rules: {known}")


def rules_for_op(op: str) -> list[Rule]:
    """Rules whose ``fixes`` include TF op type ``op``, best first."""
    return [r for r in _catalogue() if op in r.fixes]


def rule_for_op(op: str, exact_only: bool = False) -> str | None:
    """Name of the best rule that removes ``op`` (an exact one when there is one), or None."""
    for rule in rules_for_op(op):
        if rule.exact or not exact_only:
            return rule.name
    return None
