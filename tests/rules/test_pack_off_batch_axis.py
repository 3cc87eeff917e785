"""pack_off_batch_axis: a Pack on axis 0 of [1, ...] items is a Reshape of their Pack on axis 1.

Exact (data movement only): outputs are compared for equality, in float and through the Edge TPU
check of the int8 file (the PACK no longer cuts the graph). The recurrent shape is covered: a
TF1 ``dynamic_rnn`` / Keras sequence output, once unrolled, is a time-major Pack on axis 0.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.pack_off_batch_axis import PackOffBatchAxis
from rewriter.testing import model_from_function, op_types

RULE = PackOffBatchAxis()


def _steps(x):
    return [tf.tanh(x * (i + 1.0)) for i in range(5)]


def test_time_major_pack_then_transpose_is_rewritten_and_equal():
    def fn(x):
        return tf.transpose(tf.stack(_steps(x), axis=0), [1, 0, 2])  # [5, 1, 3] -> [1, 5, 3]

    model = model_from_function(fn, [(1, 3)])
    result = apply_rules(model, [RULE])
    assert [a.rule for a in result.applied] == ["pack_off_batch_axis"]
    packs = [n for n in result.model.graph_def.node if n.op == "Pack"]
    assert len(packs) == 1 and packs[0].attr["axis"].i == 1
    x = np.linspace(-2, 2, 3, dtype="f4").reshape(1, 3)
    np.testing.assert_array_equal(result.model.run({"x0": x})["output_0"],
                                  model.run({"x0": x})["output_0"])


def test_items_not_of_batch_one_and_other_axes_are_left_alone():
    def on_batch_of_two(x):
        return tf.stack([x, x * 2.0], axis=0)  # items [2, 3]: axis 1 would be other data

    def on_axis_one(x):
        return tf.stack(_steps(x), axis=1)

    for fn, shape in ((on_batch_of_two, (2, 3)), (on_axis_one, (1, 3))):
        result = apply_rules(model_from_function(fn, [shape]), [RULE])
        assert result.applied == [] and op_types(result.model)["Pack"] == 1


def test_int8_file_of_the_rewrite_is_not_cut_on_the_edge_tpu(tmp_path):
    from rewriter.export.tflite import export_tflite
    from rewriter.targets import load_target

    def fn(x):
        return tf.transpose(tf.stack(_steps(x), axis=0), [1, 0, 2])

    model = model_from_function(fn, [(1, 8)])
    rng = np.random.default_rng(0)
    data = [{"x0": rng.uniform(-1, 1, (1, 8)).astype("f4")} for _ in range(8)]
    target = load_target("edgetpu")
    for m, name in ((model, "before"), (apply_rules(model, [RULE]).model, "after")):
        export_tflite(m, tmp_path / f"{name}.tflite", quantize="int8", calibration=data)
        cut = target.check_artifact(str(tmp_path / f"{name}.tflite")).cut
        if name == "before":
            assert cut is not None and cut["op"] == "PACK", cut
        else:
            assert cut is None, cut
