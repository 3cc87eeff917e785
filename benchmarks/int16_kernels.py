"""Which ops have a 16x8 kernel (int16 activations, int8 weights), measured by running them.

Each op is a one-op (or near) tf.function converted by the TFLite converter in 16x8 mode
(``EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``, 16 seeded calibration samples,
int16 input/output), then: run in TFLite Micro's interpreter (``tflite_micro``, the build the
project pins; in a child process); compiled by Vela 5.2 for ethos-u55-128 (NPU/CPU operators).
An op the converter refuses in 16x8 is listed as such. The ``[int16]`` sections of
``op_tables/tflm.toml`` and ``op_tables/ethos-u55.toml`` cite this file
(``benchmarks/results/int16_kernels.md``).

    PYTHONPATH=. python benchmarks/int16_kernels.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cases():
    """(op, input shape, function) for each op measured."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    w33 = tf.constant(rng.normal(size=(3, 3, 4, 8)).astype(np.float32) * 0.3)
    wdw = tf.constant(rng.normal(size=(3, 3, 4, 1)).astype(np.float32) * 0.3)
    wfc = tf.constant(rng.normal(size=(16, 8)).astype(np.float32) * 0.3)
    wtc = tf.constant(rng.normal(size=(3, 3, 4, 4)).astype(np.float32) * 0.3)
    c = tf.constant(rng.uniform(0.5, 1.5, size=(1, 8, 8, 4)).astype(np.float32))
    img = (1, 8, 8, 4)
    return [
        ("CONV_2D", img, lambda x: tf.nn.conv2d(x, w33, 1, "SAME")),
        ("DEPTHWISE_CONV_2D", img, lambda x: tf.nn.depthwise_conv2d(x, wdw, [1, 1, 1, 1],
                                                                    "SAME")),
        ("FULLY_CONNECTED", (1, 16), lambda x: tf.matmul(x, wfc)),
        ("TRANSPOSE_CONV", img, lambda x: tf.nn.conv2d_transpose(x, wtc, (1, 16, 16, 4), 2)),
        ("ADD", img, lambda x: x + c),
        ("SUB", img, lambda x: x - c),
        ("MUL", img, lambda x: x * c),
        ("SQUARED_DIFFERENCE", img, lambda x: tf.math.squared_difference(x, c)),
        ("MAXIMUM", img, lambda x: tf.maximum(x, c)),
        ("MINIMUM", img, lambda x: tf.minimum(x, c)),
        ("AVERAGE_POOL_2D", img, lambda x: tf.nn.avg_pool2d(x, 2, 2, "VALID")),
        ("MAX_POOL_2D", img, lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID")),
        ("MEAN", img, lambda x: tf.reduce_mean(x, axis=[1, 2], keepdims=True)),
        ("SUM", img, lambda x: tf.reduce_sum(x, axis=[1, 2], keepdims=True)),
        ("REDUCE_MAX", img, lambda x: tf.reduce_max(x, axis=[1, 2], keepdims=True)),
        ("SOFTMAX", (1, 16), lambda x: tf.nn.softmax(x)),
        ("LOGISTIC", img, lambda x: tf.sigmoid(x)),
        ("TANH", img, lambda x: tf.tanh(x)),
        ("RELU", img, lambda x: tf.nn.relu(x)),  # on the input: nothing to fuse into
        ("RELU6", img, lambda x: tf.nn.relu6(x)),
        ("LEAKY_RELU", img, lambda x: tf.nn.leaky_relu(x, 0.1)),
        ("HARD_SWISH", img, lambda x: x * tf.nn.relu6(x + 3) / 6),
        ("ELU", img, lambda x: tf.nn.elu(x)),
        ("EXP", img, lambda x: tf.exp(x)),
        ("LOG", img, lambda x: tf.math.log(x + 2.0)),
        ("SQRT", img, lambda x: tf.sqrt(x + 2.0)),
        ("RSQRT", img, lambda x: tf.math.rsqrt(x + 2.0)),
        ("ABS", img, lambda x: tf.abs(x)),
        ("NEG", img, lambda x: -x),
        ("CONCATENATION", img, lambda x: tf.concat([x, x * 0.5], -1)),
        ("RESHAPE", img, lambda x: tf.reshape(x, (1, 64, 4))),
        ("TRANSPOSE", img, lambda x: tf.transpose(x, (0, 2, 1, 3))),
        ("PAD", img, lambda x: tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])),
        ("STRIDED_SLICE", img, lambda x: x[:, 1:7, 2:6, :]),
        ("SPLIT", img, lambda x: tf.split(x, 2, axis=-1)[0] * 1.0),
        ("PACK", (1, 16), lambda x: tf.stack([x, x * 0.5], axis=1)),
        ("RESIZE_NEAREST_NEIGHBOR", img, lambda x: tf.image.resize(x, (16, 16), "nearest")),
        ("RESIZE_BILINEAR", img, lambda x: tf.image.resize(x, (16, 16), "bilinear")),
        ("BATCH_MATMUL", (1, 8, 16), lambda x: tf.matmul(x, x, transpose_b=True)),
        ("ARG_MAX", (1, 16), lambda x: tf.cast(tf.argmax(x, -1), tf.int32)),
        ("EXPAND_DIMS", (1, 16), lambda x: tf.expand_dims(x, 1)),
        ("SQUEEZE", (1, 1, 16), lambda x: tf.squeeze(x, 1)),
        ("UNPACK", (1, 4, 8), lambda x: tf.unstack(x, axis=1)[1] * c[0, 0, 0, 0]),
        ("SLICE", img, lambda x: tf.slice(x, [0, 1, 1, 0], [1, 4, 4, 4])),
        ("GATHER", (1, 16), lambda x: tf.gather(x, [3, 1, 2], axis=1)),
        ("QUANTIZE", img, lambda x: tf.concat([x, x * 40.0], -1)),
    ]


def convert(fn, shape, path: Path) -> str | None:
    """Convert; None on success, else the converter's first error line."""
    import tensorflow as tf

    f = tf.function(fn, input_signature=[tf.TensorSpec(shape, tf.float32)])
    conv = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f)
    rng = np.random.default_rng(1)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([rng.uniform(-1, 1, shape).astype(np.float32)]
                                           for _ in range(16))
    conv.target_spec.supported_ops = [
        tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    conv.inference_input_type = tf.int16
    conv.inference_output_type = tf.int16
    try:
        path.write_bytes(conv.convert())
    except Exception as exc:  # the converter raises many types
        lines = [ln for ln in str(exc).splitlines() if "error" in ln.lower()] or [str(exc)]
        return lines[0][:160]
    return None


def measure(op: str, shape, fn, tmp: Path) -> dict:
    from rewriter.export.tflite import tflite_ops
    from rewriter.targets.vela import run_vela
    from rewriter.verify.runners import LiteRTRunner, RunnerError
    from rewriter.verify.tflm import TflmRunner

    path = tmp / f"{op}.tflite"
    row: dict = {"op": op}
    err = convert(fn, shape, path)
    if err:
        row["converter"] = f"refused: {err}"
        return row
    ops = tflite_ops(path.read_bytes())[0]
    row["ops"] = ops
    row["has_op"] = op in ops
    x = np.random.default_rng(2).uniform(-1, 1, shape).astype(np.float32)
    lite = LiteRTRunner(path)
    want = None
    try:
        want = next(iter(lite.run({lite.inputs[0].name: x}).values()))
        row["litert"] = "runs"
    except RunnerError as exc:
        row["litert"] = "fails: " + " ".join(str(exc).split(": ", 1)[-1].split())[:120]
    try:
        got = next(iter(TflmRunner(path).run({lite.inputs[0].name: x}).values()))
        row["tflm"] = "runs" if want is None or np.array_equal(np.asarray(got), np.asarray(
            want)) else (f"runs, max |diff| to LiteRT "
                         f"{np.abs(np.asarray(got) - np.asarray(want)).max():.3g}")
    except RunnerError as exc:
        row["tflm"] = "fails: " + " ".join(str(exc).split())[:160]
    v = run_vela(str(path), "ethos-u55-128", tmp / f"vela_{op}")
    row["vela"] = (f"{v.npu_ops} NPU / {v.cpu_ops} CPU"
                   + (f" ({'; '.join(sorted({c.op + ': ' + ' '.join(c.reasons)[:80] for c in v.cpu_reasons}))})"
                      if v.cpu_reasons else ""))
    return row


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory(prefix="int16_kernels_") as tmp:
        for op, shape, fn in cases():
            rows.append(measure(op, shape, fn, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    lines = ["# 16x8 kernels (int16 activations, int8 weights), run", "",
             f"`PYTHONPATH=. python benchmarks/int16_kernels.py` "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}); TFLite converter 16x8 "
             "mode, int16 I/O; TFLite Micro compared with LiteRT on one input; Vela 5.2 "
             "ethos-u55-128.", "",
             "| op | ops in the file | LiteRT | TFLite Micro | Vela (ethos-u55-128) |",
             "|---|---|---|---|---|"]
    for r in rows:
        if "converter" in r:
            lines.append(f"| {r['op']} | converter {r['converter']} | | | |")
            continue
        lines.append(f"| {r['op']} | {', '.join(r['ops'])} | {r['litert']} | {r['tflm']} | "
                     f"{r['vela']} |")
    text = "\n".join(lines) + "\n"
    out = ROOT / "benchmarks" / "results"
    (out / "int16_kernels.md").write_text(text)
    (out / "int16_kernels.json").write_text(json.dumps({"rows": rows}, indent=2))
    from benchmarks import stamp

    stamp.stamp_files([out / "int16_kernels.md", out / "int16_kernels.json"],
                      "int16_kernels.py", [])
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
