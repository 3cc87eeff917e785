"""Targets for tests and benchmarks, built from in-memory op tables like the real ones.

:func:`toy_target` writes a table that runs the target ops the converter emits for the given
TF op types (the lowering table) plus any target ops named, and loads it with
:func:`~rewriter.targets.target_from_table`: the planner and the checks see a real
:class:`~rewriter.targets.Target`, judged by the same code as ``op_tables/*.toml``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rewriter.targets.registry import target_from_table
from rewriter.targets.tables import lowering
from rewriter.targets.target import Target


def toy_target(tf_ops: Iterable[str] = (), target_ops: Iterable[str] = (),
               artifact: str = "tflite",
               constraints: Mapping[str, Mapping[str, Any]] | None = None,
               name: str = "toy") -> Target:
    """A per-op target running what ``tf_ops`` lower to (for ``artifact``) and ``target_ops``;
    ``constraints`` adds constraint kinds per target op (``{"ELU": {"rank_max": 2}}``)."""
    section = lowering()["onnx" if artifact == "onnx" else "tflite"]
    ops = {t for op in tf_ops for t in section.get(op, [])} | set(target_ops)
    ops |= set(constraints or {})
    data = {"name": name, "title": f"Toy {artifact} target",
            "sources": ["https://example.invalid/toy"], "version": "test",
            "artifact": artifact, "default_quantize": "int8" if artifact == "tflite" else "none",
            "partitioning": "per-op",
            "ops": {op: dict((constraints or {}).get(op, {})) for op in sorted(ops)}}
    return target_from_table(data)
