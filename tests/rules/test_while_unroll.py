"""while_unroll: a Keras RNN's frozen while loop becomes its body repeated T times, exactly.

Small Keras 3 and tf_keras recurrent models (LSTM, GRU, SimpleRNN, return_sequences, stacked,
Bidirectional, a conv front end with stacked GRUs) are frozen the way the front ends freeze
them (lowered TF1 loops with TensorLists), unrolled, and compared with the loop in TF on inputs
spread over [-3, 3]; the unrolled LSTM is converted to full int8 and every operator is int8.
A loop whose trip count depends on the data is refused with the reason.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.ir.graph import GraphIndex
from rewriter.ir.loops import LOOP_OPS, find_loops
from rewriter.rewrite.passes import apply_rules
from rewriter.rules.while_unroll import WhileUnroll
from rewriter.testing import assert_close_rel, int8_tflite, model_from_keras, op_types

RULE = WhileUnroll()
LIST_OPS = {"TensorListFromTensor", "TensorListReserve", "TensorListGetItem",
            "TensorListSetItem", "TensorListStack"}


def _keras3(kind: str, steps: int = 6, features: int = 5):
    import keras

    keras.utils.set_random_seed(0)
    layers = keras.layers
    inp = keras.Input((steps, features), batch_size=1)
    if kind == "lstm":
        x = layers.LSTM(8)(inp)
    elif kind == "gru":
        x = layers.GRU(8)(inp)
    elif kind == "simple_rnn":
        x = layers.SimpleRNN(8)(inp)
    elif kind == "stacked_sequences":
        x = layers.LSTM(8, return_sequences=True)(inp)
        x = layers.GRU(6, return_sequences=True)(x)
    elif kind == "bidirectional":
        x = layers.Bidirectional(layers.LSTM(4, return_sequences=True))(inp)
        x = layers.Bidirectional(layers.GRU(4))(x)
    else:
        raise ValueError(kind)
    return keras.Model(inp, layers.Dense(3)(x))


def _tf_keras(kind: str, steps: int = 6, features: int = 5):
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    layers = tf_keras.layers
    inp = tf_keras.Input((steps, features), batch_size=1)
    if kind == "lstm":
        x = layers.LSTM(8)(inp)
    elif kind == "gru":
        x = layers.GRU(8, return_sequences=True)(inp)
        x = layers.Flatten()(x)
    elif kind == "bidirectional":
        x = layers.Bidirectional(layers.GRU(4, return_sequences=True))(inp)
        x = layers.LSTM(4)(x)
    else:
        raise ValueError(kind)
    return tf_keras.Model(inp, layers.Dense(3)(x))


def _keyword_spotter():
    """Conv front end on a 25x10 'spectrogram', then two stacked GRUs (a KWS shape)."""
    import keras

    keras.utils.set_random_seed(1)
    layers = keras.layers
    inp = keras.Input((25, 10, 1), batch_size=1)
    x = layers.Conv2D(4, (5, 3), strides=(2, 1), padding="same", activation="relu")(inp)
    x = layers.Reshape((13, 40))(x)
    x = layers.GRU(8, return_sequences=True)(x)
    x = layers.GRU(8)(x)
    return keras.Model(inp, layers.Dense(4)(x))


def _inputs(model, seed: int = 0, scale: float = 3.0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {s.name: rng.uniform(-scale, scale, s.shape).astype("f4") for s in model.inputs}


def _assert_unrolled_and_exact(model, loops: int) -> None:
    assert len(find_loops(GraphIndex(model.graph_def))) == loops
    result = apply_rules(model, [RULE])
    ops = set(op_types(result.model))
    assert not ops & (LOOP_OPS | LIST_OPS), ops
    assert [a.rule for a in result.applied] == ["while_unroll"] * loops
    for seed in range(3):
        feeds = _inputs(model, seed)
        want = model.run(feeds)["output_0"]
        got = result.model.run(feeds)["output_0"]
        assert_close_rel(got, want, rtol=1e-5)


@pytest.mark.parametrize("kind,loops", [("lstm", 1), ("gru", 1), ("simple_rnn", 1),
                                        ("stacked_sequences", 2), ("bidirectional", 4)])
def test_keras3_recurrent_layers_unroll_exactly(kind, loops):
    _assert_unrolled_and_exact(model_from_keras(_keras3(kind)), loops)


@pytest.mark.parametrize("kind,loops", [("lstm", 1), ("gru", 1), ("bidirectional", 3)])
def test_tf_keras_recurrent_layers_unroll_exactly(kind, loops):
    _assert_unrolled_and_exact(model_from_keras(_tf_keras(kind)), loops)


def test_keyword_spotter_conv_and_stacked_grus_unroll_exactly():
    _assert_unrolled_and_exact(model_from_keras(_keyword_spotter()), 2)


def test_stacked_layers_unroll_whatever_the_graph_node_order():
    """The second layer's sequence length is known only once the first is unrolled; a graph
    listing the second loop first must still unroll both."""
    model = model_from_keras(_tf_keras("bidirectional"))
    nodes = list(model.graph_def.node)
    del model.graph_def.node[:]
    model.graph_def.node.extend(reversed(nodes))
    _assert_unrolled_and_exact(model, 3)


def test_time_steps_are_slices_of_the_input_and_first_step_zero_state_folds():
    model = model_from_keras(_keras3("lstm", steps=6))
    ops = op_types(apply_rules(model, [RULE]).model)
    # one input slice per step, no Transpose of the input left; h0 = c0 = 0 folds the first
    # step's recurrent MatMul and forget gate away: 6 input + 5 recurrent + 1 Dense MatMuls
    assert "Transpose" not in ops and ops["StridedSlice"] >= 6
    assert ops["MatMul"] == 6 + 5 + 1
    assert ops["Sigmoid"] == 3 * 6 - 1


def test_created_nodes_carry_provenance_and_outputs_keep_their_names():
    model = model_from_keras(_keras3("stacked_sequences"))
    result = apply_rules(model, [RULE])
    names = {n.name for n in result.model.graph_def.node}
    # the first layer's Pack goes once the second layer reads its steps directly
    created = {n for a in result.applied for n in a.created} & names
    assert created and set(result.applied[-1].created) <= names
    for node in result.model.graph_def.node:
        if node.name in created:
            assert node.attr["_rewriter_rule"].s == b"while_unroll"
    assert result.model.outputs[0].node in names


def test_unrolled_lstm_is_all_int8_after_full_integer_conversion():
    model = apply_rules(model_from_keras(_keras3("lstm")), [RULE]).model
    ops, err = int8_tflite(model, -3.0, 3.0)
    inner = [op for op in ops if op[0] not in ("QUANTIZE", "DEQUANTIZE")]
    assert {"FULLY_CONNECTED", "LOGISTIC", "TANH", "MUL", "ADD"} <= {o for o, _ in inner}
    assert all(dt == "int8" for _, dt in inner), ops
    assert err < 0.1  # int8 noise over 6 steps, one sample (measured 0.063 of the output scale)


def test_data_dependent_trip_count_is_refused_with_the_reason():
    from rewriter.testing import model_from_function

    def fn(x):
        n = tf.cast(tf.reduce_sum(tf.abs(x)), tf.int32)
        out = tf.while_loop(lambda i, acc: i < n, lambda i, acc: (i + 1, acc * 0.5 + x),
                            (tf.constant(0), x))[1]
        return tf.reshape(out, [1, 4])

    model = model_from_function(fn, [(1, 4)])
    result = apply_rules(model, [RULE])
    assert result.applied == []
    assert "trip count is not static" in result.rejected[0].reason
    assert "--input-shape" in result.rejected[0].reason


def test_fixed_trip_count_loop_of_tf_while_loop_unrolls_exactly():
    from rewriter.testing import model_from_function

    def fn(x):
        out = tf.while_loop(lambda i, acc: i < 7, lambda i, acc: (i + 1, tf.tanh(acc * 1.5 + x)),
                            (tf.constant(0), x))[1]
        return tf.reshape(out, [2, 4])

    model = model_from_function(fn, [(2, 4)])
    result = apply_rules(model, [RULE])
    assert op_types(result.model)["Tanh"] == 7
    x = np.linspace(-3, 3, 8, dtype="f4").reshape(2, 4)
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])


def test_topological_order_follows_loops_but_still_names_a_real_cycle():
    from rewriter.ir.graph import GraphDef, make_node

    model = model_from_keras(_keras3("gru"))
    g = GraphIndex(model.graph_def)
    order = [n.name for n in g.topological_order()]
    assert len(order) == len(g)
    gd = GraphDef()
    gd.node.extend([make_node("Relu", "a", ["b"]), make_node("Relu", "b", ["a"])])
    with pytest.raises(ValueError, match="cycle through node"):
        GraphIndex(gd).topological_order()
