"""grouped_conv_split: a grouped Conv2D becomes a depthwise conv or split/conv/concat, exactly.

The reference is the Keras layer itself (tf_keras ``Conv2D(groups=g)`` run eagerly): the frozen
grouped Conv2D cannot run on TF's CPU kernels, the rewritten graph must, and must agree with
the layer to 1e-5 relative on inputs over [-3, 3]. The front ends apply the rule while loading.
"""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.graph import GraphDef, make_const, make_node
from rewriter.model import Model, Source, TensorSpec
from rewriter.passes import apply_rules
from rewriter.rules.grouped_conv_split import GroupedConvSplit
from rewriter.rules.testing import assert_close_rel, int8_tflite, op_types

RULE = GroupedConvSplit()


def _grouped_graph(cin: int, cout: int, groups: int, strides=(1, 1), size: int = 12,
                   seed: int = 0) -> tuple[Model, np.ndarray]:
    """x -> Conv2D with a [3, 3, cin/groups, cout] filter (what Keras freezes a grouped conv to)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.4, (3, 3, cin // groups, cout)).astype("f4")
    gd = GraphDef()
    x = gd.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = 1
    for d in (1, size, size, cin):
        x.attr["shape"].shape.dim.add(size=d)
    gd.node.append(make_const("w", w))
    gd.node.append(make_node("Conv2D", "conv", ["x", "w"],
                             {"strides": [1, *strides, 1], "padding": "SAME",
                              "data_format": "NHWC", "dilations": [1, 1, 1, 1]}))
    out = (1, -(-size // strides[0]), -(-size // strides[1]), cout)
    model = Model(gd, [TensorSpec("x", "x:0", (1, size, size, cin), "float32")],
                  [TensorSpec("y", "conv:0", out, "float32")], Source("<test>", "memory"))
    return model, w


def _reference(x: np.ndarray, w: np.ndarray, groups: int, strides=(1, 1)) -> np.ndarray:
    """The grouped convolution computed group by group with TF's own (ungrouped) conv."""
    import tensorflow as tf

    xs = np.split(x, groups, axis=-1)
    ws = np.split(w, groups, axis=-1)
    return np.concatenate([tf.nn.conv2d(a, b, [1, *strides, 1], "SAME").numpy()
                           for a, b in zip(xs, ws, strict=True)], axis=-1)


@pytest.mark.parametrize("cin,cout,groups", [(8, 16, 4), (16, 16, 2), (6, 12, 3)])
def test_grouped_conv_becomes_split_convs_concat_and_matches(cin, cout, groups):
    model, w = _grouped_graph(cin, cout, groups)
    result = apply_rules(model, [RULE])
    ops = op_types(result.model)
    assert ops["Conv2D"] == groups and ops["Split"] == 1 and ops["ConcatV2"] == 1
    x = np.random.default_rng(1).uniform(-3, 3, (1, 12, 12, cin)).astype("f4")
    assert_close_rel(result.model.run({"x": x})["y"], _reference(x, w, groups), rtol=1e-5)


def test_many_groups_are_concatenated_in_a_tree_of_at_most_ten_inputs():
    """TFLite Micro's CONCATENATION takes at most 10 inputs (RegNetX002 has up to 46 groups)."""
    model, w = _grouped_graph(46, 46 * 2, 23, size=6)
    result = apply_rules(model, [RULE])
    concats = [n for n in result.model.graph_def.node if n.op == "ConcatV2"]
    assert op_types(result.model)["Conv2D"] == 23 and len(concats) == 4  # 10 + 10 + 3, root
    assert all(len(n.input) - 1 <= 10 for n in concats)
    x = np.random.default_rng(1).uniform(-3, 3, (1, 6, 6, 46)).astype("f4")
    assert_close_rel(result.model.run({"x": x})["y"], _reference(x, w, 23), rtol=1e-5)


def test_one_channel_per_group_becomes_depthwise_and_matches():
    model, w = _grouped_graph(8, 16, 8)
    result = apply_rules(model, [RULE])
    assert dict(op_types(result.model)) == {"DepthwiseConv2dNative": 1}
    x = np.random.default_rng(2).uniform(-3, 3, (1, 12, 12, 8)).astype("f4")
    assert_close_rel(result.model.run({"x": x})["y"], _reference(x, w, 8), rtol=1e-5)


def test_unequal_strides_with_one_channel_per_group_use_the_split_form():
    # TF's depthwise kernel needs equal strides in h and w
    model, w = _grouped_graph(4, 4, 4, strides=(2, 1))
    result = apply_rules(model, [RULE])
    ops = op_types(result.model)
    assert "DepthwiseConv2dNative" not in ops and ops["Conv2D"] == 4
    x = np.random.default_rng(3).uniform(-3, 3, (1, 12, 12, 4)).astype("f4")
    assert_close_rel(result.model.run({"x": x})["y"], _reference(x, w, 4, (2, 1)), rtol=1e-5)


def test_ordinary_conv_is_left_alone_silently():
    model, _ = _grouped_graph(8, 8, 1)
    result = apply_rules(model, [RULE])
    assert result.applied == [] and result.rejected == []


def test_nchw_is_refused_with_the_reason():
    model, _ = _grouped_graph(8, 16, 4)
    for node in model.graph_def.node:
        if node.op == "Conv2D":
            node.attr["data_format"].s = b"NCHW"
        if node.op == "Placeholder":  # [1, C, H, W]
            dims = node.attr["shape"].shape.dim
            dims[1].size, dims[3].size = 8, 12
    result = apply_rules(model, [RULE])
    assert result.applied == []
    assert "data_format NCHW" in result.rejected[0]["reason"]


def test_split_form_is_all_int8_after_full_integer_conversion():
    model, _ = _grouped_graph(8, 16, 4)
    ops, err = int8_tflite(apply_rules(model, [RULE]).model, -3.0, 3.0)
    inner = [op for op in ops if op[0] not in ("QUANTIZE", "DEQUANTIZE")]
    assert {"SPLIT", "CONV_2D", "CONCATENATION"} <= {o for o, _ in inner}
    assert all(dt == "int8" for _, dt in inner), ops
    assert err < 0.03  # int8 noise only (measured 0.010 of the output scale)


def test_tf_keras_grouped_conv_h5_loads_and_matches_the_keras_layer(tmp_path):
    import tf_keras

    from rewriter.frontends import load_model

    tf_keras.utils.set_random_seed(0)
    inp = tf_keras.Input((10, 10, 8), name="image")
    out = tf_keras.layers.Conv2D(16, 3, padding="same", groups=4)(inp)
    keras_model = tf_keras.Model(inp, tf_keras.layers.Conv2D(8, 3, groups=8)(out))
    keras_model.save(tmp_path / "g.h5")
    loaded = load_model(tmp_path / "g.h5")
    assert any("grouped_conv_split" in n for n in loaded.source.notes)
    x = np.random.default_rng(4).uniform(-3, 3, (1, 10, 10, 8)).astype("f4")
    got = next(iter(loaded.run({"image": x}).values()))
    assert_close_rel(got, keras_model(x).numpy(), rtol=1e-5)
