"""argmax_reduce_max: the fused arg-max for the Edge TPU (no ARG_MAX there). Bounded: an index
whose value is within d (one int8 step of the calibration range) of the row's maximum, the first
index of the maximum when no other entry is that close. In float and in full int8 (LiteRT's
kernels; the Edge TPU compiler is not installable), beside ARG_MAX on the same int8 file's logits.
The Edge TPU sample is in test_edgetpu_rule_outputs.py; the job on a head in
tests/test_family_argmax.py."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.argmax_reduce_max import ArgmaxReduceMax
from rewriter.testing import model_from_function, model_from_keras, op_types

RULE = ArgmaxReduceMax()
SHAPE = (1, 8, 8, 6)
FUSED_OPS = {"Max", "Sub", "Minimum", "Mul"}


def _samples(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x0": rng.uniform(-1, 1, SHAPE).astype("f4")} for _ in range(n)]


@pytest.fixture(scope="module")
def plain():
    return model_from_function(lambda x: tf.argmax(x * 2.0, axis=-1), [SHAPE])


@pytest.fixture(scope="module")
def rewritten(plain):
    result = apply_rules(plain, [RULE], data=_samples(16, 0))
    assert [a.rule for a in result.applied] == ["argmax_reduce_max"]
    return result


def _step(applied) -> float:
    """d: the calibration range the application states, over 255."""
    lo, hi = applied.bound.input_range
    return (hi - lo) / 255.0


def _check_bound(x: np.ndarray, got: np.ndarray, d: float) -> None:
    """The stated float bound: the first index of the row's maximum wherever no other entry is
    within d of it; else a value between the first close entry's index and the maximum's."""
    first = x.argmax(-1)
    close = x >= x.max(-1, keepdims=True) - d
    earliest = close.argmax(-1)
    assert np.all((got >= earliest - 1e-5) & (got <= first + 1e-5))
    clear = close.sum(-1) == 1
    assert clear.mean() > 0.9  # the exact case covers most pixels
    np.testing.assert_array_equal(got[clear], first[clear])


def test_the_fused_form_replaces_argmax_within_its_bound(plain, rewritten):
    assert set(op_types(rewritten.model)) == FUSED_OPS, op_types(rewritten.model)
    [applied] = rewritten.applied
    d = _step(applied)
    assert 0.0 < d <= 4.0 / 255 and applied.bound.max_abs_error == SHAPE[-1] - 1
    for feed in _samples(4, 1):
        got = rewritten.model.run(feed)["output_0"]
        assert got.dtype == np.float32
        _check_bound(2.0 * feed["x0"], got, d)
    ties = {"x0": np.random.default_rng(2).integers(-2, 3, SHAPE).astype("f4")}  # many ties
    np.testing.assert_array_equal(rewritten.model.run(ties)["output_0"],
                                  plain.run(ties)["output_0"])  # the first index, as ArgMax


def test_keras_argmax_prologue_goes_with_it():
    import keras

    x = keras.Input(SHAPE[1:], batch_size=1)
    model = model_from_keras(keras.Model(x, keras.ops.argmax(x * 1.0, axis=-1)))
    assert "Bitcast" in op_types(model)
    result = apply_rules(model, [RULE], data=_samples(8, 0))
    assert set(op_types(result.model)) == FUSED_OPS, op_types(result.model)
    feed = _samples(1, 3)[0]
    _check_bound(feed["x0"], result.model.run(feed)["output_0"], _step(result.applied[0]))


@pytest.mark.parametrize("fn, reason", [
    (lambda x: tf.argmax(x, axis=1), "is not the last axis"),
    (lambda x: tf.cast(tf.argmax(x, axis=-1), tf.float32) * 2.0, "would need a CAST"),
])
def test_refused_where_the_form_does_not_hold(fn, reason):
    result = apply_rules(model_from_function(fn, [SHAPE]), [RULE], data=_samples(4, 0))
    assert result.applied == []
    assert any(reason in r.reason for r in result.rejected), result.rejected


def test_refused_without_calibration_data(plain):
    result = apply_rules(plain, [RULE])
    assert result.applied == [] and "no calibration values" in result.rejected[0].reason


def _int8(model, data) -> object:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    conv = tf.lite.TFLiteConverter.from_concrete_functions([model.concrete_function()])
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([d["x0"]] for d in data)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    it = Interpreter(model_content=conv.convert(), experimental_op_resolver_type=OpResolverType
                     .BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    return it


def _run(it, x: np.ndarray) -> np.ndarray:
    i, o = it.get_input_details()[0], it.get_output_details()[0]
    it.set_tensor(i["index"], x)
    it.invoke()
    y = it.get_tensor(o["index"]).astype(np.float64)
    if o["quantization"][0]:
        y = (y - o["quantization"][1]) * o["quantization"][0]
    return y


def test_int8_the_fused_form_answers_as_arg_max_does(plain, rewritten):
    """Both files calibrated alike: the fused form's int8 index (rounded) against ARG_MAX's int8
    index (the same int8 logits: the same answer) and against the float arg-max (near-ties apart):
    measured at landing 1.0 and 0.9902 of 1,024 pixels (uniform noise: many near-ties)."""
    cal = _samples(32, 0)
    fused, ref = _int8(rewritten.model, cal), _int8(plain, cal)
    ops = {d["op_name"] for d in fused._get_ops_details()}
    assert ops <= {"QUANTIZE", "REDUCE_MAX", "SUB", "MINIMUM", "MUL", "DEQUANTIZE"}, ops
    feeds = _samples(16, 5)
    got = np.array([np.rint(_run(fused, f["x0"])) for f in feeds])
    arg = np.array([_run(ref, f["x0"]) for f in feeds])
    want = np.array([plain.run(f)["output_0"] for f in feeds])
    np.testing.assert_array_equal(got, arg)
    assert np.mean(got == want) >= 0.98
