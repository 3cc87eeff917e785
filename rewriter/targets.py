"""Targets: the op tables in ``op_tables/*.toml`` and the verdicts they give, with reasons.

A table lists the ops a target runs (TFLite builtin names, or ONNX op types) and, per op, the
constraints it must meet. Each constraint *kind* is a named predicate defined once below
(:data:`KINDS`): its rule text is a template formatted from the table's data, and the predicate
returns the observed value when the constraint is violated, so every verdict reads like Vela's
("Stride must be in [1, 3]: observed 4x1"). The same tables judge two levels: the TF graph
(:meth:`Target.check_graph`, predicting what the converter will emit) and the exported file
(:meth:`Target.check_artifact`, which decides). The human docs are generated from the tables
(:func:`render_markdown`), so they cannot drift.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rewriter.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

if TYPE_CHECKING:  # pragma: no cover
    from rewriter.model import Model

TABLE_DIR = Path(__file__).resolve().parent.parent / "op_tables"
QUANTIZE_MODES = ("int8", "float16", "none")
FLEX = "flex"
EDGE_REASON = "converts float I/O at the graph edge; runs on the CPU"

Shape = tuple  # a tensor shape; ``None`` entries are unknown (dynamic) dimensions


# ----------------------------------------------------------------------------- facts
@dataclass
class OpFacts:
    """What is known about one target op: from a TF node (predicted) or from the artifact.

    Shapes are NHWC for TFLite ops; ``strides``, ``kernel`` and ``dilation`` are (h, w).
    ``None`` means unknown, and a constraint that needs an unknown fact is not judged.
    """

    node: str
    op: str
    source_op: str | None = None
    dtype: str | None = None
    out_dtype: str | None = None
    input_shape: Shape | None = None
    output_shape: Shape | None = None
    strides: tuple[int, int] | None = None
    kernel: tuple[int, int] | None = None
    dilation: tuple[int, int] | None = None
    padding: str | None = None
    fused_activation: str | None = None
    axes: tuple[int, ...] | None = None
    slice_strides: tuple[int, ...] | None = None
    version: int | None = None
    custom: bool = False
    boundary: bool = False  # QUANTIZE of a graph input / DEQUANTIZE of a graph output
    note: str | None = None
    related_op: str | None = None  # the float op a mid-graph (DE)QUANTIZE exists for


def _wxh(pair: tuple[int, int]) -> str:
    return f"{pair[1]}x{pair[0]}"


def _shape_str(shape: Shape | None) -> str:
    return "[" + ", ".join("?" if d is None or d < 0 else str(d) for d in shape or ()) + "]"


def _known(shape: Shape | None) -> bool:
    return shape is not None and all(d is not None and d >= 0 for d in shape)


# ----------------------------------------------------------------------------- constraint kinds
@dataclass(frozen=True)
class Kind:
    """A constraint kind: its rule text (a template over the table's value) and its predicate.

    ``check(facts, value)`` returns the observed value as text when the op violates the
    constraint, or ``None`` when it passes or the facts it needs are unknown.
    """

    name: str
    template: str
    check: Callable[[OpFacts, Any], str | None]
    value_type: type | tuple[type, ...]

    def rule(self, value: Any) -> str:
        return self.template.format(**_template_args(value))


def _template_args(value: Any) -> dict[str, Any]:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return {"lo": value[0], "hi": value[1], "value": value}
    if isinstance(value, list):
        return {"allowed": ", ".join(str(v) for v in value), "value": value}
    return {"max": value, "value": value}


def _check_dtypes(f: OpFacts, allowed: list[str]) -> str | None:
    for dtype in (f.dtype, f.out_dtype):
        if dtype is not None and dtype not in allowed:
            return dtype
    return None


def _check_rank_max(f: OpFacts, limit: int) -> str | None:
    for shape in (f.input_shape, f.output_shape):
        if shape is not None and len(shape) > limit:
            return f"rank {len(shape)} {_shape_str(shape)}"
    return None


def _check_static(f: OpFacts, _: bool) -> str | None:
    for shape in (f.input_shape, f.output_shape):
        if shape is not None and not _known(shape):
            return _shape_str(shape)
    return None


def _check_batch_one(f: OpFacts, _: bool) -> str | None:
    shape = f.input_shape
    if shape is not None and len(shape) >= 2 and shape[0] is not None and shape[0] > 1:
        return f"batch {shape[0]}"
    return None


def _check_inner_dims(f: OpFacts, limit: int) -> str | None:
    for shape in (f.input_shape, f.output_shape):
        if shape is not None and len(shape) > limit and _known(shape):
            if any(d > 1 for d in shape[:-limit]):
                return _shape_str(shape)
    return None


def _check_elements_max(f: OpFacts, limit: int) -> str | None:
    if not _known(f.input_shape):
        return None
    n = 1
    for d in f.input_shape:
        n *= d
    return f"{n} elements" if n > limit else None


def _check_hw_product_max(f: OpFacts, limit: int) -> str | None:
    s = f.input_shape
    if not _known(s) or len(s) < 3:
        return None
    h, w = s[-3], s[-2]
    return f"{w}x{h} = {w * h}" if w * h > limit else None


def _check_stride_range(f: OpFacts, bounds: list[int]) -> str | None:
    if f.strides is None:
        return None
    lo, hi = bounds
    return _wxh(f.strides) if any(not lo <= s <= hi for s in f.strides) else None


def _check_same_kernel_max(f: OpFacts, limit: int) -> str | None:
    if f.kernel is None or f.padding != "SAME":
        return None
    return f"{_wxh(f.kernel)} with SAME padding" if max(f.kernel) > limit else None


def _check_kernel_height_max(f: OpFacts, limit: int) -> str | None:
    return _wxh(f.kernel) if f.kernel is not None and f.kernel[0] > limit else None


def _check_dilation_equal(f: OpFacts, _: bool) -> str | None:
    d = f.dilation
    return _wxh(d) if d is not None and d[0] != d[1] else None


def _check_fused_activation(f: OpFacts, allowed: list[str]) -> str | None:
    a = f.fused_activation
    return a if a is not None and a not in allowed else None


def _norm_axes(f: OpFacts) -> tuple[int, ...] | None:
    if f.axes is None or f.input_shape is None:
        return None
    rank = len(f.input_shape)
    return tuple(sorted(a % rank for a in f.axes)) if rank else None


def _check_no_batch_axis(f: OpFacts, _: bool) -> str | None:
    axes = _norm_axes(f)
    return f"axis {list(axes)} of {_shape_str(f.input_shape)}" if axes and 0 in axes else None


def _check_mean_depth(f: OpFacts, _: bool) -> str | None:
    axes = _norm_axes(f)
    s = f.input_shape
    if axes is None or not _known(s) or len(s) != 4 or 3 not in axes:
        return None
    if 1 in (s[1], s[2], s[3]):
        return None
    return f"reduces axis 3 of {_shape_str(s)}"


def _check_reduced_axis_max(f: OpFacts, limit: int) -> str | None:
    axes = _norm_axes(f)
    if axes is None or not _known(f.input_shape):
        return None
    for a in axes:
        if f.input_shape[a] > limit:
            return f"axis {a} has {f.input_shape[a]} elements"
    return None


def _check_slice_strides_one(f: OpFacts, _: bool) -> str | None:
    st = f.slice_strides
    return str(list(st)) if st is not None and any(s != 1 for s in st) else None


def _check_version_max(f: OpFacts, limit: int) -> str | None:
    return f"version {f.version}" if f.version is not None and f.version > limit else None


_BOOL, _INT, _LIST = (bool,), (int,), (list,)

#: Every constraint kind a table may use: name -> rule text template and predicate.
KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("dtypes", "Tensors must be {allowed}", _check_dtypes, _LIST),
    Kind("rank_max", "Tensor rank must be at most {max}", _check_rank_max, _INT),
    Kind("static_shape", "Tensor shapes must be static", _check_static, _BOOL),
    Kind("batch_one", "Batch must be 1", _check_batch_one, _BOOL),
    Kind("inner_dims", "Only the {max} innermost dimension(s) may be larger than 1",
         _check_inner_dims, _INT),
    Kind("elements_max", "Input must have at most {max} elements", _check_elements_max, _INT),
    Kind("hw_product_max", "The product of IFM width and height must be at most {max}",
         _check_hw_product_max, _INT),
    Kind("stride_range", "Stride must be in [{lo}, {hi}]", _check_stride_range, _LIST),
    Kind("same_kernel_max", "With SAME padding, kernel width and height must be at most {max}",
         _check_same_kernel_max, _INT),
    Kind("kernel_height_max", "Kernel height must be at most {max}", _check_kernel_height_max,
         _INT),
    Kind("dilation_equal", "Dilation must be the same in x and y", _check_dilation_equal, _BOOL),
    Kind("fused_activation", "Fused activation must be one of {allowed}",
         _check_fused_activation, _LIST),
    Kind("no_batch_axis", "Must not reduce or split along the batch axis", _check_no_batch_axis,
         _BOOL),
    Kind("mean_depth_reduction", "Reduction over depth is only supported if any of h, w, c is 1",
         _check_mean_depth, _BOOL),
    Kind("reduced_axis_max", "Reduced axis must have at most {max} elements",
         _check_reduced_axis_max, _INT),
    Kind("slice_strides_one", "Slice strides must all be 1", _check_slice_strides_one, _BOOL),
    Kind("version_max", "Op version must be at most {max}", _check_version_max, _INT),
)}


@dataclass(frozen=True)
class Constraint:
    kind: str
    value: Any

    @property
    def rule(self) -> str:
        return KINDS[self.kind].rule(self.value)

    def violation(self, facts: OpFacts) -> tuple[str, str] | None:
        """(reason, observed) when ``facts`` violate this constraint, else None."""
        observed = KINDS[self.kind].check(facts, self.value)
        if observed is None:
            return None
        return f"{self.rule}: observed {observed}", observed


# ----------------------------------------------------------------------------- verdicts
@dataclass
class OpVerdict:
    """The verdict on one node (TF graph level) or one operator (artifact level)."""

    node: str
    op: str
    target_op: str | None
    supported: bool
    reason: str | None = None
    observed: str | None = None
    placement: str = "accelerator"  # accelerator | cpu | none (folded away)
    related_op: str | None = None  # the float op a mid-graph (DE)QUANTIZE exists for

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class OpStatus:
    """Op-type level answer (no attributes): does the target run TF op ``op``?"""

    op: str
    supported: bool
    target_ops: list[str]
    reason: str | None = None


@dataclass
class GraphCheck:
    """All verdicts of one level for one target, with the Edge TPU cut when it applies."""

    target: str
    level: str  # "graph" | "artifact"
    verdicts: list[OpVerdict]
    ok: bool
    cut: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def counted(self) -> list[OpVerdict]:
        """Verdicts on real ops (folded-away nodes excluded)."""
        return [v for v in self.verdicts if v.placement != "none"]

    def on_accelerator(self) -> tuple[int, int]:
        ops = self.counted()
        return sum(v.placement == "accelerator" for v in ops), len(ops)

    def unsupported_summary(self) -> list[dict[str, Any]]:
        """``[{"op", "count", "reason", "fix"}]`` grouped by op and reason; ``fix`` left None."""
        groups: dict[tuple[str, str], dict[str, Any]] = {}
        for v in self.verdicts:
            if v.supported:
                continue
            key = (v.op, v.reason or "")
            g = groups.setdefault(key, {"op": v.op, "target_op": v.target_op, "count": 0,
                                        "reason": v.reason, "fix": None, "nodes": [],
                                        "related_op": v.related_op})
            g["count"] += 1
            if len(g["nodes"]) < 20:
                g["nodes"].append(v.node)
        return sorted(groups.values(), key=lambda g: (-g["count"], g["op"]))

    def table(self) -> list[dict[str, Any]]:
        """Edge-TPU-compiler-style rows: one per (op, status, reason) with a count."""
        rows: dict[tuple[str, str, str], dict[str, Any]] = {}
        for v in self.counted():
            status = _status_text(v)
            key = (v.target_op or v.op, status, v.reason or "")
            row = rows.setdefault(key, {"op": key[0], "count": 0, "status": status,
                                        "reason": v.reason, "source_ops": set()})
            row["count"] += 1
            row["source_ops"].add(v.op)
        out = sorted(rows.values(), key=lambda r: (r["status"] != "Mapped", r["op"]))
        for r in out:
            r["source_ops"] = sorted(r["source_ops"])
        return out

    def to_json(self) -> dict[str, Any]:
        mapped, total = self.on_accelerator()
        return {"target": self.target, "level": self.level, "ok": self.ok, "cut": self.cut,
                "ops_total": total, "ops_on_accelerator": mapped,
                "percent_on_accelerator": round(100.0 * mapped / total, 1) if total else 100.0,
                "unsupported": self.unsupported_summary(), "notes": list(self.notes),
                "verdicts": [v.to_json() for v in self.verdicts]}


def _status_text(v: OpVerdict) -> str:
    if v.supported and v.placement == "accelerator":
        return "Mapped"
    if v.supported:
        return "CPU (graph edge)" if v.reason == EDGE_REASON else "CPU (after the cut)"
    return "Not supported"


# ----------------------------------------------------------------------------- tables
_TOP_KEYS = {"name", "title", "sources", "version", "artifact", "default_quantize",
             "partitioning", "configs", "unsupported_note", "generic", "ops", "unsupported",
             "ops_from", "default_opset"}
_REQUIRED = ("name", "title", "sources", "version", "artifact", "default_quantize",
             "partitioning")
_ENUMS = {"artifact": ("tflite", "onnx"), "default_quantize": QUANTIZE_MODES,
          "partitioning": ("cut-at-first", "per-op"), "ops_from": ("tflite-schema", "onnx-defs")}


@dataclass
class OpEntry:
    """One op of a table: its constraints and a note for the docs."""

    constraints: list[Constraint]
    note: str | None = None


def _parse_constraints(where: str, entry: dict[str, Any],
                       extra: Iterable[str] = ("note",)) -> list[Constraint]:
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


def _validate(path: Path, data: dict[str, Any]) -> None:
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
    for op, entry in data.get("unsupported", {}).items():
        bad = set(entry) - {"note"}
        if bad:
            raise UserError(f"{path.name}: [unsupported.{op}] allows only 'note', got {sorted(bad)}")


@cache
def _read_table(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path.name}: invalid TOML: {exc}") from None
    _validate(path, data)
    return data


def _table_paths() -> list[Path]:
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


# ----------------------------------------------------------------------------- Target
class Target:
    """One deployment target: its op table plus how it partitions and what it needs."""

    def __init__(self, data: dict[str, Any], name: str, opset: int | None = None) -> None:
        self.data = data
        self.name = name
        self.table_name: str = data["name"]
        self.title: str = data["title"]
        self.sources: list[str] = list(data["sources"])
        self.source: str = self.sources[0]
        self.version: str = data["version"]
        self.artifact: str = data["artifact"]
        self.default_quantize: str = data["default_quantize"]
        self.partitioning: str = data["partitioning"]
        self.configs: list[str] = list(data.get("configs", []))
        self.vela_config: str | None = name if self.configs else None
        self.unsupported_note: str | None = data.get("unsupported_note")
        self.ops_from: str | None = data.get("ops_from")
        self.opset: int | None = None
        if self.artifact == "onnx":
            self.opset = int(opset or data.get("default_opset", 17))
        elif opset is not None:
            raise UserError(f"--opset applies to ONNX targets; {name} exports TFLite")
        where = f"{data['name']}.toml"
        generic = dict(data.get("generic", {}))
        self.generic_except: set[str] = set(generic.pop("except", []))
        self.generic: list[Constraint] = _parse_constraints(f"{where} [generic]", generic)
        self.ops: dict[str, OpEntry] = {}
        for op, entry in data.get("ops", {}).items():
            cons = _parse_constraints(f"{where} [ops.{op}]", entry)
            self.ops[op] = OpEntry(cons, entry.get("note"))
        self.unsupported: dict[str, str | None] = {
            op: e.get("note") for op, e in data.get("unsupported", {}).items()}
        self._onnx_ops = onnx_ops(self.opset) if self.ops_from == "onnx-defs" else {}

    def __repr__(self) -> str:
        return f"Target({self.name!r})"

    # ------------------------------------------------------------------ op level
    def has_op(self, op: str) -> bool:
        """Whether ``op`` (target op name) is in the table at all."""
        if op in self.unsupported:
            return False
        if op in self.ops:
            return True
        if self.ops_from == "tflite-schema":
            return op in tflite_builtins()
        if self.ops_from == "onnx-defs":
            return op in self._onnx_ops
        return False

    def constraints_for(self, op: str) -> list[Constraint]:
        generic = [] if op in self.generic_except else self.generic
        entry = self.ops.get(op)
        specific = entry.constraints if entry else []
        kinds = {c.kind for c in specific}
        return [c for c in generic if c.kind not in kinds] + list(specific)

    def missing_reason(self, op: str, source_op: str | None = None,
                       custom: bool = False) -> str:
        """Why ``op`` is not available at all (not a constraint: the op itself)."""
        if op == FLEX or (custom and op.startswith("Flex") and source_op is None):
            tf_op = source_op or op[len("Flex"):]
            reason = (f"TF op {tf_op} is not a TFLite builtin: conversion needs Flex ops "
                      "(SELECT_TF_OPS)")
        elif custom and source_op is not None:
            reason = (f"TF op {source_op} has no known {self.artifact} lowering (conversion "
                      "would need Flex ops)")
        elif custom:
            reason = f"custom op {op} is not a builtin of {self.title}"
        elif self.ops_from == "onnx-defs" and op not in self.unsupported:
            since = onnx_since(op)
            reason = (f"{op} is not an ONNX op (no schema in onnx.defs)" if since is None else
                      f"ONNX op {op} needs opset {since}: target opset is {self.opset}")
        else:
            reason = f"{op} is not supported by {self.title}"
            note = self.unsupported.get(op)
            if note:
                reason += f" ({note})"
        if self.unsupported_note and self.partitioning != "cut-at-first":
            reason += f"; {self.unsupported_note}"
        return reason

    def judge(self, facts: OpFacts) -> OpVerdict:
        """The verdict on one op from its facts: missing op first, then each constraint."""
        source = facts.source_op or facts.op
        if facts.boundary:
            return OpVerdict(facts.node, source, facts.op, True, EDGE_REASON, None, "cpu")
        if facts.op == FLEX or facts.custom or not self.has_op(facts.op):
            target_op = None if facts.op == FLEX else facts.op
            reason = self.missing_reason(facts.op, facts.source_op, facts.custom)
            if facts.related_op:
                reason += f" ({facts.note})"
            return OpVerdict(facts.node, source, target_op, False, reason, None, "cpu",
                             facts.related_op)
        for c in self.constraints_for(facts.op):
            hit = c.violation(facts)
            if hit is not None:
                reason, observed = hit
                if facts.note and c.kind == "dtypes":
                    reason += f" ({facts.note})"
                return OpVerdict(facts.node, source, facts.op, False, f"{facts.op}: {reason}",
                                 observed, "cpu", facts.related_op)
        return OpVerdict(facts.node, source, facts.op, True)

    def lower(self, tf_op: str) -> list[str] | None:
        """Target ops the converter emits for ``tf_op`` (None when unknown)."""
        section = "onnx" if self.artifact == "onnx" else "tflite"
        ops = lowering()[section].get(tf_op)
        return list(ops) if ops is not None else None

    def tf_op_status(self, op: str, quantize: str | None = None) -> OpStatus:
        """Op-type level: can this target run TF op ``op`` (attributes not considered)?"""
        quantize = self.resolve_quantize(quantize)
        target_ops = self.lower(op)
        if target_ops is None:
            return OpStatus(op, False, [], f"TF op {op} has no known {self.artifact} lowering")
        for t in target_ops:
            facts = OpFacts(op, t, source_op=op, dtype=_tf_level_dtype(t, "float32", quantize,
                                                                           self.artifact))
            facts.note = _float_note(t, quantize, self.artifact)
            v = self.judge(facts)
            if not v.supported:
                return OpStatus(op, False, target_ops, v.reason)
        return OpStatus(op, True, target_ops)

    def target_op_status(self, op: str, quantize: str | None = None) -> OpStatus:
        """Op level for a target op (``L2_NORMALIZATION``, ``Concat``): in the table, and its
        dtype constraint met after conversion with ``quantize`` (no shapes considered)."""
        quantize = self.resolve_quantize(quantize)
        facts = OpFacts(op, op, dtype=_tf_level_dtype(op, "float32", quantize, self.artifact))
        facts.note = _float_note(op, quantize, self.artifact)
        v = self.judge(facts)
        return OpStatus(op, v.supported, [op], v.reason)

    def resolve_quantize(self, quantize: str | None) -> str:
        q = quantize or self.default_quantize
        if q not in QUANTIZE_MODES:
            raise UserError(f"--quantize {q!r} is not one of {', '.join(QUANTIZE_MODES)}")
        if self.artifact == "onnx" and q != "none":
            raise UserError(f"{self.name} exports ONNX; --quantize {q} applies to TFLite targets")
        return q

    # ------------------------------------------------------------------ levels
    def check_graph(self, model: Model, quantize: str | None = None) -> GraphCheck:
        """Level 1: predict the converter's ops from the TF graph and judge them."""
        q = self.resolve_quantize(quantize)
        facts = graph_facts(model, self, q)
        return self._finish("graph", facts)

    def check_artifact(self, path: str) -> GraphCheck:
        """Level 2: judge the ops, dtypes and shapes inside the exported ``.tflite``/``.onnx``."""
        from rewriter import artifact

        art = artifact.read_artifact(path)
        if art.kind != self.artifact:
            raise UserError(f"{self.name} deploys .{self.artifact} files; {path} is .{art.kind}")
        check = self._finish("artifact", art.ops)
        if art.kind == "onnx" and self.opset is not None and art.opset and art.opset > self.opset:
            check.notes.append(f"the file declares opset {art.opset}; the target was checked "
                               f"at opset {self.opset}")
        return check

    def check_facts(self, level: str, facts: list[OpFacts]) -> GraphCheck:
        return self._finish(level, facts)

    def _finish(self, level: str, facts: list[OpFacts]) -> GraphCheck:
        verdicts = []
        for f in facts:
            if f.op == "":
                verdicts.append(OpVerdict(f.node, f.source_op or "", None, True, f.note, None,
                                          "none"))
            else:
                verdicts.append(self.judge(f))
        cut = self._apply_cut(verdicts) if self.partitioning == "cut-at-first" else None
        ok = all(v.supported for v in verdicts)
        return GraphCheck(self.name, level, verdicts, ok, cut)

    def _apply_cut(self, verdicts: list[OpVerdict]) -> dict[str, Any] | None:
        """Edge TPU: the first unsupported op and everything after it run on the CPU."""
        real = [v for v in verdicts if v.placement != "none"]
        first = next((i for i, v in enumerate(real) if not v.supported), None)
        if first is None:
            return None
        for v in real[first:]:
            v.placement = "cpu"
        cut_op = real[first]
        return {"op": cut_op.target_op or cut_op.op, "node": cut_op.node,
                "reason": cut_op.reason, "note": self.unsupported_note,
                "mapped_before": sum(v.placement == "accelerator" for v in real[:first]),
                "cpu_after": len(real) - first}


# ----------------------------------------------------------------------------- helpers
def _float_ops_in_int8() -> set[str]:
    return set(lowering()["tflite_int8"]["float_ops"])


def _tf_level_dtype(target_op: str, tf_dtype: str | None, quantize: str, artifact: str) -> str:
    """The dtype a target op will compute in after conversion with ``quantize``."""
    tf_dtype = tf_dtype or "float32"
    if artifact == "onnx" or quantize != "int8" or tf_dtype != "float32":
        return tf_dtype
    return "float32" if target_op in _float_ops_in_int8() else "int8"


def _float_note(target_op: str, quantize: str, artifact: str) -> str | None:
    if artifact == "tflite" and quantize == "int8" and target_op in _float_ops_in_int8():
        return ("the TFLite converter keeps it in float32 in full-int8 conversion, "
                "DEQUANTIZE -> op -> QUANTIZE")
    return None


# ----------------------------------------------------------------------------- registry
def _index() -> dict[str, Path]:
    names: dict[str, Path] = {}
    for path in _table_paths():
        data = _read_table(path)
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
    return Target(_read_table(names[name]), name, opset)


def target_from_table(data: dict[str, Any], name: str | None = None,
                      opset: int | None = None) -> Target:
    """A Target from table data given in memory (validated like a table file)."""
    _validate(Path(f"{data.get('name', '<table>')}.toml"), data)
    return Target(data, name or (data.get("configs") or [data["name"]])[0], opset)


def list_targets() -> list[Target]:
    return [load_target(n) for n in target_names()]


def table_targets() -> list[Target]:
    """One Target per table file (the first config of a multi-config table)."""
    out = []
    for path in _table_paths():
        data = _read_table(path)
        out.append(Target(data, (data.get("configs") or [data["name"]])[0]))
    return out


# ----------------------------------------------------------------------------- docs
def render_markdown(target: Target) -> str:
    """The human page of one table (docs/targets/<table>.md), generated from the table."""
    d = target.data
    lines = [f"# {target.title}", "",
             "<!-- generated by `rewrite docs` from op_tables/"
             f"{target.table_name}.toml; do not edit -->", "",
             f"* Version: {target.version}",
             f"* Artifact: `.{target.artifact}`; default quantization: `{target.default_quantize}`",
             f"* Partitioning: `{target.partitioning}`" + (
                 " (the first unsupported op and every op after it run on the CPU)"
                 if target.partitioning == "cut-at-first" else "")]
    if target.configs:
        lines.append("* Targets (Vela `--accelerator-config`): "
                     + ", ".join(f"`{c}`" for c in target.configs))
    else:
        lines.append(f"* Target: `{target.name}`")
    lines.append("* Sources: " + ", ".join(f"<{s}>" for s in target.sources))
    lines.append("")
    if target.ops_from == "tflite-schema":
        lines += ["Every builtin operator of the TFLite flatbuffer schema "
                  f"({len(tflite_builtins())} ops); Flex and custom ops are not.", ""]
    if target.ops_from == "onnx-defs":
        lines += ["Ops: the standard ONNX domain at the chosen opset (`--opset`, default "
                  f"{d.get('default_opset', 17)}), read from `onnx.defs`.", ""]
    if target.generic:
        lines += ["## Constraints on every op", ""]
        lines += [f"* {c.rule}" for c in target.generic]
        if target.generic_except:
            lines.append(f"* (not applied to: {', '.join(sorted(target.generic_except))})")
        lines.append("")
    if target.ops:
        lines += ["## Supported ops", "", "| Op | Constraints | Note |", "| --- | --- | --- |"]
        for op in sorted(target.ops):
            e = target.ops[op]
            rules = "; ".join(c.rule for c in e.constraints) or "-"
            lines.append(f"| {op} | {rules} | {e.note or ''} |")
        lines.append("")
    if target.unsupported:
        lines += ["## Known unsupported ops", "", "| Op | Note |", "| --- | --- |"]
        lines += [f"| {op} | {note or ''} |" for op, note in sorted(target.unsupported.items())]
        lines.append("")
    return "\n".join(lines)


def docs_files() -> dict[str, str]:
    """File name -> generated markdown for every table (what ``rewrite docs`` writes)."""
    out = {t.table_name + ".md": render_markdown(t) for t in table_targets()}
    out["README.md"] = _render_index()
    return out


def _render_index() -> str:
    lines = ["# Targets", "", "<!-- generated by `rewrite docs`; do not edit -->", "",
             "One page per op table. `rewrite check MODEL --target T` judges a model with these",
             "tables at two levels: the TF graph (the ops the converter is predicted to emit) and",
             "the exported `.tflite`/`.onnx` (which decides). For Ethos-U targets Vela is run on",
             "the exported file and its placement overrides the table. Exit code 0: the target",
             "lacks nothing; 1: unsupported ops remain; 2: bad usage or input.", "",
             "| Target | Table | Artifact | Default quantization | Source |",
             "| --- | --- | --- | --- | --- |"]
    for t in list_targets():
        lines.append(f"| `{t.name}` | [{t.table_name}]({t.table_name}.md) | .{t.artifact} | "
                     f"{t.default_quantize} | <{t.source}> |")
    lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- TF graph level
_STATEFUL = {"RandomUniform", "RandomStandardNormal", "Placeholder", "PlaceholderWithDefault",
             "VarHandleOp", "ReadVariableOp", "VariableV2"}


def graph_facts(model: Model, target: Target, quantize: str) -> list[OpFacts]:
    """Facts for every op the converter will emit for ``model``, in execution order.

    Nodes the converter removes (constant subgraphs, bias/batch-norm/activation folded into the
    preceding conv) get one fact with ``op == ""`` and a note saying why.
    """
    from rewriter.graph import GraphIndex
    from rewriter.model import PLUMBING_OPS

    index = GraphIndex(model.graph_def)
    shapes = _infer_shapes(model)
    consts = _constant_nodes(index)
    tflite = target.artifact == "tflite"
    folded = _folded_into_producer(index, consts) if tflite else {}
    fused = _converter_fusions(index, consts) if tflite else {}
    if tflite:
        fused.update(_l2norm_fusions(index, consts, shapes))
    out: list[OpFacts] = []
    for node in index.topological_order():
        if node.op in PLUMBING_OPS or node.op == "Const" or node.name in consts:
            continue
        if node.name in folded:
            out.append(OpFacts(node.name, "", source_op=node.op,
                               note=f"folded into {folded[node.name]} by the converter"))
            continue
        if fused.get(node.name, ("", ""))[1]:
            out.append(OpFacts(node.name, "", source_op=node.op, note=fused[node.name][1]))
            continue
        base = _node_facts(index, node, shapes)
        lowered = target.lower(node.op)
        if node.name in fused:
            lowered = [fused[node.name][0]]
        elif tflite and node.op in ("StatefulPartitionedCall", "PartitionedCall"):
            lowered = _call_lowering(index, node, target)
            live = [r for r in node.input if not r.startswith("^")
                    and r.split(":")[0] not in consts]
            if live:
                base.input_shape = shapes.get(_tensor_name(live[0]))
        elif tflite and node.op in ("RealDiv", "Div") and _const_input(node, consts, 1):
            lowered = ["MUL"]
        if lowered is None:
            base.op, base.custom = f"Flex{node.op}", True
            if target.artifact == "onnx":
                base.op, base.custom = node.op, False
            out.append(base)
            continue
        if target.artifact == "tflite" and node.op in ("FusedBatchNorm", "FusedBatchNormV3"):
            lowered = ["MUL", "ADD"]
        for t in lowered:
            f = OpFacts(**{**base.__dict__, "op": t})
            f.dtype = f.out_dtype = _tf_level_dtype(t, base.dtype, quantize, target.artifact)
            f.note = _float_note(t, quantize, target.artifact)
            out.append(f)
    return out


def _const_input(node: Any, consts: set[str], i: int) -> bool:
    from rewriter.graph import parse_input

    data = [r for r in node.input if not r.startswith("^")]
    return len(data) > i and parse_input(data[i])[0] in consts


def _converter_fusions(index: Any, consts: set[str]) -> dict[str, tuple[str, str]]:
    """Patterns the TFLite converter fuses into one op: node -> (op, "") for the fused op, and
    node -> ("", note) for the nodes it absorbs. Today: hard swish, x * relu6(x + 3) / 6."""
    from rewriter.graph import parse_input

    out: dict[str, tuple[str, str]] = {}

    def live_inputs(node: Any) -> list[str]:
        return [parse_input(r)[0] for r in node.input
                if not r.startswith("^") and parse_input(r)[0] not in consts]

    def single(name: str, op: tuple[str, ...]) -> Any:
        node = index.nodes.get(name)
        if node is None or node.op not in op or len(index.consumers(name)) != 1:
            return None
        return node

    for node in index:
        if node.op != "Mul":
            continue
        live = live_inputs(node)
        if len(live) != 2:
            continue
        for x, y in (live, live[::-1]):
            scale = single(y, ("RealDiv", "Mul"))
            if scale is not None and len(live_inputs(scale)) == 1:
                relu6 = single(live_inputs(scale)[0], ("Relu6",))
                head, absorbed = node, [scale]
            else:  # (x * relu6(x + 3)) / 6
                relu6 = single(y, ("Relu6",))
                after = index.consumers(node.name)
                head = after[0] if len(after) == 1 else None
                if head is None or head.op not in ("RealDiv", "Mul") or len(live_inputs(head)) != 1:
                    continue
                absorbed = [node]
            add = relu6 and single(live_inputs(relu6)[0], ("AddV2", "Add"))
            if add and live_inputs(add) == [x]:
                note = f"fused into HARD_SWISH at {head.name} by the converter"
                out[head.name] = ("HARD_SWISH", "")
                for n in (*absorbed, relu6, add):
                    out[n.name] = ("", note)
                break
    _gelu_fusions(index, live_inputs, single, out)
    return out


def _gelu_fusions(index: Any, live_inputs: Callable[[Any], list[str]],
                  single: Callable[..., Any], out: dict[str, tuple[str, str]]) -> None:
    """Keras 3 GELU, 0.5x * erfc(-x / sqrt 2): the converter emits one GELU op."""
    for erfc in list(index):
        if erfc.op != "Erfc" or len(live_inputs(erfc)) != 1:
            continue
        scale = single(live_inputs(erfc)[0], ("Mul", "RealDiv"))
        neg = scale and len(live_inputs(scale)) == 1 and single(live_inputs(scale)[0], ("Neg",))
        after = index.consumers(erfc.name)
        if not neg or len(after) != 1 or after[0].op != "Mul":
            continue
        head, x = after[0], live_inputs(neg)[0]
        others = [n for n in live_inputs(head) if n != erfc.name]
        half = single(others[0], ("Mul",)) if len(others) == 1 else None
        if half is None or live_inputs(half) != [x]:
            continue
        note = f"fused into GELU at {head.name} by the converter"
        out[head.name] = ("GELU", "")
        for n in (half, neg, scale, erfc):
            out[n.name] = ("", note)


#: The converter fuses ``max(sum(x^2), eps)`` / ``sum(x^2) + eps`` only for eps below this
#: (measured with TF 2.21: 9e-4 and 1e-4 fuse, 1e-3 and 1e-2 do not).
L2_FUSION_EPS_BELOW = 1e-3


def _l2norm_fusions(index: Any, consts: set[str], shapes: dict[str, Shape]
                    ) -> dict[str, tuple[str, str]]:
    """``tf.math.l2_normalize`` over the last axis, ``x * rsqrt(max(sum(x^2, -1, keepdims),
    eps))`` (the max optional): the converter emits one L2_NORMALIZATION at the Mul."""
    from rewriter.graph import parse_input

    out: dict[str, tuple[str, str]] = {}

    def live(node: Any) -> list[str]:
        return [r for r in node.input if not r.startswith("^")
                and parse_input(r)[0] not in consts]

    def single(ref: str, ops: tuple[str, ...]) -> Any:
        node = index.nodes.get(parse_input(ref)[0])
        if node is None or node.op not in ops or len(index.consumers(node.name)) != 1:
            return None
        return node if len(live(node)) == 1 else None

    for rsqrt in list(index):
        if rsqrt.op != "Rsqrt" or len(live(rsqrt)) != 1:
            continue
        after = index.consumers(rsqrt.name)
        head = after[0] if len(after) == 1 and after[0].op == "Mul" else None
        clamp = single(live(rsqrt)[0], ("Maximum", "AddV2", "Add"))
        total = single(live(clamp)[0] if clamp else live(rsqrt)[0], ("Sum",))
        square = total and single(live(total)[0], ("Square",))
        if head is None or not square or not total.attr["keep_dims"].b:
            continue
        x = live(square)[0]
        others = [r for r in live(head) if parse_input(r)[0] != rsqrt.name]
        if others != [x] or not _last_axis_only(index, total, shapes.get(_tensor_name(x))):
            continue
        if clamp is not None and not _small_const(index, clamp):
            continue
        note = f"fused into L2_NORMALIZATION at {head.name} by the converter"
        out[head.name] = ("L2_NORMALIZATION", "")
        for n in (square, total, clamp, rsqrt):
            if n is not None:
                out[n.name] = ("", note)
    return out


def _last_axis_only(index: Any, reduce: Any, shape: Shape | None) -> bool:
    axes = index.const_value(reduce.input[1])
    if axes is None or shape is None:
        return False
    rank = len(shape)
    return [int(a) % rank for a in axes.reshape(-1)] == [rank - 1]


def _small_const(index: Any, node: Any) -> bool:
    vals = [index.const_value(r) for r in node.input if not r.startswith("^")]
    eps = [v for v in vals if v is not None]
    return len(eps) == 1 and eps[0].size == 1 and 0 <= float(eps[0].reshape(-1)[0]) \
        < L2_FUSION_EPS_BELOW


def _call_lowering(index: Any, node: Any, target: Target) -> list[str] | None:
    """Ops emitted for a function call node (the converter inlines the function body)."""
    from rewriter.model import PLUMBING_OPS

    name = node.attr["f"].func.name
    fn = next((f for f in index.library.function if f.signature.name == name), None)
    if fn is None:
        return None
    ops: list[str] = []
    for body in fn.node_def:
        if body.op in PLUMBING_OPS or body.op == "Const":
            continue
        lowered = target.lower(body.op)
        if lowered is None:
            return None
        ops += lowered
    return ops


def _infer_shapes(model: Model) -> dict[str, Shape]:
    """Static shapes of every tensor (``"node:i"``), with the signature's input shapes."""
    import copy

    import tensorflow as tf

    gd = copy.deepcopy(model.graph_def)
    by_node = {spec.node: spec for spec in model.inputs}
    for node in gd.node:
        spec = by_node.get(node.name)
        if spec is not None and node.op == "Placeholder":
            shape = node.attr["shape"].shape
            del shape.dim[:]
            for d in spec.shape:
                shape.dim.add().size = -1 if d is None else int(d)
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(gd, name="")
    shapes: dict[str, Shape] = {}
    for op in graph.get_operations():
        for i, t in enumerate(op.outputs):
            dims = t.shape.as_list() if t.shape.rank is not None else None
            shapes[f"{op.name}:{i}"] = tuple(dims) if dims is not None else None
    return shapes


def _constant_nodes(index: Any) -> set[str]:
    """Nodes whose value is a constant: the converter folds them away."""
    from rewriter.graph import parse_input

    consts: set[str] = set()
    for node in index.topological_order():
        if node.op == "Const":
            consts.add(node.name)
            continue
        data = [parse_input(r)[0] for r in node.input if not r.startswith("^")]
        if data and node.op not in _STATEFUL and all(d in consts for d in data):
            consts.add(node.name)
    return consts


def _folded_into_producer(index: Any, consts: set[str]) -> dict[str, str]:
    """Nodes the TFLite converter folds into a preceding conv/matmul: node -> that producer."""
    from rewriter.graph import parse_input

    low = lowering()["tflite_int8"]
    foldable, producers = set(low["fold_into_producer"]), set(low["producers"])
    root: dict[str, str] = {}
    activated: set[str] = set()
    for node in index.topological_order():
        if node.op in producers:
            root[node.name] = node.name
            continue
        if node.op not in foldable:
            continue
        data = [parse_input(r)[0] for r in node.input if not r.startswith("^")]
        live = [d for d in data if d not in consts]
        if len(live) != 1:
            continue
        src = index.skip_identity(live[0])
        if src is None or src.name not in root or len(index.consumers(src.name)) != 1:
            continue
        r = root[src.name]
        if r in activated:
            continue
        if node.op in ("Relu", "Relu6"):
            activated.add(r)
        elif node.op in ("Sub",) and data[0] in consts:
            continue
        root[node.name] = r
    return {n: r for n, r in root.items() if n != r}


def _node_facts(index: Any, node: Any, shapes: dict[str, Shape]) -> OpFacts:
    from rewriter.graph import node_dtype

    data = [r for r in node.input if not r.startswith("^")]
    in_shape = shapes.get(_tensor_name(data[0])) if data else None
    dt = node_dtype(node)
    f = OpFacts(node.name, node.op, source_op=node.op,
                dtype=dt.name if dt is not None else None, input_shape=in_shape,
                output_shape=shapes.get(f"{node.name}:0"))
    attrs = node.attr
    if "strides" in attrs and len(attrs["strides"].list.i) == 4 and node.op != "StridedSlice":
        s = attrs["strides"].list.i
        f.strides = (int(s[1]), int(s[2]))
    if "dilations" in attrs and len(attrs["dilations"].list.i) == 4:
        d = attrs["dilations"].list.i
        f.dilation = (int(d[1]), int(d[2]))
    if "padding" in attrs:
        f.padding = attrs["padding"].s.decode()
    if "ksize" in attrs and len(attrs["ksize"].list.i) == 4:
        k = attrs["ksize"].list.i
        f.kernel = (int(k[1]), int(k[2]))
    elif node.op in ("Conv2D", "DepthwiseConv2dNative") and len(data) > 1:
        w = shapes.get(_tensor_name(data[1]))
        if w and len(w) == 4 and w[0] is not None:
            f.kernel = (int(w[0]), int(w[1]))
    if node.op in ("Mean", "Sum", "Max", "Min", "Prod", "Split") and len(data) > 1:
        axis_ref = data[0] if node.op == "Split" else data[1]
        axes = index.const_value(axis_ref)
        if axes is not None:
            f.axes = tuple(int(a) for a in axes.reshape(-1))
        if node.op == "Split":
            f.input_shape = shapes.get(_tensor_name(data[1]))
    if node.op == "StridedSlice" and len(data) > 3:
        st = index.const_value(data[3])
        if st is not None:
            f.slice_strides = tuple(int(s) for s in st.reshape(-1))
    return f


def _tensor_name(ref: str) -> str:
    name, _, idx = ref.partition(":")
    return f"{name}:{idx or 0}"
