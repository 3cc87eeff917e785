"""mirror_pad_as_slices: MirrorPad (REFLECT/SYMMETRIC) becomes strided slices (strides 1), their
reversal (a 1x1 anti-identity CONV_2D on the last axis, one-element slices or Transpose + conv on
another) and a ConcatV2 per padded axis.

Exact in float: outputs equal ``tf.pad(..., mode)`` bit for bit, on random data, for Basic
Pitch's shape ([1, 1, 171] padded 128 on each side, REFLECT), NHWC pads on H and W, SYMMETRIC, and
a long strip on a non-last axis. In int8 the rewritten file passes the Edge TPU table (no cut, no
unsupported op, where the MIRROR_PAD cut it) and stays within one int8 step of the float pad.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.mirror_pad_as_slices import MirrorPadAsSlices
from rewriter.testing import model_from_function, op_types

RULE = MirrorPadAsSlices()

CASES = [  # shape, paddings, mode
    ((1, 1, 171), [[0, 0], [0, 0], [128, 128]], "REFLECT"),  # Basic Pitch's CQT signal pad
    ((1, 6, 7, 3), [[0, 0], [2, 3], [1, 4], [0, 0]], "REFLECT"),  # NHWC, H and W
    ((1, 6, 7, 3), [[0, 0], [3, 1], [2, 2], [0, 0]], "SYMMETRIC"),
    ((1, 20, 5, 3), [[0, 0], [12, 10], [0, 0], [0, 0]], "REFLECT"),  # long strip, not last
    ((2, 9), [[1, 0], [3, 8]], "REFLECT"),
    ((5,), [[0, 5]], "SYMMETRIC"),
]


def _pad(paddings, mode):
    return lambda x: tf.pad(x, paddings, mode=mode)


@pytest.mark.parametrize("shape, paddings, mode", CASES)
def test_mirror_pad_is_rewritten_and_equal_to_tf_pad(shape, paddings, mode):
    model = model_from_function(_pad(paddings, mode), [shape])
    result = apply_rules(model, [RULE])
    assert [a.rule for a in result.applied] == ["mirror_pad_as_slices"]
    ops = op_types(result.model)
    assert ops["MirrorPad"] == 0 and ops["ReverseV2"] == 0 and ops["ConcatV2"] >= 1
    strides = [_const(result.model, n.input[3]) for n in result.model.graph_def.node
               if n.op == "StridedSlice"]
    assert strides and all((s == 1).all() for s in strides)
    rng = np.random.default_rng(len(shape))
    for _ in range(3):
        x = rng.normal(size=shape).astype("f4")
        np.testing.assert_array_equal(result.model.run({"x0": x})["output_0"],
                                      tf.pad(x, paddings, mode=mode).numpy())


def _const(model, ref):
    """The value of Const ``ref`` (a StridedSlice's strides)."""
    from rewriter.ir.graph import GraphIndex

    return np.asarray(GraphIndex(model.graph_def).const_value(ref))


def test_non_float_and_unknown_shapes_are_left_alone():
    def on_ints(x):
        return tf.cast(tf.pad(tf.cast(x, tf.int32), [[0, 0], [2, 2]], "REFLECT"), tf.float32)

    result = apply_rules(model_from_function(on_ints, [(1, 8)]), [RULE])
    assert result.applied == [] and op_types(result.model)["MirrorPad"] == 1
    assert any("is not float32" in r.reason for r in result.rejected), result.rejected
    result = apply_rules(model_from_function(_pad([[0, 0], [2, 2]], "REFLECT"), [(None, 8)]),
                         [RULE])
    assert result.applied == [] and any("not static" in r.reason for r in result.rejected)


def _int8_run(path, x):
    """Float output of the int8 file and the scale of its int8 output (before DEQUANTIZE)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=str(path), experimental_op_resolver_type=OpResolverType
                     .BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    deq = [d for d in it._get_ops_details() if d["op_name"] == "DEQUANTIZE"][-1]
    scale = it.get_tensor_details()[deq["inputs"][0]]["quantization"][0]
    return it.get_tensor(it.get_output_details()[0]["index"]), scale


@pytest.mark.parametrize("shape, paddings, mode", [CASES[0], CASES[1], CASES[3]])
def test_int8_file_passes_the_edge_tpu_table_within_one_step(shape, paddings, mode, tmp_path):
    from rewriter.testing import edgetpu_before_after

    model = model_from_function(_pad(paddings, mode), [shape])
    rng = np.random.default_rng(0)
    data = [{"x0": rng.uniform(-1, 1, shape).astype("f4")} for _ in range(8)]
    _, after = edgetpu_before_after(model, apply_rules(model, [RULE]).model, data, tmp_path,
                                    "MIRROR_PAD")
    x = rng.uniform(-1, 1, shape).astype("f4")
    got, scale = _int8_run(after, x)
    err = np.abs(got - tf.pad(x, paddings, mode=mode).numpy()).max()
    assert err <= 1.0 * scale, (err, scale)  # measured 0.49-0.50 steps: the input's rounding
