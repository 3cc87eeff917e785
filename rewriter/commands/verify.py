"""``rewrite verify A B``: are two models numerically the same? For people and CI pipelines.

A is the reference, B the model checked against it; each may be any supported format (``.keras``,
``.h5``, SavedModel, ``.pb``, ``.tflite`` (LiteRT, or TFLite Micro with ``--tflm``), ``.onnx``).
Both run on the same samples (``--inputs`` file or image directory, else seeded synthetic data);
every output is compared with per-output tolerances, and a mismatch prints the tolerance that
would have been needed. Exit 0 match, 1 mismatch, 2 bad usage or input.

When A and B are both TF models (say ``model.keras`` and the ``out/saved_model`` that
``rewrite run`` wrote), ``--first-divergence`` compares every intermediate tensor by node name
(:mod:`rewriter.verify.divergence`) and ``--check-each-rule`` re-applies the rules recorded in
B's provenance to A one at a time (:mod:`rewriter.verify.per_rule`); a divergence or a breaking
rule also exits 1. ``--html`` writes the comparison as a page with |B - A| histograms
(:mod:`rewriter.report.html`).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from rewriter.commands._common import pixel_map
from rewriter.defaults import DATA_SAMPLES
from rewriter.errors import UserError
from rewriter.job.options import add_pixel_arguments

HELP = "compare the outputs of two models (any formats); exit 1 on mismatch"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from rewriter.verify.tolerance import EXACT_RTOL

    parser.add_argument("reference", help="reference model (A)")
    parser.add_argument("candidate", help="model to check against A (B)")
    d = parser.add_argument_group("input data")
    d.add_argument("--inputs", dest="data", metavar="FILE|DIR",
                   help=".npy, .npz keyed by input name, or a directory of images "
                        "(default: seeded synthetic data)")
    d.add_argument("--samples", type=int, default=None, metavar="N",
                   help="number of samples (synthetic, default 4), or at most N from --inputs "
                   f"(default {DATA_SAMPLES})")
    d.add_argument("--seed", type=int, default=None, help="seed of synthetic data (default 0)")
    d.add_argument("--input-range", action="append", default=[], metavar="[NAME:]LO,HI",
                   help="range of synthetic data (default: what the model's input Rescaling/"
                        "Normalization layer or --pixel-range implies, else -1,1)")
    t = parser.add_argument_group("tolerances (per output with NAME:VALUE; repeatable)")
    t.add_argument("--atol", action="append", default=[], metavar="[NAME:]X",
                   help=f"absolute tolerance (default {EXACT_RTOL:g} x max |reference| per "
                        "output)")
    t.add_argument("--rtol", action="append", default=[], metavar="[NAME:]X",
                   help=f"relative tolerance (default {EXACT_RTOL:g})")
    t.add_argument("--min-cosine", action="append", default=[], metavar="[NAME:]X",
                   help="also require cosine similarity >= X (e.g. 0.99 for int8); given "
                        "alone, element-wise tolerances are not checked")
    add_pixel_arguments(parser)
    parser.add_argument("--tflm", action="store_true",
                        help="run .tflite files in TFLite Micro instead of LiteRT")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    x = parser.add_argument_group("inside the graphs (A and B TF models, e.g. model.keras and "
                                  "the out/saved_model that `rewrite run` wrote)")
    x.add_argument("--first-divergence", action="store_true",
                   help="compare every intermediate tensor of A and B by node name and report "
                        "the first node out of its bound, and the rule that produced it (exit 1 "
                        "when one is)")
    x.add_argument("--check-each-rule", action="store_true",
                   help="re-apply to A, one at a time, the rules recorded in B's provenance, "
                        "comparing outputs after each; names the rule and node that break them "
                        "(exit 1 when one does)")
    parser.add_argument("--html", metavar="FILE.html",
                        help="also write a self-contained HTML page: metrics and |B - A| "
                             "histograms per output")
    g = parser.add_argument_group("loading TF models")
    g.add_argument("--signature", help="SavedModel signature (default: serving_default)")
    g.add_argument("--graph-inputs", metavar="NAMES",
                   help="comma-separated input tensors of a frozen .pb or checkpoint")
    g.add_argument("--graph-outputs", metavar="NAMES",
                   help="comma-separated output tensors of a frozen .pb or checkpoint")
    g.add_argument("--input-shape", action="append", default=[], metavar="NAME:D0,D1,...",
                   help="fix an input's shape (repeatable)")
    g.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="settings",
                   help="bake a scalar placeholder in as a constant in both models (e.g. "
                   "is_training=false); training flags are false by default")
    g.add_argument("--unsafe", action="store_true",
                   help="allow Keras Lambda layers (runs code stored in the model file)")


def validate(args: argparse.Namespace) -> None:
    """Both model paths and the data path, checked before TensorFlow is imported."""
    from rewriter.commands._common import validate_data_path, validate_model_path

    validate_model_path(args.reference, artifact_ok=True)
    validate_model_path(args.candidate, artifact_ok=True)
    validate_data_path(args.data, "--inputs")
    if args.samples is not None and args.samples < 1:
        raise UserError("--samples must be at least 1")
    if args.html and (not args.html.lower().endswith((".html", ".htm"))
                      or Path(args.html).is_dir()):
        raise UserError(f"--html {args.html!r}: give a file name ending in .html")
    for items, flag in ((args.atol, "--atol"), (args.rtol, "--rtol"),
                        (args.min_cosine, "--min-cosine")):
        _tolerances(items, flag, None)


def run(args: argparse.Namespace, ui: Any) -> int:
    from rewriter.verify.metrics import compare

    with ui.step(f"loading {args.reference} and {args.candidate}"):
        ref, cand = _load(args.reference, args), _load(args.candidate, args)
    in_how = _check_inputs(ref, cand)
    job = job_of(args.reference, args.candidate)
    data = _samples(args, ref, cand, job)
    samples = data.samples
    with ui.step(f"running {len(samples)} sample(s) through both models"):
        ref_out, cand_out, out_how = _run_both(ref, cand, samples)
    names = ref.outputs
    atol = _tolerances(args.atol, "--atol", names)
    rtol = _tolerances(args.rtol, "--rtol", names)
    min_cos = _tolerances(args.min_cosine, "--min-cosine", names)
    from rewriter.verify.tolerance import EXACT_RTOL

    given = bool(args.atol or args.rtol or args.min_cosine)
    criterion_notes: list[str] = []
    if not given and job is not None and job.criterion and data.recipe.get("job"):
        atol, rtol, min_cos = job.criterion
        criterion_notes.append(f"tolerances: the job's ({job.describe()})")
    else:
        quantized = [r.path for r in (ref, cand) if _quantized(r)]
        if quantized and not given:  # the main job's int8 criterion, so both agree
            from rewriter.verify.tolerance import DEFAULT_POLICY, judged_by

            min_cos = DEFAULT_POLICY.int8_min_cosine
            criterion_notes.append(
                f"{', '.join(quantized)} is quantized: compared by "
                f"{judged_by(f'cosine >= {min_cos}', ref_out)} (the main job's int8 "
                "criterion); element-wise tolerances would measure quantization error (give "
                "--atol/--rtol to use them)")
        elif not given:
            criterion_notes.append(f"tolerances: defaults ({EXACT_RTOL:g} relative to each "
                                   "output's scale; give --atol/--rtol/--min-cosine)")
        if min_cos is not None and not args.atol and not args.rtol:
            atol, rtol = math.inf, 0.0
    result = compare(ref_out, cand_out, atol=atol, rtol=rtol, min_cosine=min_cos,
                     samples=len(samples))
    result.notes += [f"inputs matched {in_how}", f"outputs matched {out_how}",
                     *criterion_notes]
    source = data.to_json()
    report = {**result.to_json(), "reference": ref.describe(), "candidate": cand.describe(),
              "data": source}
    if args.first_divergence or args.check_each_rule:
        _inside(args, ui, ref, cand, samples, report)
    if args.html:
        report["html"] = str(_write_html(args.html, report, result, ref_out, cand_out))
    if ui.json_mode:
        ui.json(report)
    else:
        _print(ui, ref, cand, source, result, report)
    inside_ok = (report.get("divergence") or {}).get("ok", True) and all(
        c["ok"] for c in report.get("per_rule", []))
    return 0 if result.ok and inside_ok else 1


def _load(path: str, args: argparse.Namespace) -> Any:
    from rewriter.frontends import LoadOptions
    from rewriter.frontends.options import parse_input_shapes, parse_settings
    from rewriter.verify.factory import load_any

    def split(v: str | None) -> list[str] | None:
        return [x.strip() for x in v.split(",") if x.strip()] if v else None

    options = LoadOptions(signature=args.signature, inputs=split(args.graph_inputs),
                          outputs=split(args.graph_outputs),
                          input_shapes=parse_input_shapes(args.input_shape),
                          unsafe=args.unsafe, settings=parse_settings(args.settings))
    return load_any(path, options, tflite_runtime="tflm" if args.tflm else "litert")


def _inside(args: argparse.Namespace, ui: Any, ref: Any, cand: Any, samples: list[dict],
            report: dict[str, Any]) -> None:
    """--first-divergence / --check-each-rule: report["divergence"] / report["per_rule"]."""
    from rewriter.verify.divergence import first_divergence, rules_from_provenance
    from rewriter.verify.per_rule import check_each_rule

    a, b = getattr(ref, "model", None), getattr(cand, "model", None)
    if a is None or b is None:
        flag = "--first-divergence" if args.first_divergence else "--check-each-rule"
        raise UserError(f"{flag} needs two TF models (.keras, .h5, SavedModel, .pb), not "
                        f"{ref.describe()} and {cand.describe()}")
    if args.first_divergence:
        with ui.step("comparing the intermediate tensors of both graphs"):
            report["divergence"] = first_divergence(a, b, samples).to_json()
    if args.check_each_rule:
        rules = _recorded_rules(rules_from_provenance(b, a))
        with ui.step(f"re-applying {len(rules)} recorded rule(s) one at a time"):
            checks = check_each_rule(a, rules, samples[:4]) if rules else []
        report["per_rule"] = [c.to_json() for c in checks]
        report["per_rule_rules"] = [r.name for r in rules]


def _recorded_rules(apps: list[dict[str, Any]]) -> list[Any]:
    """The distinct rules of ``apps`` that this installation knows, in plan order."""
    from rewriter.rules import all_rules

    names = {a["rule"] for a in apps}
    return sorted((r for r in all_rules() if r.name in names),
                  key=lambda r: (r.order, r.sort_key()))


def _quantized(runner: Any) -> bool:
    """Whether a runner runs a quantized ``.tflite`` (any int8/uint8/int16 tensor)."""
    interp = getattr(runner, "interp", None)
    if interp is None:
        return False
    kinds = ("int8", "uint8", "int16")
    return any(getattr(d["dtype"], "__name__", str(d["dtype"])) in kinds
               for d in interp.get_tensor_details())


def _check_inputs(ref: Any, cand: Any) -> str:
    """How inputs were matched; UserError when their shapes differ."""
    from rewriter.verify.data import static
    from rewriter.verify.runners import match_names

    mapping, how = match_names([i.name for i in ref.inputs], [i.name for i in cand.inputs],
                               "input")
    by_name = {i.name: i for i in cand.inputs}
    for spec in ref.inputs:
        other = by_name[mapping[spec.name]]
        a, b = static(spec.shape), static(other.shape)
        if a != b and math.prod(a) != math.prod(b):
            raise UserError(f"input {spec.name!r} has shape {list(a)} in {ref.path} but "
                            f"{list(b)} in {cand.path}")
    return how


def _samples(args: argparse.Namespace, ref: Any, cand: Any, job: Any) -> Any:
    """The comparison's data: the job's own (when B was written by a job on A and no data
    option is given), else ``--inputs`` or synthetic data, as :class:`~rewriter.verify.data.
    Data`."""
    from rewriter.verify.data import gather, parse_ranges

    pixels = pixel_map(args)
    own = args.data or args.input_range or pixels or args.seed is not None or args.samples
    if job is not None and not own:
        data = job.data(ref.inputs)
        if data is not None:
            return data
    tf_model = next((getattr(r, "model", None) for r in (ref, cand)
                     if getattr(r, "model", None) is not None), None)
    scaling = {}
    if tf_model is not None:
        from rewriter.verify.input_scaling import input_scaling

        scaling = input_scaling(tf_model)
    count = args.samples or (DATA_SAMPLES if args.data else 4)
    data = gather(args.data, ref.inputs, samples=count,
                  seed=args.seed if args.seed is not None else 0,
                  ranges=parse_ranges(args.input_range, ref.inputs), pixels=pixels,
                  scaling=scaling)
    if job is not None:
        data.notes.append(f"{job.why_not_data(own)}")
    return data


def job_of(reference: str, candidate: str) -> Any:
    """The job that wrote ``candidate`` (its ``report.json`` beside it), when A is its input."""
    from rewriter.verify.job import find_job

    return find_job(reference, candidate)


def _run_both(ref: Any, cand: Any, samples: list[dict]) -> tuple[dict, dict, str]:
    """Both models on the samples; B's outputs keyed by A's names (and how they matched)."""
    from rewriter.job.stages import run_samples
    from rewriter.verify.runners import match_names

    _, how = match_names(ref.outputs, cand.outputs, "output")
    return run_samples(ref, samples), run_samples(cand, samples, ref.outputs), how


def _tolerances(items: list[str], flag: str,
                names: list[str] | None) -> dict[str, float] | None:
    """``[NAME:]X`` values as {name or "*": X}; None when none were given. Output names are
    checked against ``names`` unless it is None (syntax only, before the models are loaded)."""
    if not items:
        return None
    tol: dict[str, float] = {}
    for item in items:
        name, sep, value = item.rpartition(":")
        try:
            x = float(value)
        except ValueError:
            raise UserError(f"{flag} {item!r} is not [NAME:]NUMBER") from None
        if x < 0 or math.isnan(x):
            raise UserError(f"{flag} {item!r} must be a non-negative number")
        if sep and names is not None and name not in names:
            raise UserError(f"{flag} names unknown output {name!r}; outputs: {', '.join(names)}")
        tol[name if sep else "*"] = x
    return tol


def _write_html(path: str, report: dict[str, Any], result: Any, ref_out: dict,
                cand_out: dict) -> Path:
    """The comparison as ``report.html`` (see :mod:`rewriter.report.html`) at ``path``."""
    from rewriter.report.html import write_html
    from rewriter.verify.histograms import error_histograms

    out = Path(path)
    data = report["data"]
    page = {"title": f"rewrite verify: {Path(report['reference'].split(':', 1)[-1]).name} vs "
                     f"{Path(report['candidate'].split(':', 1)[-1]).name}",
            "ok": result.ok,
            "summary": f"reference {report['reference']}; candidate {report['candidate']}; "
                       f"{data['samples']} sample(s) from {data['source']}; "
                       + "; ".join(result.notes),
            "equivalence": {"candidate": result.to_json()},
            "plots": {"histograms": {"candidate": error_histograms(ref_out, cand_out)}}}
    for key in ("divergence", "per_rule"):
        if report.get(key) is not None:
            page["plots"][key] = report[key]
    try:
        return write_html(out.parent, page, name=out.name)
    except OSError as exc:
        raise UserError(f"--html {path}: cannot write it ({exc.strerror or exc})") from None


def _as_float(v: Any) -> float:
    return float(v)  # JSON writes inf as "inf"


def _fmt(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else str(x)


def _fmt_up(x: float) -> str:
    """``x`` rounded *up* to 3 significant digits, so the printed tolerance passes."""
    if not math.isfinite(x) or x <= 0:
        return _fmt(x)
    step = 10 ** (math.floor(math.log10(x)) - 2)
    return f"{math.ceil(x / step - 1e-9) * step:.3g}"


def _print(ui: Any, ref: Any, cand: Any, source: dict[str, Any], result: Any,
           report: dict[str, Any]) -> None:
    ui.out(f"reference  {ref.describe()}")
    ui.out(f"candidate  {cand.describe()}")
    ui.out(f"data       {source['samples']} sample(s), {source['source']}"
           + "".join(f"; {name}: {i['mapping']}" for name, i in source["inputs"].items())
           + "".join(f"; {n}" for n in source["notes"]))
    ui.out("compare    " + "; ".join(result.notes))
    header = ("output", "shape", "max_abs", "max_rel", "rmse", "cosine", "atol", "rtol", "")
    rows = [header]
    for o in result.outputs:
        rows.append((o.name, "x".join(map(str, o.shape)), _fmt(o.max_abs_error),
                     _fmt(o.max_rel_error), _fmt(o.rmse), f"{o.cosine:.6f}", _fmt(o.atol),
                     _fmt(o.rtol), "ok" if o.ok else "MISMATCH"))
    widths = [max(len(r[k]) for r in rows) for k in range(len(header))]
    for r in rows:
        ui.out("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    for o in result.failing():
        ui.out(_why(o))
    if result.degenerate_text():
        ui.out(f"note       {result.degenerate_text()}")
    div = report.get("divergence")
    if div is not None:
        ui.out(f"inside     {div['summary']}")
    if "per_rule" in report:
        checks = report["per_rule"]
        if not checks:
            ui.out("per rule   B records no rewrite rule")
        for c in checks:
            where = c["node"] or f"{len(c['roots'])} node(s)"
            state = "ok" if c["ok"] else (f"ERROR {c['error']}" if c["error"] else "MISMATCH")
            ui.out(f"per rule   {c['step']}. {c['rule']} at {where}: {state} (max abs "
                   f"{_fmt(_as_float(c['max_abs_error']))}; {c['tolerance']})")
    if "html" in report:
        ui.out(f"html       {report['html']}")
    ui.out("match" if result.ok else "MISMATCH")


def _why(o: Any) -> str:
    if o.note.startswith("shape mismatch"):
        return f"{o.name}: {o.note}"
    parts = []
    if o.mismatched > o.nonfinite_mismatch:
        parts.append(f"{o.mismatched - o.nonfinite_mismatch} of {o.size} element(s) outside "
                     f"atol {_fmt(o.atol)} + rtol {_fmt(o.rtol)} x |ref|")
        parts.append(f"would need --atol {o.name}:{_fmt_up(o.needed_atol)} (at rtol "
                     f"{_fmt(o.rtol)}) or --rtol {o.name}:{_fmt_up(o.needed_rtol)} (at atol "
                     f"{_fmt(o.atol)})")
    if o.min_cosine is not None and o.cosine < o.min_cosine:
        parts.append(f"cosine {o.cosine:.6f} < {o.min_cosine}")
    if (o.min_index_agreement is not None and o.index_agreement is not None
            and o.index_agreement < o.min_index_agreement):
        parts.append(f"index agreement {o.index_agreement:.4f} < {o.min_index_agreement:g} "
                     "(share of equal indices; an integer output)")
    if o.nonfinite_mismatch:
        parts.append(f"{o.nonfinite_mismatch} non-finite element(s) ("
                     f"{o.nonfinite_text().split(': ', 1)[1]})")
    return f"{o.name}: " + "; ".join(parts)
