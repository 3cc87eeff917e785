"""int8 error of the Edge TPU LayerNorm form (layernorm_l2norm) against layernorm_decompose.

One Keras LayerNormalization on [1, 8, 8, C] (x ~ N(0, 2), gamma in [0.5, 2], beta ~ N(0, 1),
eps 1e-6), rewritten by each rule, converted to full int8 with int8 I/O calibrated on 64 samples
of the same distribution, run with LiteRT on 16 other samples: rms error / rms output and cosine
against the float original. layernorm_decompose keeps RSQRT (quantized as TFLite does it), which
the Edge TPU lacks; it is the reference for what int8 costs anyway. The Edge TPU table is checked
on every layernorm_l2norm file (every documented limitation, no warning).

    PYTHONPATH=. python benchmarks/layernorm_edgetpu_int8.py [--channels 16,96,384,768]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

RULES = ("layernorm_l2norm", "layernorm_decompose")


def _model(c: int, rng: np.random.Generator):
    import keras

    from rewriter.testing import model_from_keras

    inp = keras.Input((8, 8, c), batch_size=1)
    ln = keras.layers.LayerNormalization(epsilon=1e-6)
    km = keras.Model(inp, ln(inp))
    ln.set_weights([rng.uniform(0.5, 2.0, c).astype("f4"), rng.normal(0, 1, c).astype("f4")])
    return model_from_keras(km)


def _int8_error(model, rule: str, calib: np.ndarray, data: np.ndarray, tmp: Path):
    from ai_edge_litert.interpreter import Interpreter

    from rewriter.export.tflite import export_tflite
    from rewriter.rewrite.passes import apply_rules
    from rewriter.targets import load_target

    name = model.inputs[0].name
    rewritten = apply_rules(model, [rule]).model
    path = tmp / f"{rule}.tflite"
    export_tflite(rewritten, path, quantize="int8", int8_io=True,
                  calibration=[{name: x[None]} for x in calib])
    it = Interpreter(model_path=str(path))
    it.allocate_tensors()
    ind, outd = it.get_input_details()[0], it.get_output_details()[0]
    (si, zi), (so, zo) = ind["quantization"], outd["quantization"]
    got, want = [], []
    for x in data:
        q = np.clip(np.round(x[None] / si + zi), -128, 127).astype(np.int8)
        it.set_tensor(ind["index"], q)
        it.invoke()
        got.append((it.get_tensor(outd["index"]).astype(np.float64) - zo) * so)
        want.append(model.run({name: x[None]})[model.outputs[0].name].astype(np.float64))
    g, w = np.concatenate(got).ravel(), np.concatenate(want).ravel()
    rel = float(np.sqrt(np.mean((g - w) ** 2)) / np.sqrt(np.mean(w ** 2)))
    cos = float(g @ w / (np.linalg.norm(g) * np.linalg.norm(w)))
    check = load_target("edgetpu").check_artifact(str(path))
    return rel, cos, check.ok and not check.warnings_summary()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--channels", default="16,96,384,768")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for c in (int(v) for v in args.channels.split(",")):
            model = _model(c, rng)
            calib = rng.normal(0, 2, (64, 8, 8, c)).astype("f4")
            data = rng.normal(0, 2, (16, 8, 8, c)).astype("f4")
            rows.append((c, [_int8_error(model, r, calib, data, Path(tmp)) for r in RULES]))
    print("| C | " + " | ".join(f"{r}: rms err / rms out, cosine" for r in RULES)
          + " | l2norm file passes the Edge TPU table |")
    print("|---|" + "---|" * (len(RULES) + 1))
    for c, res in rows:
        cells = " | ".join(f"{rel:.3f}, {cos:.4f}" for rel, cos, _ in res)
        print(f"| {c} | {cells} | {'yes' if res[0][2] else 'NO'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
