"""``rewrite unfreeze FROZEN.pb -o SAVEDMODEL``: a frozen graph made trainable again (seed 004).

The weight consts become ``tf.Variable``s, the SavedModel's ``serving_default`` is checked against
the frozen graph on seeded inputs, and the saved object is callable with ``variables`` and
``trainable_variables`` so training can resume. Exit 0 when the outputs agree within
``--tolerance``, 1 when they do not, 2 for bad input.
"""

from __future__ import annotations

import argparse
from typing import Any

from rewriter.frontends.options import add_load_options, load_options

HELP = "turn a frozen .pb back into a trainable SavedModel (weight consts become variables)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="FROZEN", help="frozen GraphDef (.pb binary or .pbtxt)")
    parser.add_argument("-o", "--output", required=True, metavar="SAVEDMODEL",
                        help="SavedModel directory to write")
    parser.add_argument("--weights", metavar="NAMES",
                        help="comma-separated Const node names (or fnmatch patterns such as "
                        "'*/kernel') to lift, instead of detecting them")
    parser.add_argument("--to-keras", action="store_true",
                        help="also write OUT/model.keras, a Keras model wrapping the graph with "
                        "its weights as Keras variables")
    parser.add_argument("--tolerance", type=float, default=1e-5,
                        help="max abs error allowed between the SavedModel and the frozen graph "
                        "(default 1e-5)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_load_options(parser)


#: What unfreeze writes into OUT (an existing OUT holding only these may be replaced).
OUTPUTS = ("saved_model.pb", "variables", "assets", "fingerprint.pb", "model.keras")


def run(args: argparse.Namespace, ui: Any) -> int:
    from rewriter.host.fs import staged_output
    from rewriter.surgery.unfreeze import unfreeze

    names = [n.strip() for n in (args.weights or "").split(",") if n.strip()] or None
    with staged_output(args.output, [args.model], OUTPUTS, "unfreeze") as stage, \
            ui.step(f"unfreezing {args.model}"):
        result = unfreeze(args.model, str(stage.path), names, load_options(args),
                          to_keras=args.to_keras)
        result.output = stage.relocate(result.output)
        result.keras = stage.relocate(result.keras)
    errors = [result.max_abs_error, result.keras_max_abs_error if args.to_keras else 0.0]
    worst = max(e if e is not None else float("inf") for e in errors)
    ok = worst <= args.tolerance
    if args.json:
        ui.json({"ok": ok, "tolerance": args.tolerance, **result.to_json()})
    else:
        _print(result, ui)
    if not ok:
        ui.warn(f"the unfrozen model differs from the frozen graph by {worst:.3g} "
                f"(tolerance {args.tolerance:g})")
        return 1
    return 0


def _print(result: Any, ui: Any) -> None:
    rows = [(w.name, f"{w.dtype}{list(w.shape)}", "trainable" if w.trainable else "statistic",
             w.reason) for w in result.weights]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for name, shape, kind, reason in rows:
        ui.out(f"  {name:<{widths[0]}}  {shape:<{widths[1]}}  {kind:<{widths[2]}}  {reason}")
    info = result.to_json()
    ui.out(f"{info['variables']} variables ({info['trainable']} trainable, "
           f"{info['parameters']} parameters) written to {result.output}")
    ui.out(f"serving_default vs frozen graph: max abs error {result.max_abs_error:.3g}")
    if result.keras:
        ui.out(f"Keras model {result.keras} (import rewriter.surgery.keras_layer to load it): "
               f"max abs error {result.keras_max_abs_error:.3g}")
