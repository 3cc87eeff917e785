"""``rewrite merge FIRST SECOND -o OUT.pb``: two models in one frozen graph, FIRST feeding SECOND.

Seed 002's "mix multiple graphs in one graph, careful with namespaces": FIRST's nodes go under
``first/`` (``--names``), SECOND's under ``second/``, SECOND's inputs are fed by FIRST's outputs
(``--connect OUTPUT=INPUT``, default in order). The merged graph is checked against running the
two models one after the other. ``rewrite unfreeze OUT.pb`` then makes the whole thing trainable.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np

from rewriter.frontends.options import add_load_options, load_options

HELP = "put two models in one graph under namespaces, the first feeding the second"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("first", help="the model whose outputs feed the second (any TF format)")
    parser.add_argument("second", help="the model fed by the first (any TF format)")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.pb",
                        help="merged frozen graph (.pb binary or .pbtxt text)")
    parser.add_argument("--connect", action="append", default=[], metavar="OUTPUT=INPUT",
                        help="FIRST's output feeding SECOND's input, by signature name "
                        "(repeatable; default: outputs to inputs in order)")
    parser.add_argument("--names", default="first,second", metavar="A,B",
                        help="namespaces of the two models (default first,second)")
    parser.add_argument("--tolerance", type=float, default=1e-5,
                        help="max abs error allowed against running the two models in turn")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_load_options(parser)


def run(args: argparse.Namespace, ui: Any) -> int:
    from rewriter.errors import UserError
    from rewriter.frontends import load_model
    from rewriter.surgery.merge import merge_models, merged_reference, parse_connections
    from rewriter.verify.data import synthetic_inputs

    names = tuple(n.strip() for n in args.names.split(","))
    if len(names) != 2:
        raise UserError(f"--names {args.names!r} is not A,B")
    if os.path.isdir(args.output) or os.path.isfile(args.output):
        raise UserError(f"output path {args.output!r} exists; choose a new .pb path")
    from pathlib import Path

    from rewriter.host.fs import refuse_inputs

    refuse_inputs(Path(args.output).resolve(), args.output, [args.first, args.second])
    conns = parse_connections(args.connect)
    with ui.step("loading both models"):
        first = load_model(args.first, load_options(args))
        second = load_model(args.second, load_options(args))
    merged = merge_models(first, second, conns, names, args.output)  # type: ignore[arg-type]
    feeds = synthetic_inputs(merged.inputs, 1, seed=0)[0]
    with ui.step("checking the merged graph against the two models in turn"):
        got = merged.run(feeds)
        want = merged_reference(first, second, merged, conns, feeds)
    err = max((float(np.max(np.abs(np.asarray(got[k], np.float64) - np.asarray(v, np.float64))))
               for k, v in want.items() if np.size(v)), default=0.0)
    _write(merged.graph_def, args.output)
    ok = err <= args.tolerance
    info = {"ok": ok, "output": args.output, "namespaces": list(names),
            "nodes": len(merged.graph_def.node), "max_abs_error": err,
            **merged.signature_json()}
    if args.json:
        ui.json(info)
    else:
        ui.out(f"wrote {args.output}: {info['nodes']} nodes, {names[0]}/ feeding {names[1]}/")
        ui.out("inputs: " + ", ".join(f"{i.name} ({i.tensor})" for i in merged.inputs))
        ui.out("outputs: " + ", ".join(f"{o.name} ({o.tensor})" for o in merged.outputs))
        ui.out(f"merged vs the two models in turn: max abs error {err:.3g}")
    if not ok:
        ui.warn(f"merged graph differs by {err:.3g} (tolerance {args.tolerance:g})")
        return 1
    return 0


def _write(graph_def: Any, path: str) -> None:
    from google.protobuf import text_format

    from rewriter.host.fs import atomic_write_bytes

    text = path.lower().endswith(".pbtxt")
    data = text_format.MessageToString(graph_def).encode() if text else \
        graph_def.SerializeToString()
    atomic_write_bytes(path, data)
