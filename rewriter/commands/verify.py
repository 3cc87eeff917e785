"""``rewrite verify A B``: are two models numerically the same? For people and CI pipelines.

A is the reference, B the model checked against it; each may be any supported format (``.keras``,
``.h5``, SavedModel, ``.pb``, ``.tflite`` (LiteRT, or TFLite Micro with ``--tflm``), ``.onnx``).
Both run on the same samples (``--inputs`` file or image directory, else seeded synthetic data);
every output is compared with per-output tolerances, and a mismatch prints the tolerance that
would have been needed. Exit 0 match, 1 mismatch, 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from rewriter.errors import UserError

HELP = "compare the outputs of two models (any formats); exit 1 on mismatch"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reference", help="reference model (A)")
    parser.add_argument("candidate", help="model to check against A (B)")
    d = parser.add_argument_group("input data")
    d.add_argument("--inputs", dest="data", metavar="FILE|DIR",
                   help=".npy, .npz keyed by input name, or a directory of images "
                        "(default: seeded synthetic data)")
    d.add_argument("--samples", type=int, default=4, metavar="N",
                   help="number of samples (synthetic), or at most N from --inputs (default 4)")
    d.add_argument("--seed", type=int, default=0, help="seed of synthetic data (default 0)")
    d.add_argument("--input-range", action="append", default=[], metavar="[NAME:]LO,HI",
                   help="range of synthetic data, and of image pixels (default [-1,1]; images "
                        "0..255)")
    t = parser.add_argument_group("tolerances (per output with NAME:VALUE; repeatable)")
    t.add_argument("--atol", action="append", default=[], metavar="[NAME:]X",
                   help="absolute tolerance (default 1e-5 x max |reference| per output)")
    t.add_argument("--rtol", action="append", default=[], metavar="[NAME:]X",
                   help="relative tolerance (default 1e-5)")
    t.add_argument("--min-cosine", action="append", default=[], metavar="[NAME:]X",
                   help="also require cosine similarity >= X (e.g. 0.99 for int8); given "
                        "alone, element-wise tolerances are not checked")
    parser.add_argument("--tflm", action="store_true",
                        help="run .tflite files in TFLite Micro instead of LiteRT")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    g = parser.add_argument_group("loading TF models")
    g.add_argument("--signature", help="SavedModel signature (default: serving_default)")
    g.add_argument("--graph-inputs", metavar="NAMES",
                   help="comma-separated input tensors of a frozen .pb or checkpoint")
    g.add_argument("--graph-outputs", metavar="NAMES",
                   help="comma-separated output tensors of a frozen .pb or checkpoint")
    g.add_argument("--input-shape", action="append", default=[], metavar="NAME:D0,D1,...",
                   help="fix an input's shape (repeatable)")
    g.add_argument("--unsafe", action="store_true",
                   help="allow Keras Lambda layers (runs code stored in the model file)")


def run(args: argparse.Namespace, ui: Any) -> int:
    from rewriter.verify.metrics import compare

    if args.samples < 1:
        raise UserError("--samples must be at least 1")
    with ui.step(f"loading {args.reference} and {args.candidate}"):
        ref, cand = _load(args.reference, args), _load(args.candidate, args)
    in_how = _check_inputs(ref, cand)
    samples, source = _samples(args, ref)
    with ui.step(f"running {len(samples)} sample(s) through both models"):
        ref_out, cand_out, out_how = _run_both(ref, cand, samples)
    names = ref.outputs
    atol = _tolerances(args.atol, "--atol", names)
    rtol = _tolerances(args.rtol, "--rtol", names)
    min_cos = _tolerances(args.min_cosine, "--min-cosine", names)
    if min_cos is not None and not args.atol and not args.rtol:
        atol, rtol = math.inf, 0.0
    result = compare(ref_out, cand_out, atol=atol, rtol=rtol, min_cosine=min_cos,
                     samples=len(samples))
    result.notes += [f"inputs matched {in_how}", f"outputs matched {out_how}"]
    report = {**result.to_json(), "reference": ref.describe(), "candidate": cand.describe(),
              "data": source}
    if ui.json_mode:
        ui.json(report)
    else:
        _print(ui, ref, cand, source, result)
    return 0 if result.ok else 1


def _load(path: str, args: argparse.Namespace) -> Any:
    from rewriter.commands._common import parse_input_shapes
    from rewriter.frontends import LoadOptions
    from rewriter.verify.runners import load_any

    def split(v: str | None) -> list[str] | None:
        return [x.strip() for x in v.split(",") if x.strip()] if v else None

    options = LoadOptions(signature=args.signature, inputs=split(args.graph_inputs),
                          outputs=split(args.graph_outputs),
                          input_shapes=parse_input_shapes(args.input_shape),
                          unsafe=args.unsafe)
    return load_any(path, options, tflite_runtime="tflm" if args.tflm else "litert")


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


def _samples(args: argparse.Namespace, ref: Any) -> tuple[list[dict], dict[str, Any]]:
    from rewriter.verify.data import DEFAULT_RANGE, load_inputs, parse_ranges, synthetic_inputs

    ranges = parse_ranges(args.input_range, ref.inputs)
    if args.data:
        samples = load_inputs(args.data, ref.inputs, samples=args.samples, ranges=ranges)
        return samples, {"source": args.data, "samples": len(samples)}
    samples = synthetic_inputs(ref.inputs, samples=args.samples, seed=args.seed, ranges=ranges)
    shown = {i.name: list(ranges.get(i.name, DEFAULT_RANGE)) for i in ref.inputs}
    return samples, {"source": "synthetic", "samples": len(samples), "seed": args.seed,
                     "ranges": shown}


def _run_both(ref: Any, cand: Any, samples: list[dict]) -> tuple[dict, dict, str]:
    from rewriter.verify.metrics import stack_samples
    from rewriter.verify.runners import match_names

    ref_runs = ref.run_many(samples)
    cand_runs = cand.run_many(samples)
    mapping, how = match_names(ref.outputs, cand.outputs, "output")
    cand_runs = [{n: run[mapping[n]] for n in ref.outputs} for run in cand_runs]
    return stack_samples(ref_runs), stack_samples(cand_runs), how


def _tolerances(items: list[str], flag: str, names: list[str]) -> dict[str, float] | None:
    """``[NAME:]X`` values as {name or "*": X}; None when none were given."""
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
        if sep and name not in names:
            raise UserError(f"{flag} names unknown output {name!r}; outputs: {', '.join(names)}")
        tol[name if sep else "*"] = x
    return tol


def _fmt(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else str(x)


def _fmt_up(x: float) -> str:
    """``x`` rounded *up* to 3 significant digits, so the printed tolerance passes."""
    if not math.isfinite(x) or x <= 0:
        return _fmt(x)
    step = 10 ** (math.floor(math.log10(x)) - 2)
    return f"{math.ceil(x / step - 1e-9) * step:.3g}"


def _print(ui: Any, ref: Any, cand: Any, source: dict[str, Any], result: Any) -> None:
    ui.out(f"reference  {ref.describe()}")
    ui.out(f"candidate  {cand.describe()}")
    ui.out(f"data       {source['samples']} sample(s), {source['source']}; "
           + "; ".join(result.notes))
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
    ui.out("match" if result.ok else "MISMATCH")


def _why(o: Any) -> str:
    if o.note.startswith("shape mismatch"):
        return f"{o.name}: {o.note}"
    parts = []
    if o.mismatched:
        parts.append(f"{o.mismatched} of {o.size} element(s) outside "
                     f"atol {_fmt(o.atol)} + rtol {_fmt(o.rtol)} x |ref|")
        parts.append(f"would need --atol {o.name}:{_fmt_up(o.needed_atol)} (at rtol "
                     f"{_fmt(o.rtol)}) or --rtol {o.name}:{_fmt_up(o.needed_rtol)} (at atol "
                     f"{_fmt(o.atol)})")
    if o.min_cosine is not None and o.cosine < o.min_cosine:
        parts.append(f"cosine {o.cosine:.6f} < {o.min_cosine}")
    if o.nonfinite_mismatch:
        parts.append(f"{o.nonfinite_mismatch} NaN/Inf element(s) differ")
    return f"{o.name}: " + "; ".join(parts)
