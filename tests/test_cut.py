"""``--inputs``/``--outputs`` cut points in every front end, the main job and ``check``.

An audio SavedModel starts after its spectrogram front end (``--inputs logmel``), a detector
ends before its post-processing (``--outputs`` naming a Keras layer or a graph node). The cut
graph computes exactly the tensors of the whole graph; bad cuts are exit 2 with the reason.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rewriter.errors import UserError
from rewriter.frontends import LoadOptions, load_model

from .families import LOGMEL, audio_saved_model, detector, detector_with_nms, waveforms


@pytest.fixture(scope="module")
def audio(tmp_path_factory):
    return audio_saved_model(tmp_path_factory.mktemp("audio") / "audio")


@pytest.fixture(scope="module")
def det_keras(tmp_path_factory):
    path = tmp_path_factory.mktemp("det") / "det.keras"
    detector().save(path)
    return path


def _logmel_of(audio_path, wave):
    """The log-mel tensor of the whole model on ``wave`` (the reference for the cut model)."""
    whole = load_model(audio_path)
    return whole.run({"waveform": wave}, fetches=[_tensor(whole, LOGMEL)])


def _tensor(model, suffix):
    return next(f"{n.name}:0" for n in model.graph_def.node if n.name.endswith("/" + suffix)
                or n.name == suffix)


def test_inputs_starts_a_saved_model_after_its_spectrogram(audio):
    whole = load_model(audio)
    cut = load_model(audio, LoadOptions(inputs=[LOGMEL]))
    assert [s.name for s in cut.inputs] == [LOGMEL] and cut.inputs[0].shape == (1, 30, 16)
    assert not {"RFFT", "ComplexAbs", "Log"} & set(cut.op_histogram())
    wave = waveforms(1)[0]
    logmel = next(iter(_logmel_of(audio, wave).values()))
    got = cut.run({LOGMEL: logmel})["logits"]
    want = whole.run({"waveform": wave})["logits"]
    np.testing.assert_array_equal(got, want)  # the same tensors: exact
    assert any("starts at --inputs logmel" in n for n in cut.source.notes)


def test_outputs_ends_a_keras_model_at_layers(det_keras):
    import keras

    cut = load_model(det_keras, LoadOptions(outputs=["box_0", "cls_1"]))
    assert [o.name for o in cut.outputs] == ["box_0", "cls_1"]
    assert cut.outputs[0].shape == (1, 8, 8, 8) and cut.outputs[1].shape == (1, 4, 4, 6)
    assert "Sigmoid" not in cut.op_histogram()  # the heads' reshape/concat/sigmoid are gone
    assert not any(n.name.split("/")[1:2] in (["boxes_1"], ["scores_1"])
                   for n in cut.graph_def.node)
    k = keras.saving.load_model(det_keras)
    sub = keras.Model(k.inputs, [k.get_layer("box_0").output, k.get_layer("cls_1").output])
    x = np.random.default_rng(0).uniform(-1, 1, (1, 32, 32, 3)).astype(np.float32)
    got = cut.run({"image": x})
    for name, want in zip(["box_0", "cls_1"], sub(x)):
        np.testing.assert_allclose(got[name], np.asarray(want), rtol=1e-5, atol=1e-6)


def test_inputs_and_outputs_on_a_frozen_graph(tmp_path, det_keras):
    """A frozen .pb: --inputs inside the graph (not a Placeholder) and --outputs together."""
    whole = load_model(det_keras)
    pb = tmp_path / "det.pb"
    pb.write_bytes(whole.graph_def.SerializeToString())
    start = _tensor(whole, "Relu").split(":")[0]  # the first conv's output
    cut = load_model(pb, LoadOptions(inputs=[start], outputs=[whole.outputs[1].node]))
    assert cut.inputs[0].shape == (1, 16, 16, 8) and len(cut.outputs) == 1
    x = np.random.default_rng(1).uniform(-1, 1, (1, 32, 32, 3)).astype(np.float32)
    feat = whole.run({"image": x}, fetches=[f"{start}:0"])[f"{start}:0"]
    got = next(iter(cut.run({cut.inputs[0].name: feat}).values()))
    np.testing.assert_array_equal(got, whole.run({"image": x})["scores"])


def test_unknown_name_is_refused_with_the_closest_names(audio):
    with pytest.raises(UserError, match=r"--inputs names 'logmell'.*closest: .*logmel"):
        load_model(audio, LoadOptions(inputs=["logmell"]))


def test_a_cut_that_does_not_separate_the_model_is_refused(det_keras):
    """Cutting one branch of the fusion add leaves the image input read by the other."""
    with pytest.raises(UserError, match=r"does not separate the model from its input 'image'"):
        load_model(det_keras, LoadOptions(inputs=["box_1"]))


def test_check_starts_after_the_front_end(audio, cli):
    """The whole audio model fails on Ethos-U (RFFT is not on the NPU); from the log-mel on,
    nothing is unsupported. (The job from the log-mel on, Vela 0 CPU operators and int8
    cosine >= 0.98, is tests/test_families.py's audio test on ethos-u55-128.)"""
    code, out, _ = cli("check", audio, "--target", "ethos-u55-128", "--json")
    assert code == 1 and any("RFFT" in u["op"] for u in json.loads(out)["unsupported"])
    code, out, _ = cli("check", audio, "--target", "ethos-u55-128", "--json",
                       "--inputs", LOGMEL)
    assert code == 0, out
    assert json.loads(out)["unsupported"] == []


@pytest.mark.slow
def test_main_job_starts_after_the_front_end(audio, tmp_path, cli):
    """The job from the log-mel on: Vela 0 CPU operators, int8 cosine >= 0.99 on log-mel
    data, the artifact's input is the log-mel."""
    wave = waveforms(8)
    logmel = np.concatenate([next(iter(_logmel_of(audio, w).values())) for w in wave])
    data = tmp_path / "logmel.npy"
    np.save(data, logmel[:, None] if logmel.ndim == 2 else logmel)
    outdir = tmp_path / "out"
    code, _, err = cli("run", audio, "--target", "ethos-u55-128", "--inputs", LOGMEL,
                       "--calibration", data, "-o", outdir, "-q")
    report = json.loads((outdir / "report.json").read_text())
    assert code == 0, (err, report["summary"])
    assert report["vela"]["cpu_ops"] == 0
    assert report["equivalence"]["artifact"]["outputs"]["logits"]["cosine"] >= 0.99
    assert report["signature"]["inputs"][0]["name"] == LOGMEL


def test_nms_model_ends_before_post_processing(tmp_path):
    saved = detector_with_nms(tmp_path / "nms")
    cut = load_model(saved, LoadOptions(outputs=["boxes_raw", "scores_raw"]))
    assert [o.name for o in cut.outputs] == ["boxes_raw", "scores_raw"]
    assert not any("NonMaxSuppression" in op for op in cut.op_histogram())
