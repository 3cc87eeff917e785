"""hard_swish_unfused: x*relu6(x+3)/6 becomes (x/6)*relu6(x+3), which TFLite does not fuse."""

from __future__ import annotations

import keras
import tensorflow as tf

from rewriter.rules.hard_swish_unfused import HardSwishUnfused
from rewriter.testing import assert_close_rel, dense_line, op_types
from tests.rules._activation_checks import outputs, rewritten, tflite_ops

RULE = HardSwishUnfused()


def hard_swish(x):
    return keras.activations.hard_swish(x)


def test_replaces_the_keras3_hard_swish_and_its_division():
    _, result = rewritten(hard_swish, RULE, (8,))
    assert dict(op_types(result.model)) == {"Mul": 2, "AddV2": 1, "Maximum": 1, "Minimum": 1}
    assert len(result.applied) == 1  # and does not match its own output again


def test_matches_the_tf_keras_mobilenetv3_spelling():
    _, result = rewritten(lambda x: x * (tf.nn.relu6(x + 3.0) * (1.0 / 6.0)), RULE, (8,))
    assert len(result.applied) == 1


def test_does_not_match_a_gate_of_another_tensor():
    """Squeeze-excite multiplies z by hard_sigmoid(y): not a hard swish."""
    _, result = rewritten(lambda x: (x * 2.0) * (tf.nn.relu6(x + 3.0) / 6.0), RULE, (8,))
    assert result.applied == [] and result.rejected == []


def test_does_not_fire_when_the_relu6_is_also_read_elsewhere():
    def shared(x):
        r = tf.nn.relu6(x + 3.0)
        return x * (r / 6.0) + r

    _, result = rewritten(shared, RULE, (8,))
    assert result.applied == []
    assert "Relu6" in result.rejected[0].reason and "also read" in result.rejected[0].reason


def test_equal_within_1e5_relative_over_minus_20_to_20():
    before, result = rewritten(hard_swish, RULE, (8001,))
    assert_close_rel(*outputs(before, result.model, dense_line(-20.0, 20.0, 8001)), rtol=1e-5)


def test_tflite_float_and_int8_have_no_hard_swish(tmp_path):
    before, result = rewritten(hard_swish, RULE)
    assert "HARD_SWISH" in tflite_ops(before, tmp_path)[0]  # the converter fuses the original
    ops, _ = tflite_ops(result.model, tmp_path)
    assert ops == {"MUL", "ADD", "MINIMUM"}
    ops8, float_ops = tflite_ops(result.model, tmp_path, "int8")
    assert "HARD_SWISH" not in ops8 and float_ops == set()


def test_edgetpu_plan_picks_it_for_the_mul_the_converter_would_fuse():
    from rewriter.rewrite.planner import plan
    from rewriter.targets import load_target

    before, _ = rewritten(hard_swish, RULE)
    assert "hard_swish_unfused" in plan(before, load_target("edgetpu"), "int8").rules


def test_ethos_u_16x8_job_unfuses_it_and_vela_places_every_op(tmp_path, cli):
    """Vela's HARD_SWISH takes 8-bit input only and the converter has no 16x8 HARD_SWISH (it
    refused the file: "Quantization to 16x8-bit not yet supported for op: 'HARD_SWISH'"): with
    ``--quantize 16x8`` on ethos-u55-128 the planner unfuses it, and every op runs on the NPU."""
    import json

    import numpy as np

    from rewriter.rewrite.planner import plan
    from rewriter.targets import load_target

    before, _ = rewritten(hard_swish, RULE)
    ethos = load_target("ethos-u55-128")
    assert "hard_swish_unfused" in plan(before, ethos, "16x8").rules
    assert "hard_swish_unfused" not in plan(before, ethos, "int8").rules  # int8: Vela's LUT

    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 3), batch_size=1)
    x = keras.layers.Activation("hard_swish")(keras.layers.Conv2D(8, 3, padding="same")(inp))
    x = keras.layers.Conv2D(4, 3, padding="same")(x)
    keras.Model(inp, keras.layers.Activation("hard_swish")(x)).save(tmp_path / "m.keras")
    np.save(tmp_path / "cal.npy", np.random.default_rng(1).normal(0, 2, (16, 8, 8, 3))
            .astype(np.float32))
    code, out, err = cli(tmp_path / "m.keras", "--target", "ethos-u55-128", "--quantize", "16x8",
                         "--calibration", tmp_path / "cal.npy", "-o", tmp_path / "out", "-q")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert code == 0, out + err
    assert "hard_swish_unfused" in [r["rule"] for r in report["rules_applied"]]
    assert "HARD_SWISH" not in report["artifact_ops"] and "MINIMUM" in report["artifact_ops"]
    assert report["vela"]["cpu_ops"] == 0 and report["vela"]["npu_ops"] > 0, report["vela"]
