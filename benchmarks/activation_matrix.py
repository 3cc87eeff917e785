"""Measure every activation of the catalogue on the int8 targets: placement and int8 accuracy.

For each activation of :mod:`rewriter.frontends.activations` (Keras 3 and tf_keras) the network of the
issue is built, seeded: conv(3x3, 8) -> activation -> conv(3x3, 8) -> global average pool ->
dense(10) on 16x16x3 inputs, frozen to a GraphDef (``.pb``), with representative data
(:func:`rewriter.frontends.activations.structured_images`: 64 calibration images, seed 1; 16 verification
images, seed 2). For each target the main job runs in-process (``rewriter.cli.main MODEL.pb
--target T --calibration CAL --data VAL --samples 16``) and its ``report.json`` is summarised:
exit code, rules applied with their exactness or bound, ops of the artifact the target lacks,
Edge TPU cut, Vela's NPU/CPU operator counts, and the int8 artifact's cosine to the float
original in LiteRT. The int8 artifact is also run in TFLite Micro's interpreter (subprocess,
:mod:`rewriter.verify.tflm`) on the same data and its cosine recorded ("tflm"); it decides for
the ``tflm`` target (for Ethos-U the file Vela compiles is what runs, so there it is shown only).

    PYTHONPATH=. python benchmarks/activation_matrix.py [--activations selu,softplus]
        [--targets edgetpu,ethos-u55-128,tflm] [--work /tmp/actmatrix]

Results: ``benchmarks/results/activation_matrix.{json,md}`` (``--render JSON`` rewrites the
``.md`` only; ``--merge JSON`` replaces the rows measured into that file and records the rerun
in it). A pass is: exit 0 (every op placed, rewritten graph and artifact match), no
Edge TPU cut, Vela 0 CPU operators, cosine >= 0.99 in LiteRT, and for ``tflm`` the same in
TFLite Micro's interpreter.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
TARGETS = ("edgetpu", "ethos-u55-128", "tflm")
MIN_COSINE = 0.99
CALIBRATION, VERIFY = 64, 16


def build_case(key: str, work: Path) -> dict[str, Path]:
    """Freeze the activation's network to ``work/<key>/model.pb`` with its data files."""
    from rewriter.frontends.activations import activation_net, get, structured_images
    from rewriter.testing import model_from_keras

    d = work / key.replace("(", "_").replace(")", "").replace(",", "_").replace(" ", "")
    d.mkdir(parents=True, exist_ok=True)
    paths = {"model": d / "model.pb", "cal": d / "calibration.npy", "val": d / "verify.npy"}
    model = model_from_keras(activation_net(get(key)))
    paths["model"].write_bytes(model.graph_def.SerializeToString())
    np.save(paths["cal"], structured_images(CALIBRATION, seed=1))
    np.save(paths["val"], structured_images(VERIFY, seed=2))
    return paths


def run_one(paths: dict[str, Path], target: str, out: Path) -> dict[str, Any]:
    """Run the job and summarise its report; the artifact also runs in TFLite Micro."""
    from rewriter.cli import main

    args = [str(paths["model"]), "--target", target, "-o", str(out), "--json", "-q",
            "--calibration", str(paths["cal"]), "--data", str(paths["val"]),
            "--samples", str(VERIFY)]
    (out / "report.json").unlink(missing_ok=True)
    start = time.perf_counter()
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            code = main(args)
    except Exception as exc:  # a crash is a finding: record it and go on
        return {"exit": "crash", "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    row: dict[str, Any] = {"exit": code, "seconds": round(time.perf_counter() - start, 1)}
    report_path = out / "report.json"
    if not report_path.is_file():
        row["error"] = buf.getvalue().strip().splitlines()[-1:] or ["no report"]
        return row
    rep = json.loads(report_path.read_text())
    row["rules"] = [{"rule": r["rule"], "count": r["count"], "exactness": r["exactness"]}
                    for r in rep.get("rules_applied", [])]
    row["unsupported_after"] = sorted({u["op"] for u in rep.get("unsupported_after") or []})
    row["cut"] = (rep.get("placement_after") or {}).get("cut")
    if "vela" in rep:
        row["vela"] = {"npu": rep["vela"]["npu_ops"], "cpu": rep["vela"]["cpu_ops"]}
    art = (rep.get("equivalence") or {}).get("artifact") or {}
    cos = [o["cosine"] for o in art.get("outputs", {}).values()]
    row["cosine"] = min(cos) if cos else None
    tf_eq = (rep.get("equivalence") or {}).get("rewritten_tf") or {}
    row["tf_ok"] = tf_eq.get("ok")
    artifact = out / "model.tflite"
    if artifact.is_file():
        row["artifact_ops"] = sorted(set(rep.get("artifact_ops") or []))
        row["tflm_cosine"], row["tflm_error"] = _tflm_cosine(artifact, paths)
    row["pass"] = _passes(row, target)
    return row


def _tflm_cosine(artifact: Path, paths: dict[str, Path]) -> tuple[float | None, str | None]:
    from rewriter.frontends import LoadOptions, load_model
    from rewriter.verify.runners import RunnerError
    from rewriter.verify.tflm import TflmRunner

    model = load_model(str(paths["model"]), LoadOptions())
    val = np.load(paths["val"])
    name, out = model.inputs[0].name, model.outputs[0].name
    feeds = [{name: v[None]} for v in val]
    try:
        got = TflmRunner(str(artifact)).run_many(feeds)
    except RunnerError as exc:
        return None, str(exc)[-200:]
    ref = np.concatenate([model.run(f)[out] for f in feeds]).ravel().astype(np.float64)
    test = np.concatenate([list(g.values())[0] for g in got]).ravel().astype(np.float64)
    denom = float(np.linalg.norm(ref) * np.linalg.norm(test))
    return (float(ref @ test / denom) if denom else 0.0), None


def _passes(row: dict[str, Any], target: str) -> bool:
    ok = row["exit"] == 0 and (row.get("cosine") or 0) >= MIN_COSINE
    if target == "tflm":
        ok = ok and (row.get("tflm_cosine") or 0) >= MIN_COSINE
    if target == "edgetpu":
        ok = ok and row.get("cut") is None
    if target.startswith("ethos-u"):
        ok = ok and (row.get("vela") or {}).get("cpu") == 0
    return bool(ok)


def render(results: dict[str, Any]) -> str:
    targets = results["targets"]
    reruns = [f"Rows {', '.join(r['rows'])} re-measured by `{r['command']} --merge ...` "
              f"({r['when']})." for r in results.get("reruns", [])]
    lines = ["# Activation x target, measured", "",
             f"Generated by `{results['command']}` ({results['when']}). Network: conv(3x3, 8) ->"
             " activation -> conv(3x3, 8) -> global average pool -> dense(10), 16x16x3, seeded;"
             f" {CALIBRATION} calibration and {VERIFY} verification images "
             "(`structured_images`, seeds 1 and 2). A cell: PASS/FAIL, the rules applied, the "
             "int8 cosine to the float original in LiteRT / in TFLite Micro, and what kept it "
             f"from passing (pass: exit 0, no Edge TPU cut, Vela 0 CPU ops, cosine >= "
             f"{MIN_COSINE} in LiteRT and, for tflm, in TFLite Micro).", "",
             *reruns, *([""] if reruns else []),
             "| activation | " + " | ".join(targets) + " |",
             "|---|" + "---|" * len(targets)]
    passed = 0
    for key, row in results["rows"].items():
        cells = []
        for t in targets:
            cell = row.get(t, {})
            passed += bool(cell.get("pass"))
            cells.append(_cell(cell, t))
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    total = len(results["rows"]) * len(targets)
    lines += ["", f"{passed} of {total} cells pass."]
    return "\n".join(lines) + "\n"


def _cell(c: dict[str, Any], target: str = "tflm") -> str:
    if not c:
        return ""
    if c.get("exit") == "crash":
        return f"CRASH {c.get('error', '')[:80]}"
    parts = ["PASS" if c.get("pass") else f"FAIL (exit {c.get('exit')})"]
    rules = ", ".join(r["rule"] for r in c.get("rules", []))
    parts.append(rules or "native")
    cos = c.get("cosine")
    tcos = c.get("tflm_cosine")
    parts.append(f"cos {cos:.4f}" if cos is not None else "cos -")
    parts.append(f"tflm {tcos:.4f}" if tcos is not None else "tflm -")
    if c.get("unsupported_after"):
        parts.append("lacks " + " ".join(c["unsupported_after"]))
    if c.get("vela") and c["vela"]["cpu"]:
        parts.append(f"Vela {c['vela']['cpu']} CPU")
    if c.get("tflm_error"):
        who = "TFLM" if target == "tflm" else "TFLM without the NPU"
        parts.append(f"{who}: " + c["tflm_error"].split(": ", 1)[-1][:60])
    return "; ".join(parts)


def dumps(results: dict[str, Any]) -> str:
    """The results as JSON with one line per cell (readable diffs, no indented bulk)."""
    head = {k: v for k, v in results.items() if k != "rows"}
    lines = ["{", *(f" {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()), ' "rows": {']
    rows = list(results["rows"].items())
    for i, (key, row) in enumerate(rows):
        lines.append(f"  {json.dumps(key)}: {{")
        cells = list(row.items())
        for j, (t, cell) in enumerate(cells):
            lines.append(f"   {json.dumps(t)}: {json.dumps(cell)}" + ("," if j < len(cells) - 1 else ""))
        lines.append("  }" + ("," if i < len(rows) - 1 else ""))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from rewriter.frontends.activations import catalogue

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--activations", help="comma-separated keys (default: all)")
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--work", default="/tmp/activation_matrix")
    p.add_argument("--out", default=str(RESULTS / "activation_matrix"))
    p.add_argument("--render", help="re-render the .md from this results .json")
    p.add_argument("--merge", help="replace these rows of this results .json (the rerun is "
                   "recorded in it) instead of writing a new one")
    args = p.parse_args(argv)
    if args.render:
        results = json.loads(Path(args.render).read_text())
        Path(args.out).with_suffix(".md").write_text(render(results))
        return 0
    keys = args.activations.split(",") if args.activations else [a.key for a in catalogue()]
    targets = args.targets.split(",")
    work = Path(args.work)
    shown = [a for a in ("--activations", "--targets") if getattr(args, a[2:]) is not None
             and (a != "--targets" or args.targets != ",".join(TARGETS))]
    results: dict[str, Any] = {
        "command": " ".join(["PYTHONPATH=. python benchmarks/activation_matrix.py",
                             *(f"{a} {getattr(args, a[2:])}" for a in shown)]),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "targets": targets, "rows": {}}
    from benchmarks import stamp

    # The commit measured, taken before the run (benchmarks/stamp.py).
    results["stamp"] = stamp.header(results["command"], "activation_matrix.py")
    for key in keys:
        paths = build_case(key, work)
        row: dict[str, Any] = {}
        for t in targets:
            out = paths["model"].parent / t
            out.mkdir(exist_ok=True)
            row[t] = run_one(paths, t, out)
            print(f"{key:24s} {t:14s} {_cell(row[t], t)}", flush=True)
        results["rows"][key] = row
    if args.merge:
        merged = json.loads(Path(args.merge).read_text())
        merged["rows"].update(results["rows"])
        merged.setdefault("reruns", []).append(
            {"command": results["command"], "when": results["when"],
             "commit": results["stamp"]["commit"], "rows": list(results["rows"])})
        results = merged
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(dumps(results))
    out.with_suffix(".md").write_text(render(results))
    stamp.stamp_files([out.with_suffix(".md")], "activation_matrix.py",
                      command=results["stamp"]["command"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
