"""elu_exact: ELU becomes relu(x) + (exp(min(x, 0)) - 1), exactly.

The worked example of a rule test: (1) it fires, op types asserted; (2) a case where it must not
fire, reason asserted; (3) its exactness claim checked numerically over its domain.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.elu_exact import EluExact
from rewriter.testing import (
    assert_close_rel,
    dense_line,
    int8_tflite,
    model_from_function,
    nodes_by_rule,
    op_types,
)

RULE = EluExact()


def _elu_model(shape=(4096,)):
    return model_from_function(lambda x: tf.nn.elu(x * 2.0) + 1.0, [shape])


def test_replaces_every_elu_with_relu_minimum_exp_add():
    model = _elu_model()
    result = apply_rules(model, [RULE])
    ops = op_types(result.model)
    assert "Elu" not in ops
    assert ops["Exp"] == 1 and ops["Relu"] == 1 and ops["Sub"] == 1
    assert [a.rule for a in result.applied] == ["elu_exact"]
    assert result.model.source.notes[-1] == "rewritten: elu_exact x1"


def test_new_nodes_carry_provenance_and_output_keeps_the_elu_name():
    model = _elu_model()
    elu_name = next(n.name for n in model.graph_def.node if n.op == "Elu")
    result = apply_rules(model, [RULE])
    created = nodes_by_rule(result.model, "elu_exact")
    assert elu_name in created  # the output node took over the ELU's name
    assert all(n == elu_name or n.startswith(f"{elu_name}/elu_exact/") for n in created)
    assert sorted(result.applied[0].created) == sorted(created)


def test_does_not_fire_on_float64_and_says_why():
    model = model_from_function(lambda x: tf.nn.elu(x), [(8,)], dtype="float64")
    result = apply_rules(model, [RULE])
    assert op_types(result.model)["Elu"] == 1
    assert result.applied == []
    assert result.rejected[0].rule == "elu_exact"
    assert "float64" in result.rejected[0].reason


def test_matches_tf_elu_within_1e5_relative_over_minus_20_to_20():
    model = _elu_model()
    x = dense_line(-20.0, 20.0, 4096)
    result = apply_rules(model, [RULE])
    want = model.run({"x0": x})["output_0"]
    got = result.model.run({"x0": x})["output_0"]
    assert_close_rel(got, want, rtol=1e-5)
    assert np.max(np.abs(got - want)) < 1e-5


def test_decomposed_elu_quantizes_in_full_int8_where_elu_stays_float():
    w = np.random.default_rng(0).normal(0, 1, (3, 3, 4, 4)).astype("f4")
    model = model_from_function(lambda x: tf.nn.elu(tf.nn.conv2d(x, w, 1, "SAME")),
                                [(1, 8, 8, 4)])
    ops_before, _ = int8_tflite(model)
    assert ("ELU", "float32") in ops_before  # the converter's behaviour this rule exists for
    ops, err = int8_tflite(apply_rules(model, [RULE]).model)
    inner = [op for op in ops if op[0] not in ("QUANTIZE", "DEQUANTIZE")]
    assert inner and all(dt == "int8" for _, dt in inner), ops
    assert err < 0.03  # int8 noise only (measured 1.1%; a clipped positive half gives 1.0)


def test_keras_elu_with_alpha_loses_its_select_and_matches():
    import keras

    from rewriter.testing import model_from_keras

    inp = keras.Input((64,), batch_size=1)
    model = model_from_keras(keras.Model(inp, keras.layers.ELU(alpha=0.3)(inp)))
    assert {"SelectV2", "Elu", "Greater"} <= set(op_types(model))
    result = apply_rules(model, [RULE])
    assert not {"SelectV2", "Elu", "Greater"} & set(op_types(result.model))
    x = dense_line(-8.0, 8.0, 64).reshape(1, 64)
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])
