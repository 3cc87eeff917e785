"""The transformer-encoder rows of the README's "model families" table, measured.

A small encoder (tests/families.py: MultiHeadAttention + LayerNorm + GELU MLP, 16 tokens x 32,
2 heads, MLP 64), Keras 3 (LayerNorm epsilon 1e-6) and tf_keras (its default epsilon 1e-3, the
fused-BatchNorm path), untrained (seeded) weights; representative data: embedded token sequences
(32 for calibration, 8 for verification, other seeds). For each target the job is run
in-process (``rewriter.cli.main``) and its report summarised: exit code, rules, placement
(Edge TPU cut, Vela's CPU/NPU operators), int8 cosine against the float model in LiteRT, and
for tflm the cosine of TFLite Micro's own interpreter (a subprocess) on the same samples.

    PYTHONPATH=. python benchmarks/families_transformer.py [--tokens 16 --dim 32]
        [--targets edgetpu,...] [--workdir DIR (keeps the models, data and job outputs)]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

TARGETS = ("edgetpu", "ethos-u55-128", "tflm", "onnx")


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _tflm_cosine(model_path: Path, tflite: Path, data: np.ndarray) -> float:
    from rewriter.frontends import load_model
    from rewriter.verify.tflm import TflmRunner

    model = load_model(str(model_path))
    name, out = model.inputs[0].name, model.outputs[0].name
    got = TflmRunner(tflite).run_many([{name: x[None]} for x in data])
    micro = np.stack([next(iter(g.values())) for g in got])
    return _cosine(micro, np.stack([model.run({name: x[None]})[out] for x in data]))


def _row(flavour: str, target: str, model_path: Path, root: Path, out: Path) -> str:
    from rewriter.cli import main as rewrite

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = rewrite([str(model_path), "--target", target, "--calibration",
                        str(root / "calibration.npy"), "--data", str(root / "data.npy"),
                        "-o", str(out), "-q"])
    r = json.loads((out / "report.json").read_text())
    [cmp] = r["equivalence"]["artifact"]["outputs"].values()
    rules = ", ".join(f"{k} x{v}" for k, v in sorted(_counts(r).items())) or "none"
    if target == "onnx":
        import onnx

        onnx.checker.check_model(onnx.load(str(out / "model.onnx")))
        where = f"onnx.checker passes; {len(r['artifact_ops'])} nodes"
        numbers = f"ONNX Runtime max rel error {cmp['max_rel_error']:.1e}"
    else:
        p = r.get("placement_after") or {}
        if target == "edgetpu":
            where = ("no cut" if p.get("cut") is None else f"cut at {p['cut']['op']}") + \
                f", {p.get('ops_on_accelerator')} of {p.get('ops_total')} ops mapped"
            warned = sum(w["count"] for w in p.get("might_not_map", []))
            where += f" ({warned} reshapes might not be)" if warned else ""
        elif target.startswith("ethos-u"):
            v = r["vela"]
            where = f"Vela {v['cpu_ops']} CPU / {v['npu_ops']} NPU operators"
        else:
            where = f"{len(r['artifact_ops'])} ops, none unsupported" \
                if not r["unsupported_after"] else f"{len(r['unsupported_after'])} unsupported"
        numbers = f"int8 cosine {cmp['cosine']:.5f}"
        if target == "tflm":
            data = np.load(root / "data.npy")
            numbers += f" (TFLite Micro: {_tflm_cosine(model_path, out / 'model.tflite', data):.5f})"
    return f"| encoder ({flavour}) | {target} | {code} | {rules} | {where} | {numbers} |"


def _counts(report: dict) -> dict[str, int]:
    counts: dict[str, int] = {}
    for a in report["rules_applied"]:
        counts[a["rule"]] = counts.get(a["rule"], 0) + a["count"]
    return counts


def main(argv: list[str] | None = None) -> int:
    from tests.families import token_embeddings, transformer_encoder

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--workdir", type=Path, help="keep models, data and outputs here")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "families_transformer"),
                    help="results file stem (OUT.md, stamped; '' for none)")
    args = ap.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    table = ["| model | target | exit | rules applied | placement | numbers |",
             "|---|---|---|---|---|---|"]
    print("\n".join(table))
    with contextlib.ExitStack() as stack:
        if args.workdir is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        else:
            root = args.workdir
            root.mkdir(parents=True, exist_ok=True)
        paths = {"Keras 3": root / "encoder.keras", "tf_keras": root / "encoder.h5"}
        with contextlib.redirect_stderr(io.StringIO()):
            transformer_encoder(args.tokens, args.dim, mlp=2 * args.dim).save(paths["Keras 3"])
            transformer_encoder(args.tokens, args.dim, mlp=2 * args.dim, legacy=True,
                                epsilon=1e-3).save(paths["tf_keras"])
        np.save(root / "calibration.npy", token_embeddings(32, args.tokens, args.dim, seed=1))
        np.save(root / "data.npy", token_embeddings(8, args.tokens, args.dim, seed=2))
        for flavour, path in paths.items():
            for target in targets:
                table.append(_row(flavour, target, path, root, root / f"{path.stem}_{target}"))
                print(table[-1], flush=True)
    if args.out:
        from benchmarks import stamp

        out = Path(args.out + ".md")
        out.write_text("\n".join(["# Transformer encoder on every target", "", *table]) + "\n")
        stamp.stamp_files([out], "families_transformer.py", argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
