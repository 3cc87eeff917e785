"""The op tables: ``op_tables/*.toml`` read, validated, and the shared lowering table.

A table names a target, its artifact kind, default quantisation and partitioning, and per op
the constraints it must meet (kinds from :mod:`rewriter.targets.constraints`). ``ops_from``
takes the op list from the TFLite schema or ``onnx.defs`` instead of listing every op.
``_tf_lowering.toml`` says which target ops the converter emits for each TF op.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from rewriter.defaults import QUANTIZE_MODES
from rewriter.errors import UserError
from rewriter.host.resources import op_tables_dir
from rewriter.targets.constraints import _INT, KINDS, Constraint

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TABLE_DIR = op_tables_dir()


_TOP_KEYS = {"name", "title", "sources", "version", "artifact", "default_quantize",
             "partitioning", "configs", "unsupported_note", "generic", "ops", "unsupported",
             "ops_from", "default_opset", "ops_label", "runtime",
             "grouped_conv", "int16"}
#: Keys of a table's ``[int16]`` section (16x8: int16 activations, int8 weights): the ops with
#: a 16x8 kernel (``ops``), or every op but ``except``, or ``refused`` (why the target runs no
#: 16x8 at all); ``doc`` and ``source`` say where it was read or how it was measured.
INT16_KEYS = {"ops", "except", "refused", "doc", "source", "note"}
_REQUIRED = ("name", "title", "sources", "version", "artifact", "default_quantize",
             "partitioning")
_ENUMS = {"artifact": ("tflite", "onnx"), "default_quantize": QUANTIZE_MODES,
          "partitioning": ("cut-at-first", "per-op"), "ops_from": ("tflite-schema", "onnx-defs"),
          "runtime": ("litert", "tflm")}


#: Keys of an op entry that are not constraints: a note, the documented limitation word for
#: word (``doc``) and where it is documented (``source``, a URL).
ENTRY_TEXT_KEYS = ("note", "doc", "source")


@dataclass
class OpEntry:
    """One op of a table: its constraints, a note, and the documented limitation it encodes."""

    constraints: list[Constraint]
    note: str | None = None
    doc: str | None = None
    source: str | None = None


def parse_constraints(where: str, entry: dict[str, Any],
                       extra: Iterable[str] = ENTRY_TEXT_KEYS) -> list[Constraint]:
    out = []
    for key, value in entry.items():
        if key in extra:
            continue
        kind = KINDS.get(key)
        if kind is None:
            raise UserError(f"{where}: unknown constraint kind {key!r} "
                            f"(known: {', '.join(sorted(KINDS))})")
        if not isinstance(value, kind.value_type) or (kind.value_type is _INT
                                                      and isinstance(value, bool)):
            raise UserError(f"{where}: {key} must be {kind.value_type[0].__name__}, "
                            f"got {value!r}")
        out.append(Constraint(key, value))
    return out


def validate_table(path: Path, data: dict[str, Any]) -> None:
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise UserError(f"{path.name}: unknown keys {sorted(unknown)} (allowed: {sorted(_TOP_KEYS)})")
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise UserError(f"{path.name}: missing keys {missing}")
    for key, allowed in _ENUMS.items():
        if key in data and data[key] not in allowed:
            raise UserError(f"{path.name}: {key} = {data[key]!r} is not one of {list(allowed)}")
    for section in ("ops", "unsupported"):
        for op, entry in data.get(section, {}).items():
            if not isinstance(entry, dict):
                raise UserError(f"{path.name}: [{section}.{op}] must be a table")
    int16 = data.get("int16")
    if int16 is not None and (not isinstance(int16, dict) or set(int16) - INT16_KEYS
                              or len({"ops", "except", "refused"} & set(int16)) != 1):
        raise UserError(f"{path.name}: [int16] takes exactly one of ops, except, refused (and "
                        f"doc, source, note), got {sorted(int16) if isinstance(int16, dict) else int16!r}")
    for op, entry in data.get("unsupported", {}).items():
        bad = set(entry) - set(ENTRY_TEXT_KEYS)
        if bad:
            raise UserError(f"{path.name}: [unsupported.{op}] allows only "
                            f"{', '.join(ENTRY_TEXT_KEYS)}, got {sorted(bad)}")


@cache
def read_table(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path.name}: invalid TOML: {exc}") from None
    validate_table(path, data)
    return data


def table_paths() -> list[Path]:
    return sorted(p for p in TABLE_DIR.glob("*.toml") if not p.name.startswith("_"))


@lru_cache(maxsize=1)
def lowering() -> dict[str, Any]:
    """The TF-op -> target-op lowering table (``op_tables/_tf_lowering.toml``)."""
    with open(TABLE_DIR / "_tf_lowering.toml", "rb") as fh:
        return tomllib.load(fh)


# ----------------------------------------------------------------------------- ops_from
@lru_cache(maxsize=1)
def tflite_builtins() -> frozenset[str]:
    """Every builtin operator name of the TFLite flatbuffer schema."""
    from ai_edge_litert import schema_py_generated as schema

    names = {k for k in vars(schema.BuiltinOperator) if not k.startswith("_")}
    return frozenset(names - {"CUSTOM", "DELEGATE", "PLACEHOLDER_FOR_GREATER_OP_CODES"})


@cache
def onnx_ops(opset: int) -> dict[str, int]:
    """Standard-domain ONNX ops that exist at ``opset``, with the version in force."""
    import onnx.defs

    out: dict[str, int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain not in ("", "ai.onnx") or schema.since_version > opset:
            continue
        if schema.since_version >= out.get(schema.name, 0):
            out[schema.name] = schema.since_version
    return {k: v for k, v in out.items() if not _deprecated(k, v)}


def _deprecated(name: str, version: int) -> bool:
    import onnx.defs

    return bool(onnx.defs.get_schema(name, version, "").deprecated)


def onnx_since(op: str) -> int | None:
    """The first opset in which ONNX op ``op`` exists, or None when it is no ONNX op."""
    import onnx.defs

    versions = [s.since_version for s in onnx.defs.get_all_schemas_with_history()
                if s.name == op and s.domain in ("", "ai.onnx")]
    return min(versions) if versions else None
