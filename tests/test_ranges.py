"""Observed ranges of graph tensors: measured on the attached samples, on the current graph,
cached until it changes, non-finite values counted not folded in."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rewriter.ir.graph import GraphIndex
from rewriter.ir.ranges import attach_samples, has_samples, measure, observed_range
from rewriter.testing import model_from_function

SHAPE = (1, 4, 4, 2)


def _model():
    return model_from_function(lambda x: tf.nn.softplus(2.0 * x) - 1.0, [SHAPE])


def _samples(*values):
    return [{"x0": np.full(SHAPE, v, np.float32)} for v in values]


def _node(model, op):
    return next(n.name for n in model.graph_def.node if n.op == op)


def test_range_of_an_intermediate_tensor_over_all_samples():
    model = _model()
    g = GraphIndex(model.graph_def)
    attach_samples(g, model.inputs, _samples(-1.0, 0.5, 3.0))
    seen = observed_range(g, _node(model, "Mul"))
    assert (seen.lo, seen.hi, seen.samples) == (-2.0, 6.0, 3)


def test_no_samples_no_range():
    model = _model()
    g = GraphIndex(model.graph_def)
    assert observed_range(g, "x0") is None and not has_samples(g)
    attach_samples(g, model.inputs, [])
    assert observed_range(g, "x0") is None


def test_the_inputs_of_the_named_ops_are_measured_in_the_same_run():
    model = _model()
    g = GraphIndex(model.graph_def)
    attach_samples(g, model.inputs, _samples(1.0), ops={"Softplus"})
    observed_range(g, "x0")
    cache = g._rewriter_samples.cache
    assert f"{_node(model, 'Mul')}:0" in cache and "x0:0" in cache


def test_a_changed_graph_is_measured_again():
    model = _model()
    g = GraphIndex(model.graph_def)
    attach_samples(g, model.inputs, _samples(1.0))
    mul = _node(model, "Mul")
    assert observed_range(g, mul).hi == 2.0
    const = next(i for i in g[mul].input if g[i.split(":")[0]].op == "Const")
    g[const].attr["value"].tensor.float_val[:] = [5.0]
    g.add(g[const].__class__(name="extra", op="NoOp"))  # a rewrite adds/removes nodes
    assert observed_range(g, mul).hi == 5.0


def test_non_finite_values_are_counted_and_left_out():
    model = model_from_function(lambda x: tf.math.log(x), [SHAPE])
    g = GraphIndex(model.graph_def)
    out = measure(g, model.inputs, _samples(0.0, 1.0), [f"{_node(model, 'Log')}:0"])
    (seen,) = out.values()
    assert seen.nonfinite == int(np.prod(SHAPE)) and seen.lo == seen.hi == 0.0
