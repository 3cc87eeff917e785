"""One deployment target: its op table, how it partitions, and its verdicts at both levels.

:meth:`Target.check_graph` judges the ops the converter is predicted to emit for a TF graph
(:mod:`rewriter.targets.predict`); :meth:`Target.check_artifact` judges the ops inside the
exported file (:mod:`rewriter.targets.artifact`), which decides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rewriter.defaults import DEFAULT_OPSET, QUANTIZE_MODES
from rewriter.errors import UserError
from rewriter.targets.artifact import read_artifact
from rewriter.targets.constraints import Constraint
from rewriter.targets.opfacts import OpFacts
from rewriter.targets.predict import graph_facts, mark_float_island, tf_level_dtype
from rewriter.targets.tables import (
    OpEntry,
    lowering,
    onnx_ops,
    onnx_since,
    parse_constraints,
    tflite_builtins,
)
from rewriter.targets.verdicts import EDGE_REASON, GraphCheck, OpStatus, OpVerdict

if TYPE_CHECKING:  # pragma: no cover
    from rewriter.ir.model import Model

#: The op name of a TF op that only Flex (SELECT_TF_OPS) could run.
FLEX = "flex"


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
        #: Vela's --system-config and --memory-mode (None: Vela's defaults); set by the CLI.
        self.system_config: str | None = None
        self.memory_mode: str | None = None
        #: Every Vela setting the user gave (rewriter.targets.vela.VelaSettings); set by the CLI.
        self.vela_settings: Any = None
        self.unsupported_note: str | None = data.get("unsupported_note")
        self.ops_label: str = data.get("ops_label", "ops the target supports")
        #: The interpreter the exported .tflite is run in to prove it (ONNX: ONNX Runtime).
        self.runtime: str = data.get("runtime", "litert")
        self.ops_from: str | None = data.get("ops_from")
        #: The target runs a grouped CONV_2D itself: the exported file keeps it grouped
        #: (:func:`rewriter.rules.grouped_conv_split.regroup`).
        self.grouped_conv: bool = bool(data.get("grouped_conv", False))
        self.opset: int | None = None
        if self.artifact == "onnx":
            self.opset = int(opset or data.get("default_opset", DEFAULT_OPSET))
        elif opset is not None:
            raise UserError(f"--opset applies to ONNX targets; {name} exports TFLite")
        where = f"{data['name']}.toml"
        generic = dict(data.get("generic", {}))
        self.generic_except: set[str] = set(generic.pop("except", []))
        self.generic: list[Constraint] = parse_constraints(f"{where} [generic]", generic)
        self.ops: dict[str, OpEntry] = {}
        for op, entry in data.get("ops", {}).items():
            cons = parse_constraints(f"{where} [ops.{op}]", entry)
            self.ops[op] = OpEntry(cons, entry.get("note"), entry.get("doc"),
                                   entry.get("source"))
        self.unsupported: dict[str, str | None] = {
            op: e.get("note") for op, e in data.get("unsupported", {}).items()}
        self._onnx_ops = onnx_ops(self.opset) if self.ops_from == "onnx-defs" else {}
        #: The table's ``[int16]`` section (16x8 kernels), or None: the target runs no 16x8.
        self.int16: dict[str, Any] | None = data.get("int16")

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
        """The op's own constraints first (the more precise reason), then the generic ones it
        does not override."""
        generic = [] if op in self.generic_except else self.generic
        entry = self.ops.get(op)
        specific = entry.constraints if entry else []
        kinds = {c.kind for c in specific}
        return list(specific) + [c for c in generic if c.kind not in kinds]

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
        if facts.blocked:
            return OpVerdict(facts.node, source, facts.op, False, facts.blocked, None, "cpu")
        if "int16" in (facts.dtype, facts.out_dtype) and not self.int16_kernel(facts.op):
            return OpVerdict(facts.node, source, facts.op, False,
                             f"{facts.op}: {self.title} has no 16x8 kernel for it (int16 "
                             "activations)", "int16", "cpu", facts.related_op,
                             constraint="int16")
        constraints = self.constraints_for(facts.op)
        for c in constraints:
            hit = c.violation(facts) if c.severity == "error" else None
            if hit is not None:
                reason, observed = hit
                if facts.note and c.kind == "dtypes":
                    reason += f" ({facts.note})"
                return OpVerdict(facts.node, source, facts.op, False, f"{facts.op}: {reason}",
                                 observed, "cpu", facts.related_op, constraint=c.kind)
        warnings = [hit[0] for c in constraints if c.severity == "warning"
                    for hit in [c.violation(facts)] if hit is not None]
        return OpVerdict(facts.node, source, facts.op, True,
                         warning=f"{facts.op}: {'; '.join(warnings)}" if warnings else None)

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
            facts = OpFacts(op, t, source_op=op, dtype=tf_level_dtype(t, "float32", quantize,
                                                                           self.artifact))
            mark_float_island(facts, quantize, self.artifact)
            v = self.judge(facts)
            if not v.supported:
                return OpStatus(op, False, target_ops, v.reason)
        return OpStatus(op, True, target_ops)

    def target_op_status(self, op: str, quantize: str | None = None) -> OpStatus:
        """Op level for a target op (``L2_NORMALIZATION``, ``Concat``): in the table, and its
        dtype constraint met after conversion with ``quantize`` (no shapes considered)."""
        quantize = self.resolve_quantize(quantize)
        facts = OpFacts(op, op, dtype=tf_level_dtype(op, "float32", quantize, self.artifact))
        mark_float_island(facts, quantize, self.artifact)
        v = self.judge(facts)
        return OpStatus(op, v.supported, [op], v.reason)

    def resolve_quantize(self, quantize: str | None) -> str:
        q = quantize or self.default_quantize
        if q not in QUANTIZE_MODES:
            raise UserError(f"--quantize {q!r} is not one of {', '.join(QUANTIZE_MODES)}")
        if self.artifact == "onnx" and q != "none":
            raise UserError(f"{self.name} exports ONNX; --quantize {q} applies to TFLite targets")
        if q == "16x8" and self.no_16x8():
            raise UserError(f"{self.name} does not run 16x8 (int16 activations, int8 weights): "
                            f"{self.no_16x8()}; use --quantize int8, or a target that runs "
                            "16x8 (`rewrite targets` lists them)")
        return q

    def no_16x8(self) -> str | None:
        """Why the target runs no 16x8 model (its table's ``[int16] refused``, or no such
        section), or None when it does."""
        if self.int16 is None:
            return "its op table lists no 16x8 kernels"
        return self.int16.get("refused")

    def int16_kernel(self, op: str) -> bool:
        """Whether the target has a 16x8 kernel (int16 activations) for target op ``op``."""
        if self.no_16x8() or self.int16 is None:
            return False
        if "ops" in self.int16:
            return op in self.int16["ops"]
        return op not in self.int16.get("except", [])

    # ------------------------------------------------------------------ levels
    def check_graph(self, model: Model, quantize: str | None = None) -> GraphCheck:
        """Level 1: predict the converter's ops from the TF graph and judge them. Judged once
        per graph, target and quantisation (:meth:`Model.memo`): the job, the planner's rounds
        and ``rewrite check`` share the verdict; treat it as read-only."""
        q = self.resolve_quantize(quantize)
        return model.memo(("check_graph", id(self), q),
                          lambda: self._finish("graph", graph_facts(model, self, q)), keep=self)

    def check_artifact(self, path: str) -> GraphCheck:
        """Level 2: judge the ops, dtypes and shapes inside the exported ``.tflite``/``.onnx``."""
        art = read_artifact(path)
        if art.kind != self.artifact:
            raise UserError(f"{self.name} deploys .{self.artifact} files; {path} is .{art.kind}")
        check = self._finish("artifact", art.ops)
        if art.kind == "onnx" and self.opset is not None and art.opset and art.opset > self.opset:
            check.notes.append(f"the file declares opset {art.opset}; the target was checked "
                               f"at opset {self.opset}")
        return check

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
        return GraphCheck(self.name, level, verdicts, ok, cut, ops_label=self.ops_label)

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
