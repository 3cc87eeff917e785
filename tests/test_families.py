"""Model families end to end on every target (issue 16's "done when"): detector, audio,
recurrent (LSTM, GRU keyword spotter, Bidirectional, functional While, TF1 dynamic_rnn) and
tf_keras grouped convolutions.

Per target the proof is the target's own: Edge TPU table with no cut; Vela 0 CPU operators;
TFLite Micro's own interpreter runs the int8 file (in a subprocess) and matches; int8 cosine
>= 0.98 against the original float model; ONNX: onnx.checker and ONNX Runtime within 1e-4
relative. Small sizes here; bigger ones (and the full recurrent matrix) under ``slow``. Also: a
dynamic sequence length is a usage error naming ``--input-shape``, and a loop that cannot be
unrolled is reported with the reason.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.model_families import tflm_cosine

from .families import FAMILIES, LOGMEL, audio_saved_model, build, detector, family_data, waveforms

INT8_MIN_COSINE = 0.98
TARGETS = ["edgetpu", "ethos-u55-128", "tflm", "onnx"]


def _job(cli, model, target, out, *extra) -> tuple[int, dict]:
    code, _, err = cli("run", model, "--target", target, "-o", out, "-q", *extra)
    report_path = out / "report.json"
    assert report_path.exists(), err
    return code, json.loads(report_path.read_text())


def _assert_deployed(report: dict, target: str, out, samples: np.ndarray | None = None) -> None:
    """The target's own proof that every op is placed and the numbers hold."""
    assert report["ok"] is True, report["summary"]
    art = report["equivalence"]["artifact"]
    if target == "onnx":
        import onnx

        onnx.checker.check_model(onnx.load(str(out / "model.onnx")))
        assert all(o["max_rel_error"] <= 1e-4 for o in art["outputs"].values())
        return
    assert all(o["cosine"] >= INT8_MIN_COSINE for o in art["outputs"].values())
    if target == "edgetpu":
        assert report["placement_after"]["cut"] is None
    if target.startswith("ethos-u"):
        assert report["vela"]["cpu_ops"] == 0
    if target == "tflm":
        _assert_tflm_runs(report, out, samples)


def _assert_tflm_runs(report: dict, out, samples) -> None:
    """TFLite Micro's interpreter (not LiteRT) runs the file and matches the float model."""
    cosine = tflm_cosine(out, np.asarray(samples)[:, 0])
    assert isinstance(cosine, float) and cosine >= INT8_MIN_COSINE, cosine


@pytest.fixture(scope="module")
def det_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("det")
    detector().save(root / "det.keras")
    detector(legacy=True).save(root / "det_tfkeras.h5")
    images = np.random.default_rng(0).uniform(-1, 1, (16, 1, 32, 32, 3)).astype(np.float32)
    np.save(root / "images.npy", images[:, 0])
    return root, images


@pytest.fixture(scope="module")
def audio_files(tmp_path_factory):
    from rewriter.frontends import load_model

    root = tmp_path_factory.mktemp("audio")
    saved = audio_saved_model(root / "audio")
    whole = load_model(saved)
    tensor = next(f"{n.name}:0" for n in whole.graph_def.node if n.name.endswith(LOGMEL))
    logmel = np.concatenate([whole.run({"waveform": w}, fetches=[tensor])[tensor]
                             for w in waveforms(16)])
    np.save(root / "logmel.npy", logmel)
    return saved, root / "logmel.npy", logmel[:, None]


DETECTOR_CASES = [("det.keras", t) for t in TARGETS] + [("det_tfkeras.h5", "edgetpu")]


@pytest.mark.parametrize(("name", "target"), DETECTOR_CASES)
def test_detector_is_placed_and_matches(det_files, name, target, tmp_path, cli):
    """Keras 3 on every target; tf_keras (.h5, ResizeNearestNeighbor upsampling) where the
    Keras 3 form needed a rewrite."""
    root, images = det_files
    code, report = _job(cli, root / name, target, tmp_path,
                        "--calibration", root / "images.npy")
    assert code == 0
    _assert_deployed(report, target, tmp_path, images[:2])


@pytest.mark.slow
def test_tf_keras_detector_on_tflite_micro(det_files, tmp_path, cli):
    """The tf_keras detector (.h5) on TFLite Micro: the default run has it on the Edge TPU."""
    test_detector_is_placed_and_matches(det_files, "det_tfkeras.h5", "tflm", tmp_path, cli)


@pytest.mark.parametrize("target", TARGETS)
def test_audio_model_after_its_front_end_is_placed_and_matches(audio_files, target, tmp_path,
                                                               cli):
    saved, data, samples = audio_files
    code, report = _job(cli, saved, target, tmp_path, "--inputs", LOGMEL,
                        "--calibration", data)
    assert code == 0
    _assert_deployed(report, target, tmp_path, samples[:2])


def test_whole_audio_model_front_end_is_placed_on_the_edge_tpu(audio_files, tmp_path, cli):
    """With its STFT front end inside, on keyword-like clips: stft_as_conv removes RFFT,
    ComplexAbs and the framing GatherV2, nothing is left unplaced and the Edge TPU graph has no
    cut; the verdict is the int8 cosine's (README "Model families": a log-mel's range)."""
    saved, _, _ = audio_files
    waves = tmp_path / "waves.npy"
    np.save(waves, waveforms(16)[:, 0])
    code, report = _job(cli, saved, "edgetpu", tmp_path / "out", "--calibration", waves)
    [rfft] = [u for u in report["unsupported_before"] if u["op"] == "RFFT"]
    assert rfft["fix"] == "stft_as_conv"
    assert "stft_as_conv" in {r["rule"] for r in report["rules_applied"]}
    assert not report["unsupported_after"] and report["placement_after"]["cut"] is None
    cosine = min(o["cosine"] for o in report["equivalence"]["artifact"]["outputs"].values())
    assert code == (0 if cosine >= INT8_MIN_COSINE else 1) and cosine > 0.9, cosine


#: Recurrent and grouped-conv models in the default run: every target on several models; the
#: rest of the matrix and RegNetX002 are ``slow``.
#: (The GRU keyword spotter, the Bidirectional LSTM and tf_keras's LSTM are the costliest
#: jobs of the matrix: they run under ``slow`` with the rest, and their unrolling is proven
#: exact in the default run by tests/rules/test_while_unroll.py.)
RECURRENT_CASES = [
    ("keras3_lstm", "edgetpu"), ("keras3_lstm", "ethos-u55-128"), ("keras3_lstm", "tflm"),
    ("tf_keras_bigru", "onnx"), ("graph_while_gru", "ethos-u55-128"),
    ("tf1_dynamic_rnn_lstm", "tflm"),
    ("tf_keras_grouped_conv", "edgetpu"), ("tf_keras_grouped_conv", "ethos-u55-128"),
]
RECURRENT_FULL = [(f, t) for f, fam in FAMILIES.items() for t in TARGETS
                  if (f, t) not in RECURRENT_CASES and not fam.slow]


@pytest.fixture(scope="module")
def family_root(tmp_path_factory):
    return tmp_path_factory.mktemp("families")


def _family_job(cli, root, name, target, out) -> None:
    """``rewrite MODEL --target T`` with the family's representative data, held to the bar."""
    model = build(name, root)
    cal, data = root / f"{name}_cal.npy", root / f"{name}_data.npy"
    if not cal.exists():
        np.save(cal, family_data(name, 128, 1))
        np.save(data, family_data(name, 8, 2))
    code, report = _job(cli, model, target, out, "--calibration", cal,
                        "--calibration-samples", 128, "--data", data)
    assert code == 0, report["summary"]
    if FAMILIES[name].data != "image":
        assert any(r["rule"] == "while_unroll" for r in report["rules_applied"])
    _assert_deployed(report, target, out, np.load(data)[:2, None])


@pytest.mark.parametrize(("name", "target"), RECURRENT_CASES)
def test_recurrent_and_grouped_conv_are_placed_and_match(family_root, name, target, tmp_path,
                                                         cli):
    _family_job(cli, family_root, name, target, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "target"), RECURRENT_FULL)
def test_recurrent_and_grouped_conv_full_matrix(family_root, name, target, tmp_path, cli):
    _family_job(cli, family_root, name, target, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_tf_keras_regnetx002_is_placed_and_matches(family_root, target, tmp_path, cli):
    _family_job(cli, family_root, "tf_keras_regnetx002", target, tmp_path)


def test_dynamic_sequence_length_is_a_usage_error_naming_the_input_shape(tmp_path, cli):
    import keras

    inp = keras.Input((None, 8), name="sequence")
    keras.Model(inp, keras.layers.LSTM(4)(inp)).save(tmp_path / "dyn.keras")
    code, out, err = cli(tmp_path / "dyn.keras", "--target", "edgetpu", "-o", tmp_path / "o")
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("error: input 'sequence' has dynamic")
    assert "--input-shape sequence:1,N,8" in err and "Traceback" not in err


def test_check_names_the_loop_and_the_rule_that_unrolls_it(family_root, cli):
    model = build("keras3_lstm", family_root)
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
