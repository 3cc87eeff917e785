"""``rewrite check MODEL --target T``: what the target lacks, why, and which rule would fix it.

Two levels, with the same op table: the TF graph (what the converter is predicted to emit) and
the exported artifact (the model is exported to a temp dir, never next to the input; a ``.tflite``
or ``.onnx`` given as MODEL is checked directly). The artifact decides ``ok``. For Ethos-U
targets Vela is run on the exported file and its placement overrides the table; disagreements
are reported. For the Edge TPU the cut point (first unsupported op) is reported.

Exit codes: 0 when the target lacks nothing the model uses; 1 when unsupported ops remain (the
check ran; the report says which); 2 for bad usage or bad input.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from rewriter.model import Model
    from rewriter.stages import Deployment, JobData, Steps
    from rewriter.targets import Target

HELP = "report which ops a target lacks, why, and which rule would fix them (exit 1 if any)"


def converts(args: argparse.Namespace) -> bool:
    """Unless ``--graph-only``, check converts (the CLI starts the converter worker first)."""
    return not args.graph_only


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rewriter.commands._common import add_model_arguments, onnx_opset
    from rewriter.defaults import DEFAULT_OPSET, QUANTIZE_MODES

    add_model_arguments(parser)
    parser.add_argument("--target", "-t", required=True, help="target name (see `rewrite targets`)")
    parser.add_argument("--quantize", choices=QUANTIZE_MODES,
                        help="TFLite quantization to check for (default: the target's)")
    parser.add_argument("--opset", type=onnx_opset, help=f"ONNX opset (ONNX targets; default {DEFAULT_OPSET})")
    parser.add_argument("--graph-only", action="store_true",
                        help="check the TF graph only (no export; the verdict is a prediction)")
    parser.add_argument("--no-vela", action="store_true", help="do not run Vela (Ethos-U)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _fix_for(op: str, prefer: str | None = None,
             planned: dict[str, str] | None = None) -> str | None:
    """The rewrite rule that would fix TF op ``op``, or None (no rule, or no rule catalogue).

    With ``planned`` (TF op -> the rule that fixed it when this model was planned and rewritten
    for this target) the answer is the target's: None when no rule fits the target. Without it
    (a .tflite/.onnx given directly) the catalogue's best rule; ``prefer`` picks, among the
    rules for ``op``, one whose name contains it (e.g. the hard-swish rule among those removing
    ``RealDiv``).
    """
    if planned is not None:
        return planned.get(op)
    from rewriter.rules import rule_for_op, rules_for_op

    if prefer:
        named = [r.name for r in rules_for_op(op) if prefer in r.name]
        if named:
            return named[0]
    return rule_for_op(op)


def run(args: argparse.Namespace, ui: Any) -> int:
    from rewriter.targets import load_target

    target = load_target(args.target, args.opset)
    if Path(args.model).suffix == ".onnx" and args.opset is None and target.artifact == "onnx":
        from rewriter.artifact import read_artifact

        target = load_target(args.target, read_artifact(args.model).opset)  # the file's opset
    quantize = target.resolve_quantize(args.quantize)
    result = check_model(args, target, quantize, ui)
    if ui.json_mode:
        ui.json(result)
    else:
        _print(result, ui)
    return 0 if result["ok"] else 1


def check_model(args: argparse.Namespace, target: Target, quantize: str,
                ui: Any) -> dict[str, Any]:
    """Run the levels that apply and assemble the result object (what ``--json`` prints)."""
    from rewriter.stages import Steps, check_artifact, vela_stage

    path = Path(args.model)
    result: dict[str, Any] = {"target": target.name, "title": target.title,
                              "source": target.source, "input": str(path), "quantize": quantize,
                              "opset": target.opset, "graph": None, "artifact": None,
                              "vela": None, "vela_disagreements": [], "export_error": None}
    steps = Steps(ui.step)
    if path.suffix in (".tflite", ".onnx") and path.is_file():
        verdict = check_artifact(target, path)
        if target.vela_config and not getattr(args, "no_vela", False):
            with steps("vela", f"running Vela ({target.vela_config})"):
                verdict = vela_stage(verdict, target, path)
        _add_verdict(result, verdict)
        return _decide(result, True)
    from rewriter.commands._common import load_from_args

    with ui.step(f"loading {args.model}"):
        model = load_from_args(args)
    from rewriter.stages import job_data

    data = job_data(model, quantize)  # what `rewrite run` calibrates on without --calibration
    graph = target.check_graph(model, quantize)
    planned, tail = _planned_fixes(model, target, quantize, data)
    result["graph"] = _level_json(graph, planned)
    if tail is not None:
        result["cpu_tail"] = tail.to_json()
    if args.graph_only:
        return _decide(result, False)
    deployment = _deploy(model, target, quantize, args, steps, result, data)
    if deployment.exported.error is not None:
        result["export_error"] = deployment.exported.error.to_json()
    if deployment.verdict is not None:
        _add_verdict(result, deployment.verdict, planned)
    result = _decide(result, deployment.verdict is not None)
    if result["ok"]:
        result.pop("cpu_tail", None)  # predicted, but the exported file runs it
    return result


def _planned_fixes(model: Model, target: Target, quantize: str,
                   data: JobData) -> tuple[dict[str, str], Any]:
    """TF op -> the rule that fixed it when the model is planned and rewritten for the target
    on the job's data (rules fitted on a tensor's range need it; nothing is exported), and the
    post-processing tail the rewritten graph leaves on the CPU
    (:func:`rewriter.targets.tail.cpu_tail`) or None."""
    from rewriter.planner import plan_and_apply
    from rewriter.targets.tail import cpu_tail

    the_plan, rewritten = plan_and_apply(model, target, quantize,
                                         data=data.calibration_samples or data.samples)
    tail = cpu_tail(rewritten.model, target.check_graph(rewritten.model, quantize))
    return the_plan.rules_by_op(), tail


def _deploy(model: Model, target: Target, quantize: str, args: argparse.Namespace,
            steps: Steps, result: dict[str, Any], data: JobData) -> Deployment:
    """Export to a temp dir, never next to the input, calibrated and with the I/O types as
    ``rewrite run`` would (:func:`rewriter.stages.job_data`), and judge the file."""
    from rewriter.stages import deploy

    with tempfile.TemporaryDirectory(prefix="rewrite_check_") as tmp:
        deployment = deploy(model, target, quantize, Path(tmp) / f"model.{target.artifact}",
                            steps, data.calibration_samples,
                            vela=not getattr(args, "no_vela", False))
    res = deployment.exported.result
    if res is not None:
        calibration = [data.calibration_warning] if quantize == "int8" else []
        result["export"] = {"format": res.format, "size": res.size,
                            "warnings": [*res.warnings, *filter(None, calibration)]}
    return deployment


def _add_verdict(result: dict[str, Any], verdict: Any,
                 planned: dict[str, str] | None = None) -> None:
    if verdict.vela is not None:
        result["vela_disagreements"] = verdict.disagreements
        result["vela"] = verdict.vela.to_json()
    result["artifact"] = _level_json(verdict.check, planned)


def _level_json(check: Any, planned: dict[str, str] | None = None) -> dict[str, Any]:
    out = check.to_json()
    for u in out["unsupported"]:
        u["fix"] = _fix_for_target_op(u, planned) or (
            _fix_for(u["op"], planned=planned) if check.level == "graph" else None)
    out["table"] = check.table()
    return out


def _fix_for_target_op(entry: dict[str, Any],
                       planned: dict[str, str] | None = None) -> str | None:
    """Artifact ops are target ops: find the TF ops that lower to it and ask for their rule."""
    from rewriter.targets import lowering

    op = entry.get("related_op") or entry.get("target_op") or entry["op"]
    if op.startswith("Flex"):
        return _fix_for(op[len("Flex"):], planned=planned)
    for tf_op in lowering().get("fused_from", {}).get(op, []):
        fix = _fix_for(tf_op, prefer=op.lower(), planned=planned)
        if fix:
            return fix
    for section in ("tflite", "onnx"):
        for tf_op, emitted in lowering()[section].items():
            if emitted == [op]:
                fix = _fix_for(tf_op, planned=planned)
                if fix:
                    return fix
    return None


def _decide(result: dict[str, Any], by_artifact: bool) -> dict[str, Any]:
    """The artifact decides; with no artifact (graph only, or export failed) the graph does."""
    if result.get("export_error"):
        err = result["export_error"]
        decided = result["graph"]
        result["ok"] = False
        result["level"] = "graph (export failed)"
        unsupported = list(decided["unsupported"]) if decided else []
        if not unsupported:
            unsupported = [{"op": op, "count": 1, "reason": err["message"], "fix": _fix_for(op)}
                           for op in err["ops"] or ["export"]]
        result["unsupported"] = unsupported
        result["cut"] = decided["cut"] if decided else None
        return result
    decided = result["artifact"] if by_artifact else result["graph"]
    result["level"] = "artifact" if by_artifact else "graph"
    result["ok"] = bool(decided["ok"])
    result["unsupported"] = decided["unsupported"]
    result["cut"] = decided["cut"]
    result["percent_on_accelerator"] = decided["percent_on_accelerator"]
    return result


# ----------------------------------------------------------------------------- printing
def _print(result: dict[str, Any], ui: Any) -> None:
    ui.out(f"Target: {result['title']} ({result['target']}); quantize: {result['quantize']}"
           + (f"; opset {result['opset']}" if result.get("opset") else ""))
    for level in ("graph", "artifact"):
        data = result.get(level)
        if data:
            _print_level(level, data, ui)
    if result.get("export_error"):
        ui.out(f"\nExport failed: {result['export_error']['message']}")
    if result.get("vela"):
        v = result["vela"]
        t = v["summary"].get("inference_time")
        ui.out(f"\nVela ({v['config']}): NPU operators = {v['npu_ops']}, CPU operators = "
               f"{v['cpu_ops']}" + (f", estimated inference time {float(t) * 1e3:.2f} ms"
                                     if t else ""))
        for d in result["vela_disagreements"]:
            ui.out(f"  table and Vela disagree on {d['op']} ({d['node']}): table "
                   f"{d['table']}, Vela {d['vela']} {'; '.join(d['vela_reasons'])}")
    verdict = "OK: the target runs every op" if result["ok"] else (
        f"NOT OK: {sum(u['count'] for u in result['unsupported'])} unsupported op(s)")
    ui.out(f"\n{verdict} (decided on the {result['level']})")
    if result.get("cpu_tail"):
        ui.out(result["cpu_tail"]["text"])


def _print_level(level: str, data: dict[str, Any], ui: Any) -> None:
    title = "TF graph (predicted)" if level == "graph" else "Exported artifact"
    ui.out(f"\n{title}:")
    fixes = {(u.get("target_op") or u["op"], u["reason"]): u["fix"] for u in data["unsupported"]}
    rows = [("Operator", "Count", "Status", "Reason", "Fix")]
    for r in data["table"]:
        fix = ""
        if not r["supported"]:
            fix = fixes.get((r["op"], r["reason"])) or "no rule"
        rows.append((r["op"], str(r["count"]), r["status"], r["reason"] or "", fix))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        ui.out("  " + "  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True))
               + ("  " + row[4] if row[4] else ""))
    ui.out(f"  {data['ops_on_accelerator']} of {data['ops_total']} ops on the accelerator "
           f"({data['percent_on_accelerator']}%)")
    cut = data.get("cut")
    if cut:
        ui.out(f"  cut at the first unsupported op {cut['op']} ({cut['node']}): "
               f"{cut['mapped_before']} ops mapped before it, {cut['cpu_after']} on the CPU "
               "from it on")
    for note in data.get("notes", []):
        ui.out(f"  note: {note}")
