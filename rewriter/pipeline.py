"""The whole job, as a library: load -> plan -> rewrite -> verify -> export -> check -> report.

:func:`run_job` takes a loaded :class:`~rewriter.model.Model` and a target and returns a
:class:`JobResult` whose ``report`` is what ``report.json`` holds. It never prints; ``progress``
is a context-manager factory (the CLI passes ``ui.step``). One direction, no back and forth,
except one retry: when the exported artifact still holds an op that a rule was meant to remove
(the converter re-fused it, or left it in float), the next rule for that op is tried and the
report says so.

Tolerances come from :mod:`rewriter.verify.tolerance` (the ``equivalence`` section states the
ones used).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.defaults import CALIBRATION_SAMPLES, CALIBRATION_SEED, VERIFY_SAMPLES, VERIFY_SEED
from rewriter.errors import UserError
from rewriter.model import Model


@dataclass
class JobOptions:
    """What the user asked for beyond model and target."""

    quantize: str | None = None  # None: the target's default
    opset: int | None = None
    exact_only: bool = False
    calibration: str | None = None  # .npy/.npz/image dir for int8 calibration
    inputs: str | None = None  # .npy/.npz/image dir for verification (default: calibration)
    samples: int = VERIFY_SAMPLES  # verification samples
    calibration_samples: int = CALIBRATION_SAMPLES
    int8_io: bool | None = None  # None: int8 I/O when the target is an int8 accelerator
    input_ranges: dict[str, tuple[float, float]] = field(default_factory=dict)  # synthetic data
    pixels: Any = None  # verify.data.PixelMap for image directories (--pixel-range/--pixel-norm)
    run_vela: bool = True
    check_each_rule: bool = False  # compare outputs after every rule (names a breaking rule)
    divergence_samples: int = 2  # samples for the intermediate-tensor comparison


@dataclass
class JobResult:
    report: dict[str, Any]
    exit_code: int
    files: dict[str, str] = field(default_factory=dict)


def _no_progress(_: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def run_job(model: Model, target: Any, outdir: Path, options: JobOptions | None = None,
            progress: Callable[[str], contextlib.AbstractContextManager[None]] = _no_progress,
            ) -> JobResult:
    """Run the whole job for ``model`` on ``target``, writing artifacts into ``outdir``."""
    from rewriter.report import write_reports

    opts = options or JobOptions()
    quantize = target.resolve_quantize(opts.quantize)
    timings: dict[str, float] = {}
    warnings: list[str] = []
    report: dict[str, Any] = {
        "ok": False, "target": target.name, "input": model.source.path,
        "format": model.source.format, "quantize": quantize,
        "artifact_format": target.artifact, "signature": model.signature_json(),
        "notes": list(model.source.notes), "warnings": warnings, "timings": timings,
    }

    with _timed(timings, "check_before"), progress("checking the model against the op table"):
        before = target.check_graph(model, quantize)
    report["placement_before"] = _placement(before)
    data, cal_data = _data(model, opts, quantize, warnings)
    report["data"] = data_json(data, cal_data)
    samples = data.samples
    calibration = cal_data.samples if cal_data is not None else None
    with _timed(timings, "run_original"), progress("running the original model"):
        reference = _run_all(model, samples)

    ctx = _Context(model, target, quantize, opts, outdir, samples, calibration, reference,
                   timings, progress)
    attempt = _attempt(ctx)
    retry = _retry_exclusions(attempt.plan, target, quantize, opts.exact_only, attempt.report)
    if retry is not None:
        # The second attempt's files replace the first's, so its report is the one kept
        # (the first failed too); "retry" says what was tried and why.
        attempt = _attempt(ctx, frozenset(retry["exclude"]))
        report["retry"] = retry | {"ok": attempt.ok}
    planned = fixes_by_op(attempt.plan)
    report["unsupported_before"] = _with_fixes(before.unsupported_summary(), planned,
                                               _unfixable_why(attempt.plan, target))
    report.update(attempt.report)
    warnings.extend(attempt.warnings)
    report["ok"] = attempt.ok
    report["summary"] = _summary(report, attempt.tf_cmp, attempt.art_cmp, data.synthetic)
    files = dict(attempt.files)
    files.update({p.name: str(p) for p in write_reports(outdir, report)})
    from rewriter.report_html import write_html

    files["report.html"] = str(write_html(outdir, report))
    return JobResult(report, 0 if attempt.ok else 1, files)


@dataclass
class _Context:
    """What every attempt shares: the original, the target, the data and its outputs."""

    model: Model
    target: Any
    quantize: str
    opts: JobOptions
    outdir: Path
    samples: list[dict[str, np.ndarray]]
    calibration: list[dict[str, np.ndarray]] | None
    reference: dict[str, np.ndarray]
    timings: dict[str, float]
    progress: Callable[[str], contextlib.AbstractContextManager[None]]


@dataclass
class _Attempt:
    plan: Any
    ok: bool
    report: dict[str, Any]
    files: dict[str, str]
    warnings: list[str]
    tf_cmp: Any
    art_cmp: Any


def _attempt(ctx: _Context, exclude: frozenset[str] = frozenset()) -> _Attempt:
    """Plan and rewrite (rules in ``exclude`` not used), verify in TF, export, check and run
    the artifact."""
    from rewriter import passes
    from rewriter.export.saved_model import export_saved_model

    timings, progress, target = ctx.timings, ctx.progress, ctx.target
    with _timed(timings, "rewrite"), progress("planning and rewriting"):
        the_plan, result = passes.plan_and_apply(ctx.model, target, ctx.quantize,
                                                 ctx.opts.exact_only, exclude)
    report: dict[str, Any] = {"plan": the_plan.to_json()}
    rewritten = result.model
    report["rules_applied"] = _rules_summary(result.applied)
    report["rejected_matches"] = result.rejected[:50]
    with _timed(timings, "check_rewritten"):
        after_graph = target.check_graph(rewritten, ctx.quantize)
    why = _unfixable_why(the_plan, target)
    report["unsupported_rewritten_graph"] = _with_fixes(after_graph.unsupported_summary(), {},
                                                        why)
    with _timed(timings, "verify_tf"), progress("verifying the rewritten graph in TF"):
        rewritten_out = _run_all(rewritten, ctx.samples)
        tf_cmp = _compare_rewritten(ctx.reference, rewritten_out, result.applied,
                                    len(ctx.samples))
    equivalence: dict[str, Any] = {"rewritten_tf": tf_cmp.to_json()}
    report["equivalence"] = equivalence
    warnings: list[str] = []
    report["plots"] = _numeric_diagnostics(ctx, the_plan, result, rewritten, rewritten_out,
                                           warnings)
    files: dict[str, str] = {}
    with _timed(timings, "saved_model"), progress("writing the rewritten SavedModel"):
        files["saved_model"] = export_saved_model(rewritten, ctx.outdir / "saved_model").path
    artifact_ok, export = _export(rewritten, target, ctx.quantize, ctx.calibration, ctx.opts,
                                  ctx.outdir, report, timings, progress, why)
    art_cmp = None
    if export is not None:
        from rewriter.report_html import error_histograms

        files["artifact"] = export.path
        warnings.extend(export.warnings)
        with _timed(timings, "verify_artifact"), progress("running the artifact"):
            art_cmp, art_out = _verify_artifact(export.path, target.artifact, ctx.quantize,
                                                ctx.model, ctx.samples, ctx.reference)
        report["plots"]["histograms"]["artifact"] = error_histograms(ctx.reference, art_out)
        if ctx.quantize == "int8" and target.artifact == "tflite":
            layers = _int8_layers(ctx, export.path, rewritten)
            report["int8_layers"] = layers.to_json()
            if not art_cmp.ok:
                warnings.append(layers.describe())
        equivalence["artifact"] = art_cmp.to_json()
        equivalence["artifact"]["runtime"] = ("LiteRT" if target.artifact == "tflite"
                                              else "ONNX Runtime")
    ok = bool(artifact_ok and tf_cmp.ok and art_cmp is not None and art_cmp.ok)
    return _Attempt(the_plan, ok, report, files, warnings, tf_cmp, art_cmp)


def _int8_layers(ctx: _Context, path: str, rewritten: Model) -> Any:
    """Every intermediate tensor of the int8 file against the rewritten float graph it was
    converted from (:mod:`rewriter.verify.int8_layers`)."""
    from rewriter.verify.int8_layers import int8_layer_errors

    with _timed(ctx.timings, "int8_layers"), ctx.progress("measuring int8 error per layer"):
        return int8_layer_errors(path, rewritten, ctx.samples[: max(ctx.opts.divergence_samples,
                                                                    4)])


def _numeric_diagnostics(ctx: _Context, the_plan: Any, result: Any, rewritten: Model,
                         rewritten_out: dict[str, np.ndarray],
                         warnings: list[str]) -> dict[str, Any]:
    """Error histograms, the first diverging node, and (opt-in) a check after every rule."""
    from rewriter.report_html import error_histograms
    from rewriter.verify.divergence import first_divergence

    plots: dict[str, Any] = {
        "histograms": {"rewritten_tf": error_histograms(ctx.reference, rewritten_out)}}
    if result.applied:
        with _timed(ctx.timings, "first_divergence"), ctx.progress(
                "comparing intermediate tensors"):
            div = first_divergence(ctx.model, rewritten, ctx.samples, result.applied,
                                   max_samples=ctx.opts.divergence_samples)
        plots["divergence"] = div.to_json()
        if not div.ok:
            warnings.append(div.describe())
    if ctx.opts.check_each_rule and the_plan.rules:
        from rewriter.verify.per_rule import check_each_rule, first_failure

        with _timed(ctx.timings, "check_each_rule"), ctx.progress("checking after each rule"):
            checks = check_each_rule(ctx.model, the_plan.rules,
                                     ctx.samples[: ctx.opts.divergence_samples])
        plots["per_rule"] = [c.to_json() for c in checks]
        bad = first_failure(checks)
        if bad is not None:
            warnings.append(bad.describe())
    return plots


def _retry_exclusions(the_plan: Any, target: Any, quantize: str, exact_only: bool,
                      report: dict[str, Any]) -> dict[str, Any] | None:
    """Rules to leave out of a second attempt when the artifact still holds an op they were
    meant to remove (the converter re-fused their output, or left it in float).

    The artifact op is traced back through the target's lowering table to the TF ops that
    become it; the rules planned for those ops are excluded when another rule the target can
    run exists for the op. None when there is nothing to retry.
    """
    from rewriter.passes import choose_rules

    bad = {u["op"] for u in report.get("unsupported_after") or []}
    if not bad:
        return None
    sources = {t for t in _lowering_sources(target) if set(target.lower(t) or ()) & bad}
    exclude: set[str] = set()
    for fix in the_plan.fixes:
        if fix["op"] not in sources:
            continue
        suspects = {fix["rule"], *fix.get("also", [])}
        alternatives, _ = choose_rules(fix["op"], target, quantize, exact_only, {},
                                  exclude | suspects)
        if alternatives:
            exclude |= suspects
    if not exclude:
        return None
    return {"exclude": sorted(exclude), "because": sorted(bad),
            "reason": "the exported artifact still held " + ", ".join(sorted(bad))
            + "; planned again without the rules for the ops that become it"}


def _lowering_sources(target: Any) -> list[str]:
    from rewriter.targets import lowering

    return list(lowering()["onnx" if target.artifact == "onnx" else "tflite"])


# ------------------------------------------------------------------------------- steps
@contextlib.contextmanager
def _timed(timings: dict[str, float], key: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[key] = round(time.perf_counter() - start, 3)


def _with_fixes(items: list[dict[str, Any]], planned: dict[str, str],
                why: dict[str, str]) -> list[dict[str, Any]]:
    """Unsupported-op groups with ``fix`` (the rule that fixed the op on this target, from
    ``planned``) or, for ops no rule could fix, ``fix: null`` and ``why`` (from the plan)."""
    out = []
    for item in items:
        item = {k: v for k, v in item.items() if k != "nodes"} | {
            "nodes": item.get("nodes", [])[:20]}
        item["fix"] = planned.get(item["op"])
        if item["fix"] is None and item["op"] in why:
            item["why"] = why[item["op"]]
        out.append(item)
    return out


def fixes_by_op(the_plan: Any) -> dict[str, str]:
    """TF op -> the rules that fixed it (comma-separated, in the order they ran)."""
    names: dict[str, list[str]] = {}
    for f in the_plan.fixes:
        for rule in (f["rule"], *f.get("also", [])):
            if rule not in names.setdefault(f["op"], []):
                names[f["op"]].append(rule)
    return {op: ", ".join(rules) for op, rules in names.items()}


def _unfixable_why(the_plan: Any, target: Any) -> dict[str, str]:
    """Why no rule fixed an op, keyed by TF op and by the target ops it becomes."""
    why: dict[str, str] = {}
    for u in the_plan.unfixable:
        text = u.get("why") or "no rule fits this target"
        why[u["op"]] = text
        for target_op in target.lower(u["op"]) or ():
            why.setdefault(target_op, f"{u['op']}: {text}")
    return why


def _placement(check: Any) -> dict[str, Any]:
    mapped, total = check.on_accelerator()
    return {"ops_total": total, "ops_on_accelerator": mapped,
            "percent_on_accelerator": round(100.0 * mapped / total, 1) if total else 100.0,
            "cut": check.cut}


def _rules_summary(applied: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per rule: matches, nodes replaced/created, and its exactness statement."""
    by_rule: dict[str, dict[str, Any]] = {}
    for a in applied:
        entry = by_rule.setdefault(a["rule"], {
            "rule": a["rule"], "count": 0, "exact": a["exact"], "bound": a["bound"],
            "exactness": "exact" if a["exact"] else _bound_text(a["bound"]),
            "roots": [], "nodes": [], "created": []})
        entry["count"] += 1
        entry["roots"].append(a["root"])
        entry["nodes"].extend(a["nodes"])
        entry["created"].extend(a["created"])
    return list(by_rule.values())


def _bound_text(bound: dict[str, Any] | None) -> str:
    if not bound:
        return "approximate"
    rng = bound.get("input_range")
    where = "for all x" if not rng or None in rng else f"for x in [{rng[0]:g}, {rng[1]:g}]"
    return f"max abs error {bound['max_abs_error']:.2g} {where}"


def _data(model: Model, opts: JobOptions, quantize: str, warnings: list[str]
          ) -> tuple[Any, Any]:
    """(verification Data, calibration Data or None), with provenance (``report["data"]``)."""
    from rewriter.verify.data import gather
    from rewriter.verify.input_scaling import input_scaling

    scaling = input_scaling(model)
    common = {"ranges": opts.input_ranges, "pixels": opts.pixels, "scaling": scaling}
    calibration = None
    if opts.calibration:
        calibration = gather(opts.calibration, model.inputs,
                             samples=opts.calibration_samples, **common)
        if calibration.nonfinite():
            raise UserError(f"{opts.calibration}: calibration data holds "
                            f"{calibration.nonfinite()} NaN/Inf value(s); the int8 converter "
                            "cannot calibrate on them: remove them")
    if opts.inputs:
        samples = gather(opts.inputs, model.inputs, samples=opts.samples, **common)
    elif calibration:
        samples = calibration.head(opts.samples)
    else:
        samples = gather(None, model.inputs, samples=opts.samples, seed=VERIFY_SEED, **common)
        warnings.append(f"verified on {len(samples.samples)} synthetic inputs (seeded; "
                        + "; ".join(f"{k}: {v}" for k, v in samples.mapping.items())
                        + "); give --data or --calibration with real data to measure on it")
    if quantize == "int8" and calibration is None:
        calibration = gather(None, model.inputs, samples=opts.calibration_samples,
                             seed=CALIBRATION_SEED, **common)
        warnings.append("int8 calibrated on synthetic inputs: accuracy on real data is "
                        "unmeasured; give --calibration (.npy, .npz or an image directory)")
    for d in (samples, calibration):
        warnings.extend(w for w in (d.warnings if d else []) if w not in warnings)
    return samples, calibration


def data_json(samples: Any, calibration: Any) -> dict[str, Any]:
    """``report["data"]``: what the verdict and the calibration rest on."""
    return {"verification": samples.to_json(),
            "calibration": calibration.to_json() if calibration is not None else None}


def _run_all(model: Model, samples: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    from rewriter.verify.metrics import stack_samples

    return stack_samples([model.run(s) for s in samples])


def _compare_rewritten(ref: dict[str, np.ndarray], test: dict[str, np.ndarray],
                       applied: list[dict[str, Any]], n: int) -> Any:
    from rewriter.verify.metrics import compare_within
    from rewriter.verify.tolerance import DEFAULT_POLICY

    return compare_within(ref, test, DEFAULT_POLICY.for_rewrite(applied, ref), n)


def _export(model: Model, target: Any, quantize: str, calibration: Any, opts: JobOptions,
            outdir: Path, report: dict[str, Any], timings: dict[str, float],
            progress: Callable[[str], Any], why: dict[str, str]) -> tuple[bool, Any]:
    """Export, then check the artifact (op table, Vela). Returns (artifact ok, ExportResult)."""
    from rewriter.export import ExportError

    path = outdir / f"model.{target.artifact}"
    try:
        with _timed(timings, "export"), progress(f"exporting {path.name} ({quantize})"):
            if target.artifact == "onnx":
                from rewriter.export.onnx import export_onnx

                export = export_onnx(model, path, opset=target.opset)
            else:
                from rewriter.export.tflite import export_tflite

                int8_io = opts.int8_io if opts.int8_io is not None else _wants_int8_io(target)
                export = export_tflite(model, path, quantize=quantize, calibration=calibration,
                                       int8_io=int8_io and quantize == "int8")
    except ExportError as exc:
        report["export"] = {"ok": False, **exc.to_json()}
        report["unsupported_after"] = [{"op": op, "count": 1, "reason": str(exc), "fix": None}
                                       for op in (exc.ops or ["?"])]
        report["artifact_ops"] = []
        return False, None
    report["export"] = {"ok": True, **export.to_json()}
    report["artifact_ops"] = list(export.ops)
    with _timed(timings, "check_artifact"), progress("checking the artifact against the table"):
        check = target.check_artifact(export.path)
    if getattr(target, "vela_config", None) and opts.run_vela:
        from rewriter.vela import reconcile, run_vela

        with _timed(timings, "vela"), progress(f"compiling with Vela ({target.vela_config})"):
            vela = run_vela(export.path, target.vela_config, outdir)
        report["vela"] = vela.to_json()
        report["vela"]["disagreements_with_table"] = reconcile(check, vela)
        if vela.output_tflite:
            report["vela"]["output_tflite"] = vela.output_tflite
    report["unsupported_after"] = _with_fixes(check.unsupported_summary(), {}, why)
    report["placement_after"] = _placement(check)
    return bool(check.ok), export


def _wants_int8_io(target: Any) -> bool:
    """Int8 accelerators (Edge TPU, Ethos-U) get int8 input/output: float I/O would add a
    QUANTIZE and a DEQUANTIZE that run on the CPU."""
    return getattr(target, "default_quantize", "none") == "int8"


def _verify_artifact(path: str, kind: str, quantize: str, model: Model,
                     samples: list[dict[str, np.ndarray]], reference: dict[str, np.ndarray]
                     ) -> tuple[Any, dict[str, np.ndarray]]:
    from rewriter.verify.metrics import compare_within, stack_samples
    from rewriter.verify.runners import LiteRTRunner, OnnxRunner, rename_outputs
    from rewriter.verify.tolerance import DEFAULT_POLICY

    names = [o.name for o in model.outputs]
    try:
        runner = OnnxRunner(path) if kind == "onnx" else LiteRTRunner(path)
        outs = stack_samples([rename_outputs(o, names) for o in runner.run_many(samples)])
    except UserError as exc:
        raise UserError(f"the exported artifact does not run: {exc}") from None
    tolerance = DEFAULT_POLICY.for_artifact(quantize, reference)
    return compare_within(reference, outs, tolerance, len(samples)), outs


def _summary(report: dict[str, Any], tf_cmp: Any, art_cmp: Any, synthetic: bool) -> str:
    parts = []
    before = report.get("unsupported_before") or []
    after = report.get("unsupported_after")
    parts.append(f"{sum(u['count'] for u in before)} unsupported op(s) before rewriting"
                 f" ({', '.join(sorted({u['op'] for u in before})) or 'none'})")
    n_rules = sum(r["count"] for r in report.get("rules_applied", []))
    parts.append(f"{n_rules} rewrite(s) applied")
    if after is not None:
        parts.append(f"{sum(u['count'] for u in after)} unsupported op(s) in the artifact")
    if "vela" in report:
        v = report["vela"]
        parts.append(f"Vela: {v['npu_ops']} NPU / {v['cpu_ops']} CPU operators")
    parts.append(f"rewritten TF graph {'matches' if tf_cmp.ok else 'DOES NOT match'}"
                 + _nonfinite(tf_cmp, "rewritten graph"))
    if art_cmp is not None:
        worst = min((o.cosine for o in art_cmp.outputs), default=1.0)
        parts.append(f"artifact {'matches' if art_cmp.ok else 'DOES NOT match'} "
                     f"(min cosine {worst:.5f})" + _nonfinite(art_cmp, "artifact"))
    if synthetic:
        parts.append("verified on SYNTHETIC data only (give --data or --calibration)")
    return "; ".join(parts) + "."


def _nonfinite(cmp: Any, who: str) -> str:
    text = cmp.nonfinite_text("original", who)
    return f" [NaN/Inf: {text}]" if text else ""
