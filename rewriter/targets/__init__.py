"""Targets: the op tables in ``op_tables/*.toml`` and the verdicts they give, with reasons.

A table lists the ops a target runs (TFLite builtin names, or ONNX op types) and, per op, the
constraints it must meet. Each constraint *kind* is a named predicate defined once
(:mod:`~rewriter.targets.constraints`): its rule text is a template formatted from the table's
data, and the predicate returns the observed value when the constraint is violated, so every
verdict reads like Vela's ("Stride must be in [1, 3]: observed 4x1"). The same tables judge two
levels: the TF graph (:meth:`Target.check_graph`, predicting what the converter will emit,
:mod:`~rewriter.targets.predict`) and the exported file (:meth:`Target.check_artifact`, which
decides). The human docs are generated from the tables (:mod:`~rewriter.targets.docs`), so they
cannot drift.

Modules, each importing only those above it: ``constraints`` (kinds) -> ``verdicts`` ->
``tables`` (TOML, lowering) -> ``predict`` (converter prediction) -> ``target`` (the
:class:`Target`) -> ``registry`` (names -> targets) -> ``docs``.
"""

from __future__ import annotations

from rewriter.defaults import QUANTIZE_MODES
from rewriter.targets.constraints import KINDS, Constraint, Kind
from rewriter.targets.docs import docs_files, render_markdown
from rewriter.targets.opfacts import OpFacts, Shape
from rewriter.targets.predict import L2_FUSION_EPS_BELOW, graph_facts
from rewriter.targets.registry import (
    list_targets,
    load_target,
    table_targets,
    target_from_table,
    target_names,
)
from rewriter.targets.tables import (
    TABLE_DIR,
    OpEntry,
    lowering,
    onnx_ops,
    onnx_since,
    read_table,
    tflite_builtins,
)
from rewriter.targets.target import FLEX, Target
from rewriter.targets.verdicts import EDGE_REASON, GraphCheck, OpStatus, OpVerdict

__all__ = ["EDGE_REASON", "FLEX", "KINDS", "L2_FUSION_EPS_BELOW", "QUANTIZE_MODES", "TABLE_DIR",
           "Constraint", "GraphCheck", "Kind", "OpEntry", "OpFacts", "OpStatus", "OpVerdict",
           "Shape", "Target", "docs_files", "graph_facts", "list_targets", "load_target",
           "lowering", "onnx_ops", "onnx_since", "read_table", "render_markdown",
           "table_targets", "target_from_table", "target_names", "tflite_builtins"]
