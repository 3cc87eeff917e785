"""Which targets run TFLite's fused UNIDIRECTIONAL_SEQUENCE_LSTM, in int8 and in 16x8: measured.

A tf_keras ``LSTM(16)`` (12 steps, 8 features; batch 1) converted by the TFLite converter
straight from the Keras model, the one route that emits the fused op, in full int8 and in 16x8
(int16 activations, int8 weights); each file is given to Vela 5.2 (ethos-u55-128: how many
operators land on the NPU and why the others do not) and run in TFLite Micro's own interpreter
(a child process) against the float Keras model on 8 seeded sequences. The rewritten route
(``while_unroll``: unrolled FULLY_CONNECTED/LOGISTIC/TANH/MUL/ADD) is measured the same way.
Results: ``benchmarks/results/lstm_fused_support.{md,json}``.

    PYTHONPATH=. python benchmarks/lstm_fused_support.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
STEPS, FEATURES, UNITS = 12, 8, 16

_CONVERT = """
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf, tf_keras
tf_keras.utils.set_random_seed(0)
steps, features, units, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
inp = tf_keras.Input((steps, features), batch_size=1)
model = tf_keras.Model(inp, tf_keras.layers.Dense(4)(tf_keras.layers.LSTM(units)(inp)))
model.save(os.path.join(out, "lstm.h5"))
cal = np.load(os.path.join(out, "calibration.npy"))
def rep():
    for i in range(len(cal)):
        yield [cal[i:i + 1]]
for mode in ("int8", "16x8"):
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = rep
    conv.target_spec.supported_ops = [
        tf.lite.OpsSet.TFLITE_BUILTINS_INT8 if mode == "int8" else
        tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    try:
        data = conv.convert()
    except Exception as exc:
        open(os.path.join(out, f"fused_{mode}.err"), "w").write(str(exc)[:500])
        continue
    open(os.path.join(out, f"fused_{mode}.tflite"), "wb").write(data)
data = np.load(os.path.join(out, "data.npy"))
np.save(os.path.join(out, "reference.npy"), model.predict(data, batch_size=1, verbose=0))
"""


def _ops(path: Path) -> list[tuple[str, str]]:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path))
    td = it.get_tensor_details()
    return [(o["op_name"], td[o["outputs"][0]]["dtype"].__name__)
            for o in it._get_ops_details()]


def _vela(path: Path, out: Path) -> dict[str, Any]:
    from rewriter.targets.vela import run_vela

    res = run_vela(str(path), "ethos-u55-128", out / f"vela_{path.stem}").to_json()
    return {"npu_ops": res.get("npu_ops"), "cpu_ops": res.get("cpu_ops"),
            "cpu_reasons": res.get("cpu_reasons")}


def _tflm(path: Path, data: np.ndarray, reference: np.ndarray) -> dict[str, Any]:
    from rewriter.verify.runners import RunnerError
    from rewriter.verify.tflm import TflmRunner

    try:
        runner = TflmRunner(path)
        got = runner.run_many([{runner.inputs[0].name: data[i:i + 1]} for i in range(len(data))])
    except RunnerError as exc:
        return {"runs": False, "error": str(exc)[:300]}
    g = np.concatenate([np.ravel(next(iter(o.values()))) for o in got]).astype(np.float64)
    w = np.ravel(reference).astype(np.float64)
    return {"runs": True, "cosine": round(float(g @ w / (np.linalg.norm(g) * np.linalg.norm(w))),
                                          5)}


def _unrolled(work: Path) -> Path:
    """The same Keras model through ``rewrite --target tflm`` (int8, unrolled)."""
    from rewriter.frontends import load_model
    from rewriter.job.options import JobOptions
    from rewriter.job.pipeline import run_job
    from rewriter.targets import load_target

    out = work / "rewrite_tflm"
    out.mkdir(exist_ok=True)
    run_job(load_model(work / "lstm.h5"), load_target("tflm"), out,
            JobOptions(calibration=str(work / "calibration.npy"), inputs=str(work / "data.npy"),
                       calibration_samples=64))
    return out / "model.tflite"


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from tests.families import _tones

    rng = np.random.default_rng(1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="lstm_fused_") as tmp:
        work = Path(tmp)
        cal = np.stack([2 * _tones(rng, STEPS, FEATURES) - 1 for _ in range(64)]).astype("f4")
        data = np.stack([2 * _tones(rng, STEPS, FEATURES) - 1 for _ in range(8)]).astype("f4")
        np.save(work / "calibration.npy", cal)
        np.save(work / "data.npy", data)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        subprocess.run([sys.executable, "-c", _CONVERT, str(STEPS), str(FEATURES), str(UNITS),
                        str(work)], check=True, env=env, capture_output=True, timeout=900)
        reference = np.load(work / "reference.npy")
        files = {m: work / f"fused_{m}.tflite" for m in ("int8", "16x8")}
        files["unrolled int8 (rewrite)"] = _unrolled(work)
        for mode, path in files.items():
            if not path.exists():
                err = (work / f"fused_{mode}.err")
                rows.append({"file": mode, "converted": False,
                             "error": err.read_text() if err.exists() else "no file"})
                continue
            ops = _ops(path)
            lstm = [dt for op, dt in ops if op == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
            rows.append({"file": mode, "converted": True, "operators": len(ops),
                         "fused_lstm": lstm, "vela": _vela(path, work),
                         "tflm": _tflm(path, data, reference)})
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "lstm_fused_support.json").write_text(json.dumps(rows, indent=1) + "\n")
    (RESULTS / "lstm_fused_support.md").write_text(_render(rows))
    print(_render(rows))
    return 0


def _render(rows: list[dict[str, Any]]) -> str:
    lines = ["# UNIDIRECTIONAL_SEQUENCE_LSTM on Vela 5.2 and TFLite Micro, measured", "",
             f"tf_keras LSTM({UNITS}), {STEPS} steps x {FEATURES} features, batch 1; "
             "`PYTHONPATH=. python benchmarks/lstm_fused_support.py`.", "",
             "| file | ops | fused LSTM (activation dtype) | Vela ethos-u55-128 | "
             "TFLite Micro |", "|---|---|---|---|---|"]
    for r in rows:
        if not r["converted"]:
            err = " ".join(r["error"].split())[:160]
            lines.append(f"| {r['file']} | conversion failed: {err} | | | |")
            continue
        v, t = r["vela"], r["tflm"]
        reasons = "; ".join(f"{c.get('op')}: {' '.join(c.get('reasons') or [])[:90]}"
                            for c in v.get("cpu_reasons") or [])
        vela = f"{v['npu_ops']} NPU / {v['cpu_ops']} CPU" + (f" ({reasons})" if reasons else "")
        tflm = f"runs, cosine {t['cosine']}" if t["runs"] else f"fails: {t['error']}"
        fused = ", ".join(r["fused_lstm"]) or "none (unrolled)"
        lines.append(f"| {r['file']} | {r['operators']} | {fused} | {vela} | {tflm} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
