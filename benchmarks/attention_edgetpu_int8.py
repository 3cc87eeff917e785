"""int8 cost of the Edge TPU attention forms (matmul_as_mul_reduce, softmax_rows).

Attention pieces on [1, T, 2 heads, D] tensors, each converted to full int8 twice: as the plain
converter emits it (BATCH_MATMUL, one SOFTMAX: the native kernels, which the Edge TPU lacks or
refuses) and rewritten by the rules (SLICE, MUL, CONV_2D / DEPTHWISE_CONV_2D of ones,
CONCATENATION; one SOFTMAX per row). Calibrated on 32 samples, measured on 16 others (q, k, v
~ N(0, 1), scores ~ N(0, 2)): cosine of the int8 output against the float graph. Every
rewritten file is checked against the Edge TPU table (every documented limitation).

    PYTHONPATH=. python benchmarks/attention_edgetpu_int8.py [--sizes 8x8,16x16,32x16]
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

HEADS = 2


def _pieces(d: int):
    import tensorflow as tf

    scale = 1.0 / np.sqrt(d)

    def qk(q, k):
        return tf.einsum("BTNH,BSNH->BNTS", q, k) * scale

    def pv(s, v):
        return tf.einsum("BNTS,BSNH->BTNH", tf.nn.softmax(s), v)

    def attention(q, k, v):
        return pv(qk(q, k), v)

    return {"Q K^T": (qk, 2, ["matmul_as_mul_reduce"]),
            "softmax(S) V": (pv, 2, ["matmul_as_mul_reduce", "softmax_rows"]),
            "softmax rows": (tf.nn.softmax, 1, ["softmax_rows"]),
            "attention": (attention, 3, ["matmul_as_mul_reduce", "softmax_rows"])}


def _run(path: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path))
    it.allocate_tensors()
    for d in it.get_input_details():
        key = d["name"].split("serving_default_")[-1].split(":")[0]
        it.set_tensor(d["index"], feeds[key])
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _sample(rng: np.random.Generator, shapes: list, std: list) -> dict[str, np.ndarray]:
    return {f"x{i}": rng.normal(0, sd, s).astype("f4")
            for i, (s, sd) in enumerate(zip(shapes, std, strict=True))}


def measure(t: int, d: int, tmp: Path) -> list[tuple[str, float, float, bool]]:
    from rewriter.export.tflite import export_tflite
    from rewriter.rewrite.passes import apply_rules
    from rewriter.targets import load_target
    from rewriter.testing import model_from_function

    rng = np.random.default_rng(0)
    rows = []
    for name, (fn, n_in, rules) in _pieces(d).items():
        shapes = [(1, HEADS, t, t)] if name == "softmax rows" else (
            [(1, HEADS, t, t), (1, t, HEADS, d)] if name == "softmax(S) V" else [(1, t, HEADS, d)]
            * n_in)
        std = [2.0 if len(s) == 4 and s[1] == HEADS else 1.0 for s in shapes]
        model = model_from_function(fn, shapes)

        calib = [_sample(rng, shapes, std) for _ in range(32)]
        data = [_sample(rng, shapes, std) for _ in range(16)]
        want = np.stack([model.run(f)["output_0"] for f in data])
        cos = []
        for variant in (model, apply_rules(model, rules).model):
            path = tmp / f"{len(cos)}.tflite"
            export_tflite(variant, path, quantize="int8", calibration=calib)
            cos.append(_cosine(np.stack([_run(path, f) for f in data]), want))
        ok = load_target("edgetpu").check_artifact(str(path)).ok
        rows.append((name, cos[0], cos[1], ok))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8x8,16x16,32x16", help="T x D per head, comma separated")
    args = ap.parse_args(argv)
    print("| T x D | piece | plain converter (native kernels) | rewritten | rewritten file "
          "passes the Edge TPU table |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes.split(","):
            t, d = (int(v) for v in size.split("x"))
            for name, native, ours, ok in measure(t, d, Path(tmp)):
                print(f"| {t} x {d} | {name} | {native:.5f} | {ours:.5f} | "
                      f"{'yes' if ok else 'NO'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
