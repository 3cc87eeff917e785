"""Helpers for tests and benchmarks: tiny frozen models, applying rules, op counts, numeric
closeness, and toy targets. The library never imports this module (``tests/test_structure.py``).

Imports TensorFlow lazily (only :func:`model_from_function` needs it). Used by
``tests/rules/test_<rule>.py``; see ``tests/rules/test_elu_exact.py`` for the pattern.

:func:`toy_target` writes a table that runs the target ops the converter emits for the given
TF op types (the lowering table) plus any target ops named, and loads it with
:func:`~rewriter.targets.target_from_table`: the planner and the checks see a real
:class:`~rewriter.targets.Target`, judged by the same code as ``op_tables/*.toml``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from rewriter.frontends.function import model_from_function, model_from_keras
from rewriter.ir.model import PLUMBING_OPS, Model, Source, TensorSpec
from rewriter.targets.registry import target_from_table
from rewriter.targets.tables import lowering
from rewriter.targets.target import Target

__all__ = [
    "assert_close_rel", "conv_bn_elu_chain", "dense_line", "edgetpu_before_after", "int8_tflite",
    "max_rel_error", "model_from_function", "model_from_keras", "nodes_by_rule", "op_types",
    "run_both", "toy_target"]


def op_types(model: Model) -> Counter:
    """Count of each non-plumbing op type in the model."""
    return Counter(n.op for n in model.graph_def.node if n.op not in PLUMBING_OPS)


def nodes_by_rule(model: Model, rule: str) -> list[str]:
    """Names of nodes carrying provenance ``_rewriter_rule == rule``."""
    return [n.name for n in model.graph_def.node
            if "_rewriter_rule" in n.attr and n.attr["_rewriter_rule"].s.decode() == rule]


def run_both(before: Model, after: Model, feeds: Mapping[str, np.ndarray]
             ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    return before.run(feeds), after.run(feeds)


def max_rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want| (relative to the output's scale, so zeros do not blow up)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(float(np.max(np.abs(want))), 1e-30)
    return float(np.max(np.abs(got - want))) / scale


def assert_close_rel(got: np.ndarray, want: np.ndarray, rtol: float = 1e-5) -> None:
    """Elementwise ``|got - want| <= rtol * max(|want|, max|want|)``; shapes must agree."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)


def dense_line(lo: float, hi: float, n: int = 4096, shape: Iterable[int] | None = None
               ) -> np.ndarray:
    """``n`` evenly spaced float32 points in [lo, hi] (including 0 when inside), reshaped."""
    pts = np.linspace(lo, hi, n, dtype=np.float64)
    if lo < 0 < hi:
        pts[np.argmin(np.abs(pts))] = 0.0
    arr = pts.astype(np.float32)
    return arr.reshape(tuple(shape)) if shape is not None else arr


def int8_tflite(model: Model, low: float = -1.0, high: float = 1.0, samples: int = 30,
                seed: int = 0) -> tuple[list[tuple[str, str]], float]:
    """Convert ``model`` (one float input) to full-int8 TFLite with float I/O; return its
    operators as (op name, output dtype) and the max error relative to the float model's output
    scale on a random input in [low, high]."""
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    spec = model.inputs[0]
    rng = np.random.default_rng(seed)

    def rep():
        for _ in range(samples):
            yield [rng.uniform(low, high, spec.shape).astype("f4")]

    conv = tf.lite.TFLiteConverter.from_concrete_functions([model.concrete_function()])
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = rep
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    interp = Interpreter(model_content=conv.convert(),
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interp.allocate_tensors()
    details = interp.get_tensor_details()
    ops = [(d["op_name"], details[d["outputs"][0]]["dtype"].__name__)
           for d in interp._get_ops_details()]
    x = np.random.default_rng(seed + 1).uniform(low, high, spec.shape).astype("f4")
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    got = interp.get_tensor(interp.get_output_details()[0]["index"])
    return ops, max_rel_error(got, model.run({spec.name: x})[model.outputs[0].name])


def conv_bn_elu_chain(blocks: int, channels: int = 4, size: int = 8, seed: int = 0) -> Model:
    """A ``GraphDef`` of ``blocks`` x (Conv2D -> FusedBatchNormV3 -> Elu), built directly as
    protos (no TF tracing), 8 nodes per block: for scaling tests of matching and rewriting."""
    from rewriter.ir.graph import GraphDef, make_const, make_node

    rng = np.random.default_rng(seed)
    protos = {
        "w": make_const("w", rng.normal(0, 0.3, (1, 1, channels, channels)).astype("f4")),
        "gamma": make_const("gamma", rng.uniform(0.5, 1.5, channels).astype("f4")),
        "beta": make_const("beta", rng.normal(0, 0.1, channels).astype("f4")),
        "mean": make_const("mean", rng.normal(0, 0.1, channels).astype("f4")),
        "var": make_const("var", rng.uniform(0.5, 1.5, channels).astype("f4")),
    }
    gd = GraphDef()
    x = gd.node.add(name="input", op="Placeholder")
    x.attr["dtype"].type = 1
    for d in (1, size, size, channels):
        x.attr["shape"].shape.dim.add(size=d)
    prev = "input"
    for i in range(blocks):
        names = {}
        for key, proto in protos.items():
            node = gd.node.add()
            node.CopyFrom(proto)
            node.name = names[key] = f"b{i}/{key}"
        gd.node.append(make_node("Conv2D", f"b{i}/conv", [prev, names["w"]],
                                 {"strides": [1, 1, 1, 1], "padding": "SAME",
                                  "data_format": "NHWC"}))
        gd.node.append(make_node("FusedBatchNormV3", f"b{i}/bn",
                                 [f"b{i}/conv", names["gamma"], names["beta"], names["mean"],
                                  names["var"]],
                                 {"epsilon": 1e-3, "is_training": False, "data_format": "NHWC",
                                  "U": np.float32}))
        gd.node.append(make_node("Elu", f"b{i}/elu", [f"b{i}/bn"]))
        prev = f"b{i}/elu"
    shape = (1, size, size, channels)
    return Model(gd, [TensorSpec("input", "input:0", shape, "float32")],
                 [TensorSpec("output", f"{prev}:0", shape, "float32")],
                 Source("<chain>", "memory"))


def edgetpu_before_after(before: Model, after: Model, data: Sequence[Mapping[str, np.ndarray]],
                         directory: Any, cut_op: str) -> tuple[Any, Any]:
    """Both models converted to full int8 on ``data`` into ``directory`` (``before.tflite``,
    ``after.tflite``) and judged by the Edge TPU table: the original must be cut at
    ``cut_op``, the rewrite must have no cut and no unsupported op. The two paths."""
    from pathlib import Path

    from rewriter.export.tflite import export_tflite
    from rewriter.targets import load_target

    target = load_target("edgetpu")
    paths = {}
    for m, name in ((before, "before"), (after, "after")):
        paths[name] = Path(directory) / f"{name}.tflite"
        export_tflite(m, paths[name], quantize="int8", calibration=list(data))
    cut = target.check_artifact(str(paths["before"])).cut
    assert cut is not None and cut["op"] == cut_op, cut
    check = target.check_artifact(str(paths["after"]))
    bad = [v.reason for v in check.verdicts if not v.supported and v.reason]
    assert check.cut is None and bad == [], bad
    return paths["before"], paths["after"]

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
