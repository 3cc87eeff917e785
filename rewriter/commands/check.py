"""``rewrite check MODEL --target T``: what the target lacks, why, and which rule would fix it.

Two levels, with the same op table: the TF graph (what the converter is predicted to emit) and
the exported artifact (the model is exported to a temp dir, never next to the input; a ``.tflite``
or ``.onnx`` given as MODEL is checked directly). The artifact decides ``ok``. For Ethos-U
targets Vela is run on the exported file and its placement overrides the table; disagreements
are reported. For the Edge TPU the cut point (first unsupported op) is reported.

``plan`` is what ``rewrite run`` does, because it is ``rewrite run``'s own job run up to the
deployment (:func:`rewriter.job.pipeline.run_job` with ``until="deploy"``): the rules it applies
(each unsupported op's ``fix`` names them), the rewritten graph exported, the second attempt
when the converter re-fuses a rule's output or leaves it in float, and what that file still
lacks (``artifact_unsupported``).

Exit codes: 0 when the target lacks nothing the model uses; 1 when unsupported ops remain (the
check ran; the report says which); 2 for bad usage or bad input.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from rewriter.job.results import Job
    from rewriter.targets import Target

HELP = "report which ops a target lacks, why, and which rule would fix them (exit 1 if any)"


def converts(args: argparse.Namespace) -> bool:
    """Unless ``--graph-only``, check converts (the CLI starts the converter worker first)."""
    return not args.graph_only


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rewriter.defaults import DEFAULT_OPSET, QUANTIZE_MODES
    from rewriter.frontends.options import add_model_arguments
    from rewriter.job.options import onnx_opset

    add_model_arguments(parser)
    parser.add_argument("--target", "-t", required=True, help="target name (see `rewrite targets`)")
    parser.add_argument("--quantize", choices=QUANTIZE_MODES,
                        help="TFLite quantization to check for (default: the target's)")
    parser.add_argument("--opset", type=onnx_opset, help=f"ONNX opset (ONNX targets; default {DEFAULT_OPSET})")
    parser.add_argument("--graph-only", action="store_true",
                        help="check the TF graph only (no export; the verdict is a prediction)")
    parser.add_argument("--exact-only", action="store_true",
                        help="plan as `rewrite run --exact-only` does: approximate rules refused")
    parser.add_argument("--no-vela", action="store_true", help="do not run Vela (Ethos-U)")
    from rewriter.targets.vela import add_arguments as add_vela_arguments

    add_vela_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("-o", "--out", metavar="DIR",
                        help="write the original graph and the plain converter's file with "
                             "Model Explorer node data (placement, fixing rules) to DIR; open "
                             "them with `rewrite explore DIR`")


#: What ``check -o DIR`` writes (an existing DIR holding only these may be replaced).
CHECK_OUTPUTS = ("converted.tflite", "explorer")


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


def validate(args: argparse.Namespace) -> None:
    """Target name and model path, checked before TensorFlow is imported."""
    from rewriter.commands._common import validate_model_path
    from rewriter.targets import load_target
    from rewriter.targets.vela import configure_from_args

    configure_from_args(load_target(args.target, args.opset), args)
    validate_model_path(args.model, artifact_ok=True)


def run(args: argparse.Namespace, ui: Any) -> int:
    from rewriter.targets import load_target

    target = load_target(args.target, args.opset)
    if Path(args.model).suffix == ".onnx" and args.opset is None and target.artifact == "onnx":
        from rewriter.targets.artifact import read_artifact

        target = load_target(args.target, read_artifact(args.model).opset)  # the file's opset
    from rewriter.targets.vela import configure_from_args

    configure_from_args(target, args)
    quantize = target.resolve_quantize(args.quantize)
    result = check_model(args, target, quantize, ui)
    if ui.json_mode:
        ui.json(result)
    else:
        _print(result, ui)
    return 0 if result["ok"] else 1


def check_model(args: argparse.Namespace, target: Target, quantize: str,
                ui: Any) -> dict[str, Any]:
    """Run the levels that apply and assemble the result object (what ``--json`` prints).

    A model is checked by the job's own stages (:func:`rewriter.job.pipeline.run_job`) run up
    to planning (``--graph-only``) or up to deployment: the plan ``rewrite run`` makes, the
    rewritten graph exported and judged, and the second attempt that verdict asks for. The one
    thing check adds is the export of the model as given, whose file shows what the target
    lacks after the converter's own fusions (the same file as the job's when no rule applies).
    """
    from rewriter.job.stages import Steps, check_artifact, vela_stage

    path = Path(args.model)
    result: dict[str, Any] = {"target": target.name, "title": target.title,
                              "source": target.source, "input": str(path), "quantize": quantize,
                              "opset": target.opset, "graph": None, "artifact": None,
                              "vela": None, "vela_disagreements": [], "export_error": None}
    steps = Steps(ui.step)
    vela = not getattr(args, "no_vela", False)
    if path.suffix in (".tflite", ".onnx") and path.is_file():
        verdict = check_artifact(target, path)
        if target.vela_config and vela:
            with steps("vela", f"running Vela ({target.vela_config})"):
                verdict = vela_stage(verdict, target, path)
        _add_verdict(result, verdict)
        _explorer(args, None, None, result, (path, verdict.check))
        return _decide(result, True)
    from rewriter.commands._common import load_from_args
    from rewriter.job.options import JobOptions
    from rewriter.job.pipeline import run_job
    from rewriter.job.stages import deploy
    from rewriter.targets.host_lookup import host_lookup
    from rewriter.targets.tail import cpu_tail

    with ui.step(f"loading {args.model}"):
        model = load_from_args(args)
    options = JobOptions(quantize=quantize, exact_only=args.exact_only, run_vela=vela)
    with tempfile.TemporaryDirectory(prefix="rewrite_check_") as tmp:
        job = run_job(model, target, Path(tmp), options, progress=ui.step,
                      until="plan" if args.graph_only else "deploy").job
        attempt = job.attempt
        planned = attempt.plan.rules_by_op()
        result["graph"] = _level_json(job.before, planned)
        tail = cpu_tail(attempt.rewrite.model, attempt.graph_after)
        if tail is not None:
            result["cpu_tail"] = tail.to_json()
        lookup = host_lookup(attempt.rewrite.model, attempt.graph_after, target.name)
        if lookup is not None:
            result["host_lookup"] = lookup.to_json()
        result["plan"] = _plan_json(job)
        if attempt.deployment is None:
            _explorer(args, model, job, result, None)
            return _decide(result, False)
        deployment = attempt.deployment
        if attempt.rewrite.applied or job.retry is not None:
            deployment = deploy(model, target, quantize, Path(tmp) / "given" / (
                f"model.{target.artifact}"), steps, job.data.calibration_samples, vela=vela)
        result["versus_plain"] = _versus_plain(attempt.deployment, deployment)
        given = deployment.verdict
        _explorer(args, model, job, result, (deployment.exported.path, given.check)
                  if given is not None else None)
    res = deployment.exported.result
    if res is not None:
        calibration = [job.data.calibration_warning] if quantize in ("int8", "16x8") else []
        result["export"] = {"format": res.format, "size": res.size,
                            "warnings": [*res.warnings, *filter(None, calibration)]}
    if deployment.exported.error is not None:
        result["export_error"] = deployment.exported.error.to_json()
    if deployment.verdict is not None:
        _add_verdict(result, deployment.verdict, planned, _fixes_by_target_op(result))
    result = _decide(result, deployment.verdict is not None)
    if result["ok"]:
        result.pop("cpu_tail", None)  # predicted, but the exported file runs it
        result.pop("host_lookup", None)
    return result


def _versus_plain(mine: Any, given: Any) -> dict[str, Any] | None:
    """The job's artifact beside the given model's plain file on the target's cost model."""
    from rewriter.targets.cost import versus

    ours = mine.verdict.latency() if mine is not None and mine.verdict is not None else None
    theirs = given.verdict.latency() if given.verdict is not None else None
    if ours is None or theirs is None:
        return None
    return versus(ours, theirs) | ({"same_file": True} if mine is given else {})


def _explorer(args: argparse.Namespace, model: Any, job: Job | None, result: dict[str, Any],
              artifact: tuple[Path, Any] | None) -> None:
    """``-o DIR``: the original graph and the file as the plain converter exports it, with
    Model Explorer node data (:func:`rewriter.report.explorer.write_check_overlays`)."""
    if not getattr(args, "out", None):
        return
    from rewriter.host.fs import staged_output
    from rewriter.report.explorer import write_check_overlays

    graph = None
    if job is not None:
        fixes = {u["op"]: u["fix"] for u in result["graph"]["unsupported"]}
        graph = (job.before.verdicts, fixes, job.before.cut)
    art = None
    if artifact is not None:
        planned = job.attempt.plan.rules_by_op() if job is not None else None
        level = _level_json(artifact[1], planned, _fixes_by_target_op(result)
                            if result.get("graph") else None)
        art = (artifact[0], artifact[1].verdicts,
               {u["op"]: u["fix"] for u in level["unsupported"]}, artifact[1].cut)
    with staged_output(args.out, [args.model], CHECK_OUTPUTS, "check") as stage:
        write_check_overlays(stage.path, model.graph_def if model is not None else None,
                             graph, art)
    result["explorer"] = str(args.out)


def _plan_json(job: Job) -> dict[str, Any]:
    """The ``plan`` object: what ``rewrite run`` applies, its second attempt, and what the
    job's artifact will hold."""
    attempt = job.attempt
    out = attempt.plan.to_json() | {"retry": job.retry.to_json() if job.retry else None}
    if attempt.deployment is not None:
        out["artifact_ok"] = attempt.deployment.ok
        out["artifact_unsupported"] = sorted(attempt.deployment.unsupported_ops())
        error = attempt.deployment.exported.error
        out["artifact_error"] = error.to_json() if error is not None else None
    return out


def _add_verdict(result: dict[str, Any], verdict: Any, planned: dict[str, str] | None = None,
                 by_target_op: dict[str, str] | None = None) -> None:
    if verdict.vela is not None:
        result["vela_disagreements"] = verdict.disagreements
        result["vela"] = verdict.vela_json()
    result["artifact"] = _level_json(verdict.check, planned, by_target_op)


def _fixes_by_target_op(result: dict[str, Any]) -> dict[str, str]:
    """Target op -> the rule that fixed the TF node predicted to become it (a HARD_SWISH the
    converter fuses from Mul, AddV2, Relu6 and RealDiv is fixed by the rule planned for that
    Mul), from the graph level."""
    return {u["target_op"]: u["fix"] for u in (result["graph"] or {}).get("unsupported", [])
            if u.get("target_op") and u.get("fix")}


def _level_json(check: Any, planned: dict[str, str] | None = None,
                by_target_op: dict[str, str] | None = None) -> dict[str, Any]:
    out = check.to_json()
    for u in out["unsupported"]:
        u["fix"] = ((by_target_op or {}).get(u.get("target_op") or u["op"])
                    or _fix_for_target_op(u, planned)
                    or (_fix_for(u["op"], planned=planned) if check.level == "graph" else None))
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
        result["level"] = ("graph (the model as given was not exported)" if err.get("refused")
                           else "graph (export failed)")
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
        err = result["export_error"]
        ui.out(f"\nThe model as given was not exported (the converter was not run): "
               f"{err['message']}" if err.get("refused") else f"\nExport failed: {err['message']}")
    if result.get("vela"):
        v = result["vela"]
        t = v["summary"].get("inference_time")
        ui.out(f"\nVela ({v['config']}): NPU operators = {v['npu_ops']}, CPU operators = "
               f"{v['cpu_ops']}" + (f", estimated inference time {float(t) * 1e3:.2f} ms"
                                     if t else ""))
        from rewriter.targets.vela import count_note

        note = count_note(v, v.get("file_ops"))
        if note:
            ui.out(f"  note: {note}")
        from rewriter.targets.vela import estimate_lines

        for line in estimate_lines(v):
            ui.out(f"  {line}")
        for d in result["vela_disagreements"]:
            ui.out(f"  table and Vela disagree on {d['op']} ({d['node']}): table "
                   f"{d['table']}, Vela {d['vela']} {'; '.join(d['vela_reasons'])}")
    _print_plan(result.get("plan"), ui)
    if result.get("versus_plain"):
        from rewriter.targets.cost import versus_lines

        ui.out("\nEstimated latency, what `rewrite run` delivers beside the plain converter's file:")
        for line in versus_lines(result["versus_plain"]):
            ui.out(f"  {line}")
    verdict = "OK: the target runs every op" if result["ok"] else (
        f"NOT OK: {sum(u['count'] for u in result['unsupported'])} unsupported op(s)")
    ui.out(f"\n{verdict} (decided on the {result['level']})")
    for key in ("cpu_tail", "host_lookup"):
        if result.get(key):
            ui.out(result[key]["text"])
    if result.get("explorer"):
        ui.out(f"Model Explorer node data in {result['explorer']}: rewrite explore "
               f"{result['explorer']}")


def _print_plan(plan: dict[str, Any] | None, ui: Any) -> None:
    """What ``rewrite run`` will do: its rules, the second attempt, the rewritten file's ops."""
    if not plan or not (plan["rules"] or plan["unfixable"]):
        return
    ui.out("\n`rewrite run` will apply: " + (", ".join(plan["rules"]) or "no rule"))
    if plan.get("retry"):
        ui.out(f"  (a second attempt: {plan['retry']['reason']})")
    for u in plan["unfixable"]:
        ui.out(f"  no rule for {u['op']}: {u['why']}")
    if plan.get("artifact_error"):
        err = plan["artifact_error"]
        ui.out(("  its artifact is not exported: " if err.get("refused") else
                "  its artifact's export failed: ") + err["message"])
    elif plan.get("artifact_unsupported"):
        ui.out("  its artifact will still hold " + ", ".join(plan["artifact_unsupported"]))
    elif plan.get("artifact_ok"):
        ui.out("  its artifact (exported and checked here): the target runs every op")


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
    ui.out(f"  {data['ops_on_accelerator']} of {data['ops_total']} "
           f"{data.get('label', 'ops on the accelerator')} ({data['percent_on_accelerator']}%)")
    cut = data.get("cut")
    if cut:
        ui.out(f"  cut at the first unsupported op {cut['op']} ({cut['node']}): "
               f"{cut['mapped_before']} ops mapped before it, {cut['cpu_after']} on the CPU "
               "from it on")
    for note in data.get("notes", []):
        ui.out(f"  note: {note}")
