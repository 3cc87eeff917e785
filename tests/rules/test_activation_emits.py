"""Every activation rule creates only op types it declares in ``emits`` (the planner trusts it),
and every rule's identity (first docstring line) names what it computes."""

from __future__ import annotations

import keras
import pytest
import tensorflow as tf

from rewriter.rules import get_rule
from tests.rules._activation_checks import rewritten

CASES = {
    "relu6_min_max": tf.nn.relu6,
    "leaky_relu_max": lambda x: tf.nn.leaky_relu(x, 0.2),
    "leaky_relu_prelu": lambda x: tf.nn.leaky_relu(x, 0.2),
    "selu_exact": tf.nn.selu,
    "softplus_exact": tf.nn.softplus,
    "mish_sigmoid": lambda x: keras.activations.mish(x),
    "swish_sigmoid": lambda x: tf.nn.silu(x, beta=2.0),
    "hard_sigmoid_min_max": lambda x: keras.activations.hard_sigmoid(x),
    "hard_swish_unfused": lambda x: keras.activations.hard_swish(x),
    "gelu_erf_poly": lambda x: keras.activations.gelu(x),
    "gelu_tanh_approx": lambda x: keras.activations.gelu(x),
    "gelu_sigmoid_approx": lambda x: keras.activations.gelu(x),
    "gelu_tanh_as_sigmoid": lambda x: keras.activations.gelu(x, approximate=True),
    "erf_poly": lambda x: tf.math.erf(x) + tf.math.erfc(x),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_created_ops_are_declared_in_emits_and_fixed_ops_are_gone(name):
    rule = get_rule(name)
    before, result = rewritten(CASES[name], rule)
    assert result.applied, f"{name} did not fire"
    created = {n.op for n in result.model.graph_def.node
               if "_rewriter_rule" in n.attr and n.op != "Const"}
    assert created and created <= rule.emits
    ops_before = {n.op for n in before.graph_def.node}
    ops_after = {n.op for n in result.model.graph_def.node}
    assert (ops_before - ops_after) & rule.fixes
    assert rule.summary and ("=" in rule.summary or "~" in rule.summary)

