"""Detector and audio families end to end on every target (issue 16's "done when").

Per target the proof is the target's own: Edge TPU table with no cut; Vela 0 CPU operators;
TFLite Micro's own interpreter runs the int8 file (in a subprocess) and matches; int8 cosine
>= 0.98 against the original float model; ONNX: onnx.checker and ONNX Runtime within 1e-4
relative. Small sizes here; bigger ones under ``slow``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from .families import LOGMEL, audio_saved_model, detector, waveforms

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
    """TFLite Micro's interpreter (not LiteRT) runs the file and matches the float original."""
    from rewriter.frontends import load_model
    from rewriter.verify.runners import rename_outputs
    from rewriter.verify.tflm import TflmRunner

    model = load_model(out / "saved_model")  # the rewritten float model the file came from
    name = model.inputs[0].name
    feeds = [{name: s} for s in samples]
    got = TflmRunner(out / "model.tflite").run_many(feeds)
    assert len(got) == len(feeds)
    for feed, outputs in zip(feeds, got):
        want = model.run(feed)
        outputs = rename_outputs(outputs, list(want))
        for key, value in want.items():
            a, b = np.ravel(outputs[key]).astype(np.float64), np.ravel(value).astype(np.float64)
            cosine = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
            assert cosine >= INT8_MIN_COSINE, (key, cosine)


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


DETECTOR_CASES = [("det.keras", t) for t in TARGETS] + [("det_tfkeras.h5", "edgetpu"),
                                                         ("det_tfkeras.h5", "tflm")]


@pytest.mark.parametrize(("name", "target"), DETECTOR_CASES)
def test_detector_is_placed_and_matches(det_files, name, target, tmp_path, cli):
    """Keras 3 on every target; tf_keras (.h5, ResizeNearestNeighbor upsampling) where the
    Keras 3 form needed a rewrite."""
    root, images = det_files
    code, report = _job(cli, root / name, target, tmp_path,
                        "--calibration", root / "images.npy")
    assert code == 0
    _assert_deployed(report, target, tmp_path, images[:2])


@pytest.mark.parametrize("target", TARGETS)
def test_audio_model_after_its_front_end_is_placed_and_matches(audio_files, target, tmp_path,
                                                               cli):
    saved, data, samples = audio_files
    code, report = _job(cli, saved, target, tmp_path, "--inputs", LOGMEL,
                        "--calibration", data)
    assert code == 0
    _assert_deployed(report, target, tmp_path, samples[:2])


def test_whole_audio_model_names_what_no_rule_places(audio_files, tmp_path, cli):
    """With its STFT front end the model is exit 1 on the Edge TPU, no traceback: the report
    names RFFT with the target's reason and says no rule removes it."""
    saved, _, _ = audio_files
    code, report = _job(cli, saved, "edgetpu", tmp_path)
    assert code == 1 and report["ok"] is False
    [rfft] = [u for u in report["unsupported_before"] if u["op"] == "RFFT"]
    assert rfft["reason"] and rfft["fix"] is None and "no rule" in rfft["why"]
