"""The markdown of ``benchmarks/real_models.py``'s results: one summary table, the reasons a
result is not OK (diagnosed from the figures), then per-model details."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rewriter.verify.tolerance import INT8_MIN_COSINE


def render(doc: dict[str, Any]) -> str:
    """The results as markdown: one summary table, then per-model details."""
    meta = doc["meta"]
    lines = ["# `rewrite` on real models, against the plain converter", "",
             f"Measured {meta['date_utc']} with `{meta['command']}` "
             f"({meta['total_s']} s; " + ", ".join(f"{k} {v}" for k, v in
                                                   meta["versions"].items()) + ").", "",
             "Baseline = plain `tf.lite.TFLiteConverter` full-int8 (int8 I/O) conversion of the "
             "original Keras model, no rewriting (for `onnx`: tf2onnx on the original graph), "
             "judged with the same op table and Vela. `ours` = `rewrite MODEL --target T` "
             "(calibrated and verified on seeded structured images).", ""]
    lines += [f"* skipped: {s}" for s in meta["skipped"]]
    lines += ["", "| model | target | ok | unsupported before (TF ops) | rules applied | "
              "artifact: unsupported after | placement: baseline -> ours | TF max rel err | "
              "artifact cosine / max rel err | wall s |", "|" + " --- |" * 10]
    for res in doc["results"]:
        for t, r in res["rewrite"].items():
            lines.append(_row(res["model"], t, r, res["baseline"].get(t, {})))
    lines += ["", "Placement: Edge TPU = ops mapped before the cut / ops in the file, and the "
              "first unsupported op; Ethos-U = Vela's CPU operators (NPU operators), estimated "
              "inference time; TFLM/ONNX/GPU = ops the table rejects / ops in the file.", "",
              "Why not OK (diagnosed from the figures):", ""]
    for res in doc["results"]:
        for t, r in res["rewrite"].items():
            if not r.get("ok"):
                lines.append(f"* {res['model']} -> {t}: "
                             f"{why_not_ok(r, res['baseline'].get(t, {}))}")
    lines.append("")
    for res in doc["results"]:
        lines += _details(res)
    return "\n".join(lines) + "\n"


def why_not_ok(r: dict[str, Any], base: dict[str, Any]) -> str:
    """A one-line diagnosis of a result that is not OK, from the measured figures."""
    if r.get("ok"):
        return ""
    if "error" in r:
        return f"the job crashed in {r.get('where')}" if r["exit"] == "crash" else r["error"]
    why = []
    if r["unsupported_after"]:
        ops = sorted({u["target_op"] or u["op"] for u in r["unsupported_after"]})
        why.append(f"ops the target lacks remain in the file ({', '.join(ops)})")
    tf = r.get("tf") or {}
    if tf and not tf.get("ok"):
        why.append("the rewritten TF graph does not match the original")
    art = r.get("artifact") or {}
    acc = base.get("accuracy")
    if art and not art.get("ok") and base.get("quantize") != "int8":
        ref = f" (plain converter: {acc['max_rel_error']:.2g})" if acc else ""
        why.append(f"{base.get('quantize')} file's max error {art['max_rel_error']:.2g} of the "
                   f"output scale exceeds the tolerance{ref}")
    elif art and not art.get("ok"):
        if acc and art["cosine"] < acc["cosine"] - 0.01:
            why.append(f"the rewrite costs int8 accuracy: cosine {art['cosine']:.4f} vs the plain "
                       f"converter's {acc['cosine']:.4f} on the same data")
        elif acc:
            why.append(f"int8 cosine {art['cosine']:.4f} < {INT8_MIN_COSINE}, as for the plain "
                       "converter "
                       f"({acc['cosine']:.4f}): quantisation of this model, not the rewrite")
        else:
            why.append(f"artifact does not match (cosine {art.get('cosine')})")
    return "; ".join(why) or "see report"


def _ops(d: dict[str, int] | None) -> str:
    return ", ".join(f"{k} x{v}" for k, v in (d or {}).items()) or "none"


def _row(model: str, t: str, r: dict[str, Any], base: dict[str, Any]) -> str:
    if "error" in r:
        return (f"| {model} | {t} | {r['exit'].upper() if r['exit'] == 'crash' else 'NOT OK'}"
                f" | | | {r['error'][:90]} ({r.get('where', '')}) | | | | {r['wall_s']} |")
    after = ", ".join(f"{u['target_op'] or u['op']} x{u['count']}" for u in r["unsupported_after"])
    tf = r.get("tf") or {}
    art = r.get("artifact") or {}
    art_txt = (f"{art['cosine']:.5f} / {art['max_rel_error']:.2g}" if art.get("cosine")
               is not None else "n/a")
    acc = base.get("accuracy")
    if acc:
        art_txt += f" (baseline {acc['cosine']:.5f} / {acc['max_rel_error']:.2g})"
    tf_txt = f"{tf['max_rel_error']:.2g}" if tf.get("max_rel_error") is not None else "n/a"
    return (f"| {model} | {t} | {'OK' if r['ok'] else 'NOT OK'} | "
            f"{_ops(r['unsupported_before'])} | {_ops(r['rules_applied'])} | "
            f"{after or 'none'} | {_placement(t, base, r)} | {tf_txt} | {art_txt} | "
            f"{r['wall_s']} |")


def _placement(t: str, base: dict[str, Any], r: dict[str, Any]) -> str:
    return f"{_place_one(t, base, baseline=True)} -> {_place_one(t, r, baseline=False)}"


def _place_one(t: str, r: dict[str, Any], baseline: bool) -> str:
    if baseline and not r.get("ok"):
        return f"conversion fails ({(r.get('error') or '')[:60]})"
    vela = r.get("vela")
    if vela:
        ms = f", {vela['inference_ms']} ms" if vela.get("inference_ms") is not None else ""
        return f"Vela {vela['cpu_ops']} CPU ({vela['npu_ops']} NPU{ms})"
    if t == "edgetpu":
        cut = r.get("cut") if baseline else (r.get("placement_after") or {}).get("cut")
        total = r.get("ops_counted") if baseline else (r.get("placement_after") or {}).get(
            "ops_total")
        warned = r.get("might_not_map") if baseline else (r.get("placement_after") or {}).get(
            "might_not_map")
        n = sum(w.get("count", 0) for w in warned or [])
        may = f", {n} might not be mapped" if n else ""
        if cut:
            return f"cut at {cut['op']} (op {cut['mapped_before'] + 1} of {total}){may}"
        return f"no cut ({total} ops{may})"
    if baseline:
        bad = sum(u["count"] for u in r.get("unsupported", []))
        return f"{bad} rejected of {r.get('ops')}"
    bad = sum(u["count"] for u in r.get("unsupported_after", []))
    return f"{bad} rejected of {r.get('artifact_ops')}"


def _details(res: dict[str, Any]) -> list[str]:
    lines = [f"## {res['model']}", "", res["note"] + ".", ""]
    if res.get("params") is not None:
        lines.append(f"Parameters: {res['params']:,}; output spread across inputs "
                     f"(std/mean|y|): {res.get('output_spread')}.")
        lines.append("")
    for t, r in res["rewrite"].items():
        base = res["baseline"].get(t, {})
        lines.append(f"### {res['model']} -> {t}: {'OK' if r.get('ok') else 'NOT OK'} "
                     f"(exit {r['exit']})")
        lines.append("")
        if r.get("summary"):
            lines.append(f"* ours: {r['summary']}")
        if not r.get("ok"):
            lines.append(f"* why not OK: {why_not_ok(r, base)}")
        if r.get("error"):
            lines.append(f"* ours: {r['exit']}: {r['error']} (at {r.get('where')})")
        if base.get("ok"):
            bad = ", ".join(f"{u['op']} x{u['count']}" for u in base.get("unsupported", []))
            lines.append(f"* baseline: {base.get('ops')} ops, rejected by the table: "
                         f"{bad or 'none'}; ops left in float: "
                         f"{', '.join(base.get('float_ops') or []) or 'none'}")
            if base.get("vela"):
                lines.append(f"* baseline Vela CPU ops: {_cpu_by_op(base['vela'])}")
        elif base:
            lines.append(f"* baseline conversion failed: {base.get('error')}")
        vendor = res.get("vendor", {}).get(t)
        if vendor:
            lines.append(f"* the package's own file ({Path(vendor.get('path', '')).name}): "
                         f"{_place_one(t, vendor, baseline=True)}; float ops: "
                         f"{', '.join(vendor.get('float_ops') or []) or 'none'}; cosine "
                         f"{vendor.get('accuracy', {}).get('cosine', float('nan')):.5f}")
        for u in r.get("unsupported_after", []):
            lines.append(f"* unsupported after: {u['target_op'] or u['op']} x{u['count']}: "
                         f"{u['reason']} (e.g. {', '.join(u['nodes'])})")
        if r.get("vela") and r["vela"]["cpu_ops"]:
            lines.append(f"* our Vela CPU ops: {_cpu_by_op(r['vela'])}")
        if r.get("export", {}).get("float_ops"):
            lines.append(f"* left in float by the converter: {r['export']['float_ops']}")
        if r.get("rules_exactness"):
            lines.append("* rules: " + "; ".join(f"{k}: {v}" for k, v in
                                                 r["rules_exactness"].items()))
        if r.get("timings"):
            lines.append("* timings (s): " + ", ".join(f"{k} {v}" for k, v in
                                                        r["timings"].items()))
        lines.append("")
    return lines


def _cpu_by_op(vela: dict[str, Any]) -> str:
    return "; ".join(f"{op} x{d['count']} ({' / '.join(d['reasons'])})"
                     for op, d in vela.get("cpu_by_op", {}).items()) or "none"


