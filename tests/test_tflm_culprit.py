"""A file TFLite Micro aborts on is not placed (issue 28): the operator it aborts at is found by
bisecting the file's operator prefixes (:func:`rewriter.verify.tflm_culprit.failing_operator`),
and the job lists it under ``unsupported_after`` (``tests/test_family_masks.py``, slow)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.testing import model_from_function

pytest.importorskip("tflite_micro")


def _int8_file(fn, shape, path):
    from rewriter.export.tflite import export_tflite

    model = model_from_function(fn, [shape])
    rng = np.random.default_rng(0)
    export_tflite(model, path, quantize="int8",
                  calibration=[{"x0": rng.normal(0, 1, shape).astype("f4")} for _ in range(8)])
    return path


def test_the_operator_tflite_micro_aborts_on_is_named(tmp_path):
    from rewriter.verify.tflm_culprit import failing_operator

    w = np.random.default_rng(1).normal(0, 0.3, (8, 16)).astype("f4")
    aborts = _int8_file(lambda x: tf.nn.softmax(tf.where(tf.matmul(x, w) > 0.5, tf.matmul(x, w),
                                                         -1e9)), (16, 8), tmp_path / "a.tflite")
    found = failing_operator(aborts)
    assert found is not None and found[1] == "GREATER", found  # SIGABRT, no message (TFLM)
    runs = _int8_file(lambda x: tf.nn.relu(tf.matmul(x, w)), (16, 8), tmp_path / "b.tflite")
    assert failing_operator(runs) is None
