"""How much int8 error each spelling of hard-swish costs when its output feeds a MEAN.

MobileNetV3's squeeze-excite blocks and its head average a hard-swish output. The plain TFLite
converter fuses ``x * relu6(x + 3) / 6`` into HARD_SWISH (which the Edge TPU lacks); the rule
``hard_swish_unfused`` must emit an unfused spelling. This script converts conv -> hard-swish ->
MEAN in full int8 with each spelling and prints the ops the converter kept, the quantisation
step of the ``x / 6`` tensor against the step ``x``'s range needs (``(x/6) * relu6(x+3)`` feeding
a MEAN gets the product's range: a coarser step), and the error of the MEAN output relative to
its scale, on seeded data (32 calibration, 16 test samples).

    PYTHONPATH=. python benchmarks/hard_swish_int8.py
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

SHAPE = (1, 16, 16, 8)


def forms() -> dict[str, Callable[[Any], Any]]:
    import tensorflow as tf

    return {
        "x*relu6(x+3)/6 (Keras; fused)": lambda x: x * tf.nn.relu6(x + 3) / 6,
        "(x/6)*relu6(x+3)": lambda x: (x * (1 / 6)) * tf.nn.relu6(x + 3),
        "x*min(max(x/6+0.5,0),1)": lambda x: x * tf.minimum(tf.maximum(x * (1 / 6) + 0.5, 0.0),
                                                           1.0),
    }


def measure(form: Callable[[Any], Any], seed: int = 0) -> dict[str, Any]:
    """Convert conv -> ``form`` -> MEAN to full int8 and measure it (LiteRT builtin kernels)."""
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.3, (1, 1, SHAPE[-1], SHAPE[-1])).astype("f4")
    cal = [rng.normal(0.3, 2.0, SHAPE).astype("f4") for _ in range(32)]
    test = [rng.normal(0.3, 2.0, SHAPE).astype("f4") for _ in range(16)]

    @tf.function(input_signature=[tf.TensorSpec(SHAPE, tf.float32)])
    def fn(x: Any) -> Any:
        return tf.reduce_mean(form(tf.nn.conv2d(x, w, 1, "SAME")), axis=[1, 2])

    conv = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], fn)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([c] for c in cal)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Statistics for quantized inputs were expected"
        data = conv.convert()
    it = Interpreter(model_content=data,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    ops = it._get_ops_details()
    tensors = {t["index"]: t for t in it.get_tensor_details()}
    i, o = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
    diffs, refs = [], []
    for x in test:
        it.set_tensor(i, x)
        it.invoke()
        ref = np.asarray(fn(x))
        diffs.append(it.get_tensor(o) - ref)
        refs.append(ref)
    d, r = np.concatenate(diffs), np.concatenate(refs)
    return {"ops": [op["op_name"] for op in ops[1:-1]], "step_ratio": _sixth_step_ratio(ops, tensors),
            "mean_rmse_rel": float(np.sqrt((d**2).mean()) / np.abs(r).max())}


def _sixth_step_ratio(ops: list[dict[str, Any]], tensors: dict[int, Any]) -> float | None:
    """Quantisation step of the MUL that scales the conv output x (by 1/6) over (step of x)/6."""
    conv_out = next(op["outputs"][0] for op in ops if op["op_name"] == "CONV_2D")
    for op in ops:
        if op["op_name"] == "MUL" and conv_out in op["inputs"]:
            x, out = tensors[conv_out], tensors[op["outputs"][0]]
            return out["quantization"][0] / (x["quantization"][0] / 6)
    return None


def main() -> int:
    print(f"{'form':34s} {'ops kept by the converter':44s} {'x/6 step':>9s} "
          f"{'MEAN rmse/max':>14s}")
    for name, form in forms().items():
        m = measure(form)
        ratio = f"{m['step_ratio']:.2f}x" if m["step_ratio"] else "-"
        print(f"{name:34s} {' '.join(m['ops']):44s} {ratio:>9s} {m['mean_rmse_rel']:14.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
