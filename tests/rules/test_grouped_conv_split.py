"""grouped_conv_split: a grouped Conv2D becomes a depthwise conv or split/conv/concat, exactly.

The reference is the Keras layer itself (tf_keras ``Conv2D(groups=g)`` run eagerly): the frozen
grouped Conv2D cannot run on TF's CPU kernels, the rewritten graph must, and must agree with
the layer to 1e-5 relative on inputs over [-3, 3]. The front ends apply the rule while loading.
"""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.ir.graph import GraphDef, make_const, make_node
from rewriter.ir.model import Model, Source, TensorSpec
from rewriter.rewrite.passes import apply_rules
from rewriter.rules.grouped_conv_split import GroupedConvSplit
from rewriter.testing import assert_close_rel, int8_tflite, op_types

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
    assert "data_format NCHW" in result.rejected[0].reason


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


# ----------------------------------------------------------------------------- regroup
def _split_then_bn(cin: int, cout: int, groups: int) -> tuple[Model, np.ndarray, np.ndarray]:
    """The split form of a grouped conv followed by a per-channel multiply and add (what a
    BatchNormalization after a grouped conv leaves once the rule has split the conv)."""
    model, w = _grouped_graph(cin, cout, groups)
    split = apply_rules(model, [RULE]).model
    gd = GraphDef()
    gd.CopyFrom(split.graph_def)
    scale = np.random.default_rng(2).uniform(0.5, 1.5, cout).astype("f4")
    gd.node.extend([make_const("scale", scale), make_const("shift", np.full(cout, 0.1, "f4")),
                    make_node("Mul", "bn_mul", [split.outputs[0].tensor, "scale"],
                              {"T": np.float32}),
                    make_node("AddV2", "bn_add", ["bn_mul", "shift"], {"T": np.float32})])
    out = TensorSpec("y", "bn_add:0", split.outputs[0].shape, "float32")
    return Model(gd, split.inputs, [out], split.source), w, scale


@pytest.mark.parametrize("cin,cout,groups", [(8, 16, 4), (24, 24, 12)])  # 12: a concat tree
def test_regroup_puts_the_grouped_filter_back_exactly(cin, cout, groups):
    from rewriter.rules.grouped_conv_split import regroup

    model, w = _grouped_graph(cin, cout, groups)
    split = apply_rules(model, [RULE]).model
    gd, count = regroup(split.graph_def, [s.tensor for s in split.outputs])
    assert count == 1
    ops = [n.op for n in gd.node]
    assert ops.count("Conv2D") == 1 and "Split" not in ops and "ConcatV2" not in ops
    conv = next(n for n in gd.node if n.op == "Conv2D")
    assert conv.name == "conv"  # the original conv's name, the signature's output
    kernel = next(n for n in gd.node if n.name == conv.input[1])
    from rewriter.ir.graph import const_to_array

    assert np.array_equal(const_to_array(kernel), w)  # the same filter, bit for bit
    assert conv.input[0] == "x"


def test_regroup_leaves_a_split_whose_branch_is_read_elsewhere():
    from rewriter.rules.grouped_conv_split import regroup

    model, _ = _grouped_graph(8, 16, 4)
    split = apply_rules(model, [RULE]).model
    gd = GraphDef()
    gd.CopyFrom(split.graph_def)
    branch = next(n.name for n in gd.node if n.op == "Conv2D")
    gd.node.append(make_node("Relu", "other_reader", [branch], {"T": np.float32}))
    out, count = regroup(gd, [split.outputs[0].tensor, "other_reader:0"])
    assert count == 0 and out is gd


@pytest.fixture(scope="module")
def exported_for_ethos_u(tmp_path_factory):
    """The split grouped conv + multiply/add exported full int8 for ethos-u55-128 (the job's
    export stage), and the same graph exported with the table's grouped_conv switched off."""
    from rewriter.job.stages import export_artifact
    from rewriter.targets import load_target

    model, w, scale = _split_then_bn(16, 32, 4)
    rng = np.random.default_rng(5)
    cal = [{"x": rng.uniform(-3, 3, (1, 12, 12, 16)).astype("f4")} for _ in range(16)]
    tmp = tmp_path_factory.mktemp("regroup")
    target = load_target("ethos-u55-128")
    assert target.grouped_conv
    grouped = export_artifact(model, target, "int8", tmp / "grouped.tflite", cal)
    target.grouped_conv = False
    split = export_artifact(model, target, "int8", tmp / "split.tflite", cal)
    return model, w, scale, grouped, split


def test_ethos_u_artifact_keeps_the_grouped_conv_and_folds_what_follows(exported_for_ethos_u):
    model, w, scale, grouped, split = exported_for_ethos_u
    assert grouped.ok and split.ok
    assert grouped.result.repairs and "1 grouped convolution" in grouped.result.repairs[0]
    assert sorted(set(grouped.result.ops)) == ["CONV_2D"]  # multiply and add folded into it
    assert {"SPLIT", "CONCATENATION", "MUL"} <= set(split.result.ops)
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(grouped.path))
    interp.allocate_tensors()
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    x = np.random.default_rng(6).uniform(-3, 3, (1, 12, 12, 16)).astype("f4")
    s, z = inp["quantization"]
    interp.set_tensor(inp["index"], np.clip(np.round(x / s + z), -128, 127).astype(np.int8))
    interp.invoke()
    s, z = out["quantization"]
    got = (interp.get_tensor(out["index"]).astype("f4") - z) * s
    want = model.run({"x": x})["y"]
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err < 0.03, err  # int8 noise only (the reference is the TF split form)


def test_vela_runs_the_grouped_file_no_slower_than_the_split_one(exported_for_ethos_u):
    pytest.importorskip("ethosu.vela")
    from rewriter.targets.vela import run_vela

    *_, grouped, split = exported_for_ethos_u
    g = run_vela(grouped.path, "ethos-u55-128")
    s = run_vela(split.path, "ethos-u55-128")
    assert g.cpu_ops == 0 and s.cpu_ops == 0
    assert g.inference_time < s.inference_time, (g.inference_time, s.inference_time)
