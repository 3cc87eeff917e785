"""elu_no_exp: ELU from Mul/Add/Min/Max/Relu only, within its stated bound everywhere."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rewriter.passes import apply_rules
from rewriter.rules.elu_no_exp import EluNoExp
from rewriter.rules.testing import dense_line, model_from_function, op_types

RULE = EluNoExp()


def test_replaces_elu_with_ops_an_edge_tpu_has():
    model = model_from_function(lambda x: tf.nn.elu(x), [(16,)])
    result = apply_rules(model, [RULE])
    ops = set(op_types(result.model))
    assert "Elu" not in ops and "Exp" not in ops
    assert ops <= RULE.emits
    assert result.applied[0]["exact"] is False
    assert result.applied[0]["bound"]["max_abs_error"] == RULE.bound.max_abs_error


def test_refuses_float16_with_reason():
    model = model_from_function(lambda x: tf.nn.elu(x), [(4,)], dtype="float16")
    result = apply_rules(model, [RULE])
    assert result.applied == [] and "float16" in result.rejected[0]["reason"]


def test_error_stays_within_bound_over_the_whole_line_and_is_not_exact():
    model = model_from_function(lambda x: tf.nn.elu(x), [(20001,)])
    x = dense_line(-40.0, 10.0, 20001)
    after = apply_rules(model, [RULE]).model
    err = np.abs(after.run({"x0": x})["output_0"].astype(np.float64)
                 - model.run({"x0": x})["output_0"])
    assert err.max() <= RULE.bound.max_abs_error
    assert err.max() > 1e-4  # the bound is tight, not a blanket tolerance
    assert err[x > 0].max() < 1e-6  # the positive side is exact


def test_alpha_above_one_is_refused_because_it_scales_the_bound():
    import keras

    from rewriter.rules.testing import model_from_keras

    inp = keras.Input((8,), batch_size=1)
    model = model_from_keras(keras.Model(inp, keras.layers.ELU(alpha=2.0)(inp)))
    result = apply_rules(model, [RULE])
    assert result.applied == []
    assert result.rejected[0]["reason"].startswith("alpha 2 > 1")
