"""Measure the BatchNorm / LayerNorm rules on real architectures.

For keras.applications MobileNetV3Small, EfficientNetB0 and ConvNeXtTiny (weights=None, batch 1,
small input; BN moving statistics and LN/BN affine weights randomized so folding is not a no-op)
frozen to a GraphDef: how many BN / LayerNorm subgraphs each rule matched, which norm ops remain,
the rewrite time, and the max error relative to the output scale after rewriting (TF vs TF).

    PYTHONPATH=. python benchmarks/measure_norm_rules.py [MobileNetV3Small ...] [--size 96]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

RULES = ["fold_shape_constants", "batchnorm_fold_into_conv", "batchnorm_to_mul_add",
         "layernorm_decompose", "layernorm_from_fused_bn"]
NORM_OPS = ("FusedBatchNormV3", "Rsqrt", "Neg", "SquaredDifference")
ARCHS = ("MobileNetV3Small", "EfficientNetB0", "ConvNeXtTiny")


def _randomize_norms(km, rng: np.random.Generator) -> None:
    for layer in _all_layers(km):
        if type(layer).__name__ in ("BatchNormalization", "LayerNormalization"):
            new = []
            for w in layer.weights:
                n = getattr(w, "path", w.name).rsplit("/", 1)[-1].split(":")[0]
                if n in ("gamma", "moving_variance"):
                    new.append(rng.uniform(0.5, 1.5, w.shape).astype("f4"))
                else:
                    new.append(rng.normal(0, 0.2, w.shape).astype("f4"))
            layer.set_weights(new)


def _all_layers(km):
    for layer in km.layers:
        yield layer
        if hasattr(layer, "layers"):
            yield from _all_layers(layer)


def measure(arch: str, size: int, legacy: bool = False) -> dict:
    if legacy:
        import tf_keras as keras
    else:
        import keras

    from rewriter.rewrite.passes import apply_rules
    from rewriter.testing import max_rel_error, model_from_keras, op_types

    rng = np.random.default_rng(0)
    km = getattr(keras.applications, arch)(weights=None, input_shape=(size, size, 3),
                                           classifier_activation=None)  # compare logits
    layers = {"BatchNormalization": 0, "LayerNormalization": 0}
    for layer in _all_layers(km):
        if type(layer).__name__ in layers:
            layers[type(layer).__name__] += 1
    _randomize_norms(km, rng)
    model = model_from_keras(km)
    before = op_types(model)
    start = time.perf_counter()
    result = apply_rules(model, RULES)
    secs = time.perf_counter() - start
    after = op_types(result.model)
    x = rng.uniform(0, 255, (1, size, size, 3)).astype("f4")
    want = model.run({"x0": x})["output_0"]
    got = result.model.run({"x0": x})["output_0"]
    return {"arch": arch + (" (tf_keras)" if legacy else ""), "nodes": len(model.graph_def.node), "layers": layers,
            "matches": result.rule_counts(),
            "norm_ops_before": {k: before.get(k, 0) for k in NORM_OPS},
            "norm_ops_after": {k: after.get(k, 0) for k in NORM_OPS},
            "rewrite_seconds": round(secs, 2), "max_rel_error": max_rel_error(got, want),
            "max_abs_error": float(np.max(np.abs(got - want)))}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("archs", nargs="*", default=list(ARCHS))
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--tf-keras", action="store_true", help="build with tf_keras (fused BN)")
    args = ap.parse_args()
    for arch in args.archs:
        r = measure(arch, args.size, args.tf_keras)
        print(f"{r['arch']}: {r['nodes']} nodes, layers {r['layers']}, matches {r['matches']}, "
              f"norm ops {r['norm_ops_before']} -> {r['norm_ops_after']}, "
              f"{r['rewrite_seconds']} s, max rel error {r['max_rel_error']:.2e} "
              f"(max abs {r['max_abs_error']:.2e})", flush=True)


if __name__ == "__main__":
    main()
