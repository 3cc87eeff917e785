"""Every rule the planner can choose for the Edge TPU produces, in full int8, a file that passes
the Edge TPU table with every documented limitation: no unsupported op, no cut.

A rule is choosable for the Edge TPU when every op it emits (or the target ops the converter
fuses them into) is in the table (``planner._lacking``). Each such rule has a small sample model
here; the sample is rewritten by that rule alone, exported to full int8 and checked. A new rule
the Edge TPU could run fails ``test_every_rule_the_edge_tpu_can_run_has_a_sample`` until it gets
one. Warnings ("might not be mapped") are listed per sample where the model itself asks for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rewrite.planner import _lacking
from rewriter.rules import all_rules, get_rule
from rewriter.targets import load_target
from rewriter.testing import model_from_function, model_from_keras
from tests.rules.test_activation_emits import CASES as ACTIVATIONS

TARGET = load_target("edgetpu")
NHWC = (1, 4, 4, 8)


def _fn(fn: Callable, shape=NHWC) -> Callable[[], Any]:
    return lambda: model_from_function(fn, [shape])


def _seq(layers_fn: Callable[[Any], list], shape=NHWC, legacy: bool = False):
    def make():
        k = pytest.importorskip("tf_keras") if legacy else keras
        k.utils.set_random_seed(0)
        inp = k.Input(shape[1:], batch_size=shape[0])
        x = inp
        for layer in layers_fn(k.layers):
            x = layer(x)
        return model_from_keras(k.Model(inp, x))
    return make


def _attention(q, k, v):
    p = tf.einsum("BTNH,BSNH->BNTS", q, k)
    return tf.einsum("BNTS,BSNH->BTNH", p, v)


#: rule -> (sample model builder, input range, warnings the sample itself asks for)
SAMPLES: dict[str, tuple[Callable[[], Any], tuple[float, float], int]] = {
    **{name: (_fn(fn), (-6.0, 6.0), 0) for name, fn in ACTIVATIONS.items()},
    "elu_no_exp": (_fn(tf.nn.elu), (-6.0, 6.0), 0),
    "abs_relu_sum": (_fn(tf.abs), (-3.0, 3.0), 0),
    "neg_as_mul": (_fn(lambda x: tf.nn.relu(x) - tf.negative(x)), (-3.0, 3.0), 0),
    "square_as_mul": (_fn(tf.square), (-3.0, 3.0), 0),
    "square_of_sqrt": (_fn(lambda x: tf.square(tf.sqrt(tf.nn.relu(x)))), (-3.0, 3.0), 0),
    "div_reciprocal_ramps": (_fn(lambda x: tf.math.divide_no_nan(
        x, tf.reduce_max(x, axis=[1, 2, 3], keepdims=True) + 1.5)), (-1.0, 1.0), 0),
    "concat_split": (_fn(lambda x: tf.concat([x * (i + 1.0) for i in range(12)], -1)),
                     (-1.0, 1.0), 0),
    "batchnorm_fold_into_conv": (_seq(lambda L: [L.Conv2D(8, 3, padding="same"),
                                                 L.BatchNormalization()]), (-1.0, 1.0), 0),
    "batchnorm_to_mul_add": (_seq(lambda L: [L.BatchNormalization()]), (-1.0, 1.0), 0),
    "fold_shape_constants": (_fn(lambda x: tf.reshape(x, tf.shape(x)[1:]) * 2.0, (1, 4, 8)),
                             (-1.0, 1.0), 0),
    "repeat_as_resize_nearest": (_seq(lambda L: [L.UpSampling2D(2)]), (-1.0, 1.0), 1),
    "while_unroll": (_seq(lambda L: [L.LSTM(4)], (1, 3, 2)), (-1.0, 1.0), 0),
    # an unrolled loop's sequence: the steps packed time-major, then made batch-major
    "pack_off_batch_axis": (_fn(lambda x: tf.transpose(tf.stack(
        [tf.tanh(x * (i + 1.0)) for i in range(3)]), [1, 0, 2]), (1, 4)), (-1.0, 1.0), 0),
    # a backward sequence: the steps packed on time, then reversed in time
    "reverse_of_pack": (_fn(lambda x: tf.reverse(tf.stack(
        [tf.tanh(x * (i + 1.0)) for i in range(3)], axis=1), [1]), (1, 4)), (-1.0, 1.0), 0),
    # Keras PReLU, default shared_axes: a trained-looking alpha that differs per position
    "prelu_spatial_alpha": (_seq(lambda L: [L.PReLU(alpha_initializer=keras.initializers
                                                     .RandomUniform(-0.5, 0.8, seed=0))]),
                            (-3.0, 3.0), 0),
    "layernorm_l2norm": (_seq(lambda L: [L.LayerNormalization(epsilon=1e-6)]), (-3.0, 3.0), 0),
    "layernorm_l2norm_fused_bn": (_seq(lambda L: [L.LayerNormalization()], (1, 6, 8),
                                       legacy=True), (-3.0, 3.0), 0),
    "matmul_as_conv1x1": (_seq(lambda L: [L.Dense(6)], (1, 5, 8)), (-3.0, 3.0), 0),
    "matmul_as_mul_reduce": (lambda: model_from_function(_attention, [(1, 4, 2, 4)] * 3),
                             (-2.0, 2.0), 0),
    "softmax_rows": (_fn(tf.nn.softmax, (1, 2, 3, 6)), (-4.0, 4.0), 0),
    "softmax_ramps": (_fn(tf.nn.softmax, (1, 6)), (-4.0, 4.0), 0),
    # a power spectrum: frames as signal blocks read by CONV_2D, DFT kernels, MUL/ADD; the
    # signal's reshape into [1, blocks, 1, step] is one regrouping reshape
    "stft_as_conv": (_fn(lambda x: tf.square(tf.abs(tf.signal.stft(x, 64, 32))), (1, 512)),
                     (-1.0, 1.0), 1),
    "sparsemax_pairwise": (_fn(keras.ops.sparsemax), (-3.0, 3.0), 0),
    # its CONV_2D ramps read the tensor reshaped to [.., C * W, 1]: two regrouping reshapes
    "elementwise_ramps": (_fn(tf.exp), (-3.0, 1.0), 2),
    # REFLECT on H (one-element slices) and on C (the 1x1 anti-identity CONV_2D)
    "mirror_pad_as_slices": (_fn(lambda x: tf.pad(x, [[0, 0], [2, 2], [0, 0], [3, 3]],
                                                  mode="REFLECT")), (-1.0, 1.0), 0),
    # Basic Pitch's CQT magnitude: re**2 + im**2 summed over an axis of 2
    "sum_as_adds": (_fn(lambda x: tf.reduce_sum(x * x, -1), (1, 4, 4, 2)), (-1.0, 1.0), 0),
    # Keras's mask value -0.7*float32.max under a constant condition (the Edge TPU's SOFTMAX
    # takes one axis larger than 1: a [1, 6] row)
    "softmax_mask_select": (_fn(lambda x: tf.nn.softmax(tf.where(
        tf.constant([[True, True, True, True, False, False]]), x,
        tf.constant(np.float32(-0.7 * np.finfo(np.float32).max)))), (1, 6)), (-3.0, 3.0), 0),
    # a data-dependent mask (x > 0.5) on a [1, 6] row: MUL/ADD with fused RELU/RELU6 only
    "softmax_mask_compare": (_fn(lambda x: tf.nn.softmax(tf.where(x > 0.5, x, -1e9)), (1, 6)),
                             (-3.0, 3.0), 0),
    "cumsum_as_conv1x1": (_fn(lambda x: tf.math.cumsum(x, axis=1), (1, 16, 8)), (-1.0, 1.0), 0),
    # the rows and columns regrouped by rank-3 reshapes: three "might not be mapped" RESHAPEs
    "strided_slice_unit_steps": (_fn(lambda x: x[:, ::2, ::2, :] * 2.0), (-1.0, 1.0), 3),
    # Keras GroupNormalization, 4 groups of 2 channels: each group's elements as one row, and
    # back (four regrouping reshapes: "might not be mapped")
    "groupnorm_l2norm": (_seq(lambda L: [L.GroupNormalization(groups=4)]), (-3.0, 3.0), 4),
    # a 4x bilinear downscale (half-pixel centres, TF's default) as average pools
    "resize_bilinear_as_avg_pool": (_fn(lambda x: tf.image.resize(x, (2, 2)), (1, 8, 8, 8)),
                                    (-1.0, 1.0), 0),
    # a segmentation head's arg-max over channels, as the fused form (ReduceMax, Sub, Minimum, Mul)
    "argmax_reduce_max": (_fn(lambda x: tf.argmax(x * 2.0, axis=-1)), (-1.0, 1.0), 0),
}


#: Rules whose tensors are integers, which the Edge TPU never takes (every tensor int8/uint8):
#: no sample can pass its limits. gather_index_wrap's ids come from an int32 input; there the
#: lookup runs on the host (the report's --inputs cut, tests/test_family_embedding.py).
INTEGER_ONLY = frozenset({"gather_index_wrap"})


def _edgetpu_rules() -> list[str]:
    cache: dict = {}
    return sorted(r.name for r in all_rules()
                  if not _lacking(r, TARGET, "int8", cache) and r.name not in INTEGER_ONLY)


def test_every_rule_the_edge_tpu_can_run_has_a_sample():
    missing = [r for r in _edgetpu_rules() if r not in SAMPLES]
    assert missing == [], f"add a sample for {missing}"


@pytest.mark.parametrize("name", _edgetpu_rules())
def test_rule_output_passes_every_documented_edge_tpu_limit(name, tmp_path):
    from rewriter.export.tflite import export_tflite

    build, (lo, hi), warnings = SAMPLES[name]
    model = build()
    rng = np.random.default_rng(0)
    data = [{s.name: rng.uniform(lo, hi, s.shape).astype("f4") for s in model.inputs}
            for _ in range(4)]  # rules fitted on the observed range measure it on these
    result = apply_rules(model, [get_rule(name)], data=data)
    assert result.applied, f"{name} did not fire on its sample"
    rewritten = result.model
    path = tmp_path / f"{name}.tflite"
    export_tflite(rewritten, path, quantize="int8", calibration=data)
    check = TARGET.check_artifact(str(path))
    bad = [v.reason for v in check.verdicts if not v.supported and v.reason]
    assert check.cut is None and bad == [], bad
    assert sum(w["count"] for w in check.warnings_summary()) == warnings, \
        check.warnings_summary()

