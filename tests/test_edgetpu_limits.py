"""Every documented Edge TPU limitation is judged, with the observed value in its reason.

The Edge TPU table (``op_tables/edgetpu.toml``) encodes the "Known limitations" column of the
documented "Supported operations" table as constraints. Each is violated here by a tiny model,
at the TF-graph level (prediction) and, where the converter can produce the case, in the
exported int8 ``.tflite`` (which decides). Two limits the converter never produces (shuffled
fully-connected weights; a resize on a batch > 1 the generic 3-dimension limit already catches)
are checked on the facts of one op. "Might not be mapped" limits are warnings: the op stays
mapped, the verdict says why it might not be.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from rewriter.targets import load_target
from rewriter.targets.opfacts import OpFacts, TensorFacts
from rewriter.targets.verdicts import (
    STATUS_DTYPE,
    STATUS_LIMITATION,
    STATUS_MAY_NOT_MAP,
    STATUS_UNSUPPORTED,
)
from tests.test_targets import _reasons, build_model


def _w(*shape: int) -> tf.Tensor:
    return tf.constant(np.random.default_rng(1).uniform(0.5, 1.5, shape).astype("float32"))


# (kind, model, input shape, the reason expected word for word) on the edgetpu table
GRAPH_CASES = [
    ("depth_reduction_multiple", lambda x: tf.reduce_mean(x, axis=-1, keepdims=True),
     (1, 4, 4, 6),
     "MEAN: A reduction over depth (the innermost dimension) needs a depth that is a multiple "
     "of 4: observed reduces depth 6 of [1, 4, 4, 6]"),
    ("concat_constant_zero_pad", lambda x: tf.concat([x, _w(1, 4, 4, 1)], -1), (1, 4, 4, 3),
     "CONCATENATION: If any input is a compile-time constant, there must be only 2 inputs and "
     "the constant must be all zeros (a zero-padding op): observed constant input 1 "
     "[1, 4, 4, 1] has 16 non-zero value(s)"),
    ("output_inner_dims", lambda x: tf.matmul(x, _w(8, 16)), (4, 8),
     "FULLY_CONNECTED: The output tensor must be 1-dimensional (only its innermost dimension "
     "larger than 1): observed [4, 16]"),
    ("slice_masks_zero", lambda x: x[:, tf.newaxis, 1:], (1, 8),
     "STRIDED_SLICE: Ellipsis and new-axis masks must be 0: observed new_axis_mask 2"),
]

BATCH_CASES = [
    ("PAD", lambda x: tf.pad(x, [[1, 0], [0, 0]]), (1, 8), "axis [0] of [1, 8]"),
    ("PACK", lambda x: tf.stack([x, x], axis=0), (1, 8), "axis [0] of [2, 1, 8]"),
    ("SPLIT", lambda x: tf.split(x, 2, axis=0)[0], (2, 8), "axis [0] of [2, 8]"),
    ("REDUCE_MAX", lambda x: tf.reduce_max(x, axis=0), (2, 8), "axis [0] of [2, 8]"),
]


@pytest.mark.parametrize("kind,fn,shape,expected", GRAPH_CASES, ids=[c[0] for c in GRAPH_CASES])
def test_graph_level_limitation_gives_reason_with_observed_value(kind, fn, shape, expected):
    assert expected in _reasons("edgetpu", fn, shape)


@pytest.mark.parametrize("op,fn,shape,observed", BATCH_CASES, ids=[c[0] for c in BATCH_CASES])
def test_batch_axis_limits_of_pad_pack_split_reduce(op, fn, shape, observed):
    assert f"{op}: Must not operate along the batch axis: observed {observed}" in _reasons(
        "edgetpu", fn, shape)


def test_within_the_limits_nothing_is_reported():
    """The same ops inside the documented limits pass: the predicates are not always-false."""
    assert _reasons("edgetpu", lambda x: tf.reduce_mean(x, axis=-1, keepdims=True),
                    (1, 4, 4, 8)) == []
    assert _reasons("edgetpu", lambda x: tf.concat([x, tf.zeros((1, 4, 4, 1))], -1),
                    (1, 4, 4, 3)) == []
    assert _reasons("edgetpu", lambda x: tf.matmul(x, _w(8, 16)), (1, 8)) == []
    assert _reasons("edgetpu", lambda x: tf.pad(x, [[0, 0], [1, 1]]), (1, 8)) == []


def _facts(op: str, **kw) -> OpFacts:
    return OpFacts("n", op, dtype="int8", out_dtype="int8", **kw)


def test_fully_connected_weights_must_be_in_the_default_format():
    t = load_target("edgetpu")
    v = t.judge(_facts("FULLY_CONNECTED", input_shape=(1, 8), output_shape=(1, 4),
                       options={"weights_format": "SHUFFLED4x16INT8"}))
    assert v.reason == ("FULLY_CONNECTED: Weights must be in the DEFAULT format: observed "
                        "SHUFFLED4x16INT8")
    assert t.judge(_facts("FULLY_CONNECTED", input_shape=(1, 8), output_shape=(1, 4),
                          options={"weights_format": "DEFAULT"})).supported


def test_resize_input_and_output_are_3_dimensional():
    v = load_target("edgetpu").judge(_facts("RESIZE_BILINEAR", input_shape=(2, 4, 4, 3),
                                            output_shape=(2, 8, 8, 3)))
    assert v.reason == ("RESIZE_BILINEAR: Input and output must be 3-dimensional tensors "
                        "(batch 1): observed [2, 4, 4, 3]")
    assert v.constraint == "io_rank3"


def test_prelu_alpha_must_be_1_dimensional():
    t = load_target("edgetpu")
    alpha = TensorFacts((4, 4, 3), "int8", True, 48)
    v = t.judge(_facts("PRELU", input_shape=(1, 4, 4, 3), output_shape=(1, 4, 4, 3),
                       inputs=(TensorFacts((1, 4, 4, 3), "int8"), alpha)))
    assert v.reason == ("PRELU: Alpha must be 1-dimensional (only its innermost dimension "
                        "larger than 1): observed alpha [4, 4, 3]")
    shared = TensorFacts((1, 1, 3), "int8", True, 3)
    assert t.judge(_facts("PRELU", input_shape=(1, 4, 4, 3), output_shape=(1, 4, 4, 3),
                          inputs=(TensorFacts((1, 4, 4, 3), "int8"), shared))).supported


def test_bidirectional_lstm_is_not_in_the_table():
    v = load_target("edgetpu").judge(_facts("BIDIRECTIONAL_SEQUENCE_LSTM"))
    assert not v.supported and "unidirectional LSTM only" in v.reason


@pytest.mark.parametrize("fn,shape,warning", [
    (lambda x: tf.reshape(x, (1, 4, 8)), (1, 32),
     "RESHAPE: Certain reshapes might not be mapped for large tensor sizes: observed "
     "[1, 32] -> [1, 4, 8] (32 elements)"),
    (lambda x: tf.image.resize(x, (8, 8)), (1, 4, 4, 3),
     "RESIZE_BILINEAR: Depending on input/output size, this operation might not be mapped, "
     "to avoid loss in precision: observed [1, 4, 4, 3] -> [1, 8, 8, 3]"),
])
def test_might_not_be_mapped_is_a_warning_not_a_failure(fn, shape, warning):
    check = load_target("edgetpu").check_graph(build_model(fn, shape))
    warned = [v for v in check.verdicts if v.warning]
    assert check.ok and [v.warning for v in warned] == [warning]
    assert warned[0].supported and warned[0].placement == "accelerator"
    assert check.warnings_summary()[0]["warning"] == warning
    assert any(r["status"] == STATUS_MAY_NOT_MAP for r in check.table())


def test_reshape_that_only_adds_ones_gives_no_warning():
    check = load_target("edgetpu").check_graph(build_model(lambda x: tf.reshape(x, (1, 1, 8, 4)),
                                                           (1, 8, 4)))
    assert [v.warning for v in check.verdicts if v.warning] == []


@pytest.fixture(scope="module")
def violating_tflite(tmp_path_factory) -> str:
    """One full-int8 file breaking four limits the converter keeps in the file: a constant
    non-zero channel concatenated, a MEAN over a depth of 6, a FULLY_CONNECTED with a [1, 4, 6]
    output, a PReLU with a per-element alpha."""
    from rewriter.export.tflite import export_tflite
    from rewriter.testing import model_from_keras

    inp = keras.Input((4, 4, 5), batch_size=1)
    x = keras.layers.Lambda(lambda t: tf.concat([t, tf.ones((1, 4, 4, 1))], -1))(inp)
    x = keras.layers.PReLU(alpha_initializer=keras.initializers.Constant(0.2))(x)
    m = keras.layers.Lambda(lambda t: tf.reduce_mean(t, -1, keepdims=True))(x)
    x = keras.layers.Reshape((4, 24))(x - m)
    y = keras.layers.Dense(6)(x)
    model = model_from_keras(keras.Model(inp, y))
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("etpu") / "limits.tflite"
    export_tflite(model, path, quantize="int8",
                  calibration=[{model.inputs[0].name: rng.normal(size=(1, 4, 4, 5))
                                .astype("float32")} for _ in range(8)])
    return str(path)


def test_limitations_are_judged_in_the_exported_file(violating_tflite):
    check = load_target("edgetpu").check_artifact(violating_tflite)
    reasons = {v.target_op: v.reason for v in check.verdicts if not v.supported}
    assert reasons["CONCATENATION"].endswith("observed constant input 1 [1, 4, 4, 1] has 16 "
                                             "non-zero value(s)")
    assert reasons["PRELU"].endswith("observed alpha [4, 4, 6]")
    assert reasons["MEAN"].endswith("observed reduces depth 6 of [1, 4, 4, 6]")
    assert reasons["FULLY_CONNECTED"].endswith("observed [1, 4, 6]")
    assert check.cut is not None and check.cut["op"] == "CONCATENATION"
    statuses = {r["op"]: r["status"] for r in check.table() if not r["supported"]}
    assert statuses["CONCATENATION"] == STATUS_LIMITATION


def test_check_table_speaks_the_compiler_log():
    """A missing op, a broken limitation and a wrong dtype get the compiler's three statuses."""
    check = load_target("edgetpu").check_graph(build_model(
        lambda x: tf.nn.elu(tf.concat([x, tf.zeros((1, 4))], -1)), (1, 4)), "none")
    statuses = {r["op"]: r["status"] for r in check.table()}
    assert statuses == {"CONCATENATION": STATUS_DTYPE, "ELU": STATUS_UNSUPPORTED}
    check = load_target("edgetpu").check_graph(build_model(
        lambda x: tf.concat([x, _w(1, 4)], -1), (1, 4)))
    assert {r["op"]: r["status"] for r in check.table()} == {"CONCATENATION": STATUS_LIMITATION}


def test_might_not_be_mapped_counts_only_ops_before_the_cut():
    """A large RESHAPE after the cut runs on the CPU anyway: it is no 'might not be mapped' op
    (the zoo's transformer, cut at its first op, was counted 4 of them)."""
    def fn(x):
        return tf.reshape(tf.math.erf(x), (1, 4, 8))

    check = load_target("edgetpu").check_graph(build_model(fn, (1, 32)))
    assert check.cut is not None and check.cut["mapped_before"] == 0
    assert [v.warning is not None for v in check.verdicts if v.op == "Reshape"] == [True]
    assert check.warnings_summary() == [] and check.placement()["might_not_map"] == []
