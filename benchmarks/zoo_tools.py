"""The baselines of ``benchmarks/zoo.py``, each run as a process of its own (so its wall time and
peak memory are its own), and the judge that scores any file like the job scores its artifact.

Each baseline starts from the user's own model file, loaded the way its users load it: a Keras 3
file (``.keras``) by ``keras``, a Keras 2 ``.h5`` by ``tf_keras`` (the package that wrote it).
Nothing of ``rewriter`` touches the model on the way (no front end, no exporter of ours).

* ``plain-tflite CASE OUT``: the plain TFLite converter as its documentation shows it: a Keras 3
  model exported with ``model.export(..., format="tf_saved_model")`` (batch 1, as the job
  converts) and ``tf.lite.TFLiteConverter.from_saved_model``; a tf_keras model by
  ``tf.lite.TFLiteConverter.from_keras_model``. Full int8 with int8 input/output (the
  accelerators' setting) calibrated on the case's calibration data; no rewriting.
* ``plain-onnx CASE OUT``: tf2onnx through its documented API on the original model:
  ``tf2onnx.convert.from_keras(model, input_signature=<batch 1>, opset=17, output_path=OUT)``.
* ``judge CASE FILE T1,T2,..``: the file against each target the way the job judges its artifact
  (op table, Edge TPU cut and "might not be mapped" ops, Vela for Ethos-U;
  :func:`benchmarks.real_models.judge_baseline`) and its outputs against the original float model
  on the case's verification data (cosine, max error relative to the output scale); one JSON
  object on stdout.

onnx2tf runs in a Python of its own (``benchmarks/zoo.py``: ``ONNX2TF_SETUP``); ``zoo.py`` calls
its command line directly on the file ``plain-onnx`` wrote.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _case(case_dir: Path) -> Any:
    from benchmarks.real_models import Case

    info = json.loads((case_dir / "case.json").read_text())
    return Case(info["name"], case_dir / info["model"], case_dir / info["calibration"],
                case_dir / info["data"], info["note"], (0.0, 1.0))


def load_user_model(path: Path) -> Any:
    """The model as its users load it: ``.h5`` (Keras 2) by tf_keras, anything else by Keras 3."""
    if path.suffix in (".h5", ".hdf5"):
        import tf_keras

        return tf_keras.models.load_model(path, compile=False)
    import keras

    return keras.models.load_model(path, compile=False)


def _specs(km: Any) -> list[Any]:
    import tensorflow as tf

    return [tf.TensorSpec((1, *i.shape[1:]), i.dtype, name=i.name.split(":")[0])
            for i in km.inputs]


def plain_tflite(case_dir: Path, out: Path) -> dict[str, Any]:
    import time

    import keras
    import tensorflow as tf

    start = time.perf_counter()
    case = _case(case_dir)
    km = load_user_model(Path(case.path))
    cal = np.load(case.calibration)
    if isinstance(km, keras.Model):
        sm = out.parent / "plain_savedmodel"
        with contextlib.redirect_stdout(io.StringIO()):
            km.export(str(sm), format="tf_saved_model", input_signature=_specs(km))
        conv = tf.lite.TFLiteConverter.from_saved_model(str(sm))
        how = "keras: model.export(tf_saved_model, batch 1); TFLiteConverter.from_saved_model"
    else:
        conv = tf.lite.TFLiteConverter.from_keras_model(km)
        how = "tf_keras: TFLiteConverter.from_keras_model"
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([x[None].astype(np.float32)] for x in cal)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = tf.int8
    conv.inference_output_type = tf.int8
    try:
        out.write_bytes(conv.convert())
    except Exception as exc:  # the converter raises many types; a failure is a result
        return {"ok": False, "how": how, "error": str(exc).strip().splitlines()[-1][:300],
                "seconds": round(time.perf_counter() - start, 2)}
    return {"ok": True, "how": how, "path": str(out),
            "seconds": round(time.perf_counter() - start, 2)}


def plain_onnx(case_dir: Path, out: Path) -> dict[str, Any]:
    import time

    import tf2onnx

    start = time.perf_counter()
    km = load_user_model(Path(_case(case_dir).path))
    how = "tf2onnx.convert.from_keras(model, input_signature=<batch 1>, opset=17)"
    try:
        tf2onnx.convert.from_keras(km, input_signature=_specs(km), opset=17,
                                   output_path=str(out))
    except Exception as exc:  # a failed export is a result
        out.unlink(missing_ok=True)
        return {"ok": False, "how": how,
                "error": (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]}
    return {"ok": True, "how": how, "path": str(out),
            "seconds": round(time.perf_counter() - start, 2)}


def judge(case_dir: Path, path: str, targets: list[str]) -> dict[str, Any]:
    from benchmarks.real_models import _guard, baseline_accuracy, judge_baseline

    case = _case(case_dir)
    res: dict[str, Any] = {"accuracy": _guard(baseline_accuracy, path, case), "targets": {}}
    for t in targets:
        res["targets"][t] = _guard(judge_baseline, path, t, Path(path).parent / f"judge_{t}")
    return res


def sample_data(path: Path) -> None:
    """onnx2tf reads ``calibration_image_sample_data_20x128x128x3_float32.npy`` from its working
    directory, and downloads it when absent (for its own output check on RGB models): write
    seeded structured images there instead, so nothing is downloaded."""
    from benchmarks.real_models import structured_images

    np.save(path, structured_images(20, (128, 128, 3), 7, (0.0, 1.0)))


def main(argv: list[str]) -> int:
    cmd, *rest = argv
    if cmd == "plain-tflite":
        res = plain_tflite(Path(rest[0]), Path(rest[1]))
    elif cmd == "plain-onnx":
        res = plain_onnx(Path(rest[0]), Path(rest[1]))
    elif cmd == "judge":
        res = judge(Path(rest[0]), rest[1], rest[2].split(","))
    elif cmd == "sample-data":
        sample_data(Path(rest[0]))
        res = {"ok": True}
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    sys.stdout.write(json.dumps(res, default=str) + "\n")
    return 0


if __name__ == "__main__":
    with contextlib.redirect_stderr(io.StringIO()) if os.environ.get("ZOO_QUIET") else \
            contextlib.nullcontext():
        raise SystemExit(main(sys.argv[1:]))
