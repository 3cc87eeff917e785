"""Recurrent and grouped-convolution models, end to end, on edgetpu, ethos-u55-128, tflm, onnx.

Each job is ``rewrite MODEL --target T`` with representative calibration data, measured by
``benchmarks/model_families.py`` (the same code that writes the README's "model families"
table) and held to issue 16's bar: every op placed (Edge TPU: no cut; Vela: 0 CPU operators;
TFLite Micro's own interpreter runs it) and int8 cosine >= 0.98 to the float original; on onnx
``onnx.checker`` passes and ONNX Runtime is within 1e-4 relative. The default run covers every
family and every target; the full matrix and RegNetX002 are ``slow``. Also: a dynamic sequence
length is a usage error naming ``--input-shape``, and a loop that cannot be unrolled is
reported with the reason.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.model_families import TARGETS, measure, passes  # noqa: E402
from models.families import FAMILIES  # noqa: E402

#: The default run: every family on at least one target, every target on several families.
DEFAULT = [
    ("keras3_lstm", "edgetpu"), ("keras3_lstm", "ethos-u55-128"), ("keras3_lstm", "tflm"),
    ("keras3_lstm", "onnx"),
    ("keras3_gru_kws", "tflm"),
    ("keras3_bilstm", "ethos-u55-128"),
    ("tf_keras_lstm", "edgetpu"),
    ("tf_keras_bigru", "onnx"),
    ("graph_while_gru", "ethos-u55-128"),
    ("tf1_dynamic_rnn_lstm", "tflm"),
    ("tf_keras_grouped_conv", "edgetpu"), ("tf_keras_grouped_conv", "ethos-u55-128"),
    ("tf_keras_grouped_conv", "tflm"), ("tf_keras_grouped_conv", "onnx"),
]
FULL = [(f, t) for f, fam in FAMILIES.items() for t in TARGETS if (f, t) not in DEFAULT]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("families")


def _check(res: dict) -> None:
    assert res["exit"] == 0, res
    assert passes(res), json.dumps(res, indent=1)[:2000]
    if FAMILIES[res["family"]].data != "image":
        assert res["rules"].get("while_unroll"), res["rules"]
    if res["target"] == "tflm":
        assert res["tflm"]["ran"] and res["tflm"]["cosine"] >= 0.98, res["tflm"]
    if res["target"].startswith("ethos"):
        assert res["vela"]["cpu"] == 0 and res["vela"]["npu"] > 0, res["vela"]


@pytest.mark.parametrize("family,target", DEFAULT)
def test_family_meets_the_bar_on_target(family, target, work):
    _check(measure(family, target, work))


@pytest.mark.slow
@pytest.mark.parametrize("family,target", [p for p in FULL if not FAMILIES[p[0]].slow])
def test_family_meets_the_bar_on_target_full_matrix(family, target, work):
    _check(measure(family, target, work))


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_tf_keras_regnetx002_meets_the_bar(target, work):
    _check(measure("tf_keras_regnetx002", target, work))


def test_dynamic_sequence_length_is_a_usage_error_naming_the_input_shape(tmp_path, cli):
    import keras

    inp = keras.Input((None, 8), name="sequence")
    keras.Model(inp, keras.layers.LSTM(4)(inp)).save(tmp_path / "dyn.keras")
    code, out, err = cli(tmp_path / "dyn.keras", "--target", "edgetpu", "-o", tmp_path / "o")
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("error: input 'sequence' has dynamic")
    assert "--input-shape sequence:1,N,8" in err and "Traceback" not in err


def test_check_names_the_loop_and_the_rule_that_unrolls_it(work, cli):
    from models.families import build

    model = build("keras3_lstm", work / "models")
    code, out, err = cli("check", model, "--target", "edgetpu", "--graph-only", "--json")
    assert code == 1 and "Traceback" not in err
    res = json.loads(out)
    loop = [u for u in res["unsupported"] if u["op"] == "While"]
    assert loop and loop[0]["fix"] == "while_unroll", res["unsupported"]
    assert "WHILE is not supported" in loop[0]["reason"]


def test_loop_that_cannot_be_unrolled_is_exit_1_with_op_reason_and_refusing_rule(tmp_path, cli):
    """A trip count computed from the data: no static unrolling exists. The job must still end
    in a report (exit 1) naming the op, the target's reason and why while_unroll refused."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
    def fn(x):
        n = tf.cast(tf.reduce_sum(tf.abs(x)) * 3.0, tf.int32)
        out = tf.while_loop(lambda i, acc: i < n,
                            lambda i, acc: (i + 1, tf.tanh(acc * 0.5 + x)), (0, x))[1]
        return tf.reshape(out, [1, 4])

    frozen = convert_variables_to_constants_v2(fn.get_concrete_function())
    (tmp_path / "loop.pb").write_bytes(frozen.graph.as_graph_def().SerializeToString())
    code, out, err = cli(tmp_path / "loop.pb", "--target", "ethos-u55-128", "-o",
                         tmp_path / "o", "--no-vela")
    assert code == 1 and "Traceback" not in err
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    loop = next(u for u in report["unsupported_before"] if u["op"] == "While")
    assert "WHILE is not supported" in loop["reason"]
    assert "while_unroll refused" in loop["why"] and "trip count is not static" in loop["why"]
    assert any(u["op"] == "WHILE" for u in report["unsupported_after"])
