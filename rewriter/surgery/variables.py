"""Variables by name: their infos, a set read from one checkpoint or model, and name matching.

:class:`VariableSet` is what every reader in :mod:`rewriter.surgery.checkpoints` returns;
:func:`diff_variables` lines a source set up with a target set by name after ``--map`` rules
(:class:`NameMap`), checking shapes and dtypes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewriter.errors import UserError, first_line


# ----------------------------------------------------------------------------- data types
@dataclass(frozen=True)
class VarInfo:
    """One variable: its name, numpy dtype name and static shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    def describe(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


@dataclass(frozen=True)
class Pair:
    """A source variable matched to a target variable (same shape and dtype)."""

    source: str
    target: str
    dtype: str
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "dtype": self.dtype,
                "shape": list(self.shape)}


@dataclass(frozen=True)
class Mismatch:
    """A source and a target variable with the same name but another shape or dtype."""

    source: VarInfo
    target: VarInfo

    def reason(self) -> str:
        return (f"{self.target.name}: target {self.target.describe()} but source "
                f"{self.source.name} is {self.source.describe()}")

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source.to_json(), "target": self.target.to_json(),
                "reason": self.reason()}


#: Source-only variables that hold training state, not the model: optimizer slots of TF1 (a
#: variable's ``/Adam``, ``/Adam_1``, ``/Momentum``, ``/RMSProp_1``, ...), TF2 object checkpoints
#: (``.OPTIMIZER_SLOT/``, ``optimizer/...``), Keras 3 (``optimizer/vars/i``), and the step and
#: power counters (``global_step``, ``beta1_power``, ``save_counter``). A training checkpoint
#: always holds them; an inference model never needs them.
TRAINING_STATE = re.compile(
    r"(^|/)(Adam|AdamW|Adagrad|AdagradDA|Adadelta|Adamax|Nadam|Ftrl|Momentum|RMSProp|"
    r"ProximalAdagrad|GradientDescent)(_\d+)?$"
    r"|\.OPTIMIZER_SLOT/|^optimizer/|^(global_step|save_counter|beta[12]_power(_\d+)?)"
    r"(/|$)")


def is_training_state(name: str) -> bool:
    """True for an optimizer slot or training counter (see :data:`TRAINING_STATE`)."""
    return TRAINING_STATE.search(name) is not None


@dataclass
class Diff:
    """How a source's variables line up with a target's, by name."""

    restored: list[Pair] = field(default_factory=list)
    new: list[VarInfo] = field(default_factory=list)       # in the target only
    unused: list[VarInfo] = field(default_factory=list)    # in the source only
    mismatched: list[Mismatch] = field(default_factory=list)
    #: in the source only and training state (optimizer slots, counters): expected, not unused
    training_state: list[VarInfo] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when every target variable gets a value from the source."""
        return not self.new and not self.mismatched

    def to_json(self) -> dict[str, Any]:
        return {"restored": [p.to_json() for p in self.restored],
                "new": [v.to_json() for v in self.new],
                "unused": [v.to_json() for v in self.unused],
                "mismatched": [m.to_json() for m in self.mismatched],
                "training_state": [v.to_json() for v in self.training_state]}


@dataclass
class VariableSet:
    """The variables of one checkpoint or model: infos by name and a reader of values."""

    path: str
    format: str   # tf1-checkpoint | tf2-checkpoint | saved_model | keras | h5 | keras-weights
    infos: dict[str, VarInfo]
    reader: Callable[[str], np.ndarray] | None = None
    #: checkpoint keys holding each variable (bundle formats; several for shared variables)
    keys: dict[str, list[str]] = field(default_factory=dict)

    def read(self, name: str) -> np.ndarray:
        if self.reader is None:
            raise UserError(f"{self.path}: holds no variable values")
        try:
            return self.reader(name)
        except UserError:
            raise
        except Exception as exc:  # corrupt data files surface only here
            raise UserError(f"cannot read variable {name!r} from {self.path}: "
                            f"{first_line(exc)}") from None

    def list(self) -> list[VarInfo]:
        return sorted(self.infos.values(), key=lambda v: v.name)


# ----------------------------------------------------------------------------- name maps
@dataclass(frozen=True)
class MapRule:
    """One rename rule for source names: prefix ``old/=new/`` or regex ``re:PATTERN=REPL``."""

    old: str
    new: str
    regex: re.Pattern[str] | None = None

    def apply(self, name: str) -> str | None:
        if self.regex is not None:
            if not self.regex.search(name):
                return None
            return self.regex.sub(self.new, name)
        if name.startswith(self.old):
            return self.new + name[len(self.old):]
        return None


class NameMap:
    """Rename rules applied to source names; the first rule that matches a name renames it."""

    def __init__(self, rules: Iterable[MapRule] = ()) -> None:
        self.rules = list(rules)

    @classmethod
    def parse(cls, specs: Iterable[str] | None) -> NameMap:
        rules = []
        for spec in specs or []:
            is_regex = spec.startswith("re:")
            body = spec[3:] if is_regex else spec
            old, sep, new = body.partition("=")
            if not sep or not old:
                raise UserError(f"--map {spec!r} is not OLD=NEW (prefix) or re:PATTERN=REPL")
            pattern = None
            if is_regex:
                try:
                    pattern = re.compile(old)
                except re.error as exc:
                    raise UserError(f"--map {spec!r}: bad regular expression: {exc}") from None
                try:  # the replacement template is compiled even when nothing matches
                    pattern.sub(new, "")
                except (re.error, IndexError) as exc:
                    raise UserError(f"--map {spec!r}: bad replacement {new!r}: {exc} (the "
                                    f"pattern has {pattern.groups} group(s))") from None
            rules.append(MapRule(old, new, pattern))
        return cls(rules)

    def __call__(self, name: str) -> str:
        for rule in self.rules:
            renamed = rule.apply(name)
            if renamed is not None:
                return renamed
        return name


def diff_variables(source: Mapping[str, VarInfo], target: Mapping[str, VarInfo],
                   name_map: NameMap | None = None,
                   aliases: Mapping[str, str] | None = None) -> Diff:
    """Match source variables to target variables by (mapped) name, checking shape and dtype.

    ``aliases`` renames source names before the map (e.g. Keras ``.weights.h5`` slots to paths).
    Two source variables mapped onto one target name is a usage error.
    """
    name_map = name_map or NameMap()
    aliases = aliases or {}
    claimed: dict[str, str] = {}
    diff = Diff()
    for src_name in sorted(source):
        tgt_name = name_map(aliases.get(src_name, src_name))
        if not tgt_name:
            raise UserError(f"--map renames {src_name!r} to an empty name; fix the rule")
        if tgt_name in claimed:
            raise UserError(f"--map sends both {claimed[tgt_name]!r} and {src_name!r} "
                            f"to {tgt_name!r}")
        claimed[tgt_name] = src_name
        src = source[src_name]
        tgt = target.get(tgt_name)
        if tgt is None:
            (diff.training_state if is_training_state(src_name) else diff.unused).append(src)
        elif tgt.shape == src.shape and tgt.dtype == src.dtype:
            diff.restored.append(Pair(src_name, tgt_name, tgt.dtype, tgt.shape))
        else:
            diff.mismatched.append(Mismatch(src, tgt))
    diff.new = [target[n] for n in sorted(target) if n not in claimed]
    return diff
