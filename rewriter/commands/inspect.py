"""``rewrite inspect``: what a model or checkpoint holds.

For an exported ``.tflite``/``.onnx`` (what the tool writes): inputs and outputs (names, shapes,
dtypes, int8 quantisation), the op histogram in the file, the ONNX opset, and the float islands
the int8 converter left (DEQUANTIZE -> op -> QUANTIZE). For a model: format, signature (names, shapes, dtypes), op histogram of the frozen graph and the
notes its front end made. For a checkpoint (TF1/TF2 prefix, Keras weights): variable names,
dtypes and shapes, as ``inspect_checkpoint`` prints them; ``--against MODEL`` diffs the
checkpoint against a model's variables (what would restore, what is new, unused, mismatched).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rewriter.commands._common import load_from_args
from rewriter.errors import UserError
from rewriter.frontends.options import add_model_arguments

HELP = "show a model's signature and ops, or a checkpoint's variables"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--against", metavar="MODEL",
                        help="diff a checkpoint's variables against this model's variables")
    parser.add_argument("--variables", action="store_true",
                        help="list a checkpoint's variables even when a .meta graph is present")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def validate(args: argparse.Namespace) -> None:
    """The model path, checked before TensorFlow is imported."""
    from rewriter.commands._common import validate_model_path

    validate_model_path(args.model, artifact_ok=True)
    if args.against:
        validate_model_path(args.against)


def _has_meta(path: str) -> bool:
    """A TF1 checkpoint path whose graph (.meta) is there too (prefix, file or directory)."""
    from rewriter.frontends.ckpt_files import checkpoint_prefix, is_checkpoint_path

    if not is_checkpoint_path(path):
        return Path(path + ".meta").exists()
    try:
        return Path(checkpoint_prefix(path)[0] + ".meta").exists()
    except UserError:
        return False


def run(args: argparse.Namespace, ui: Any) -> int:
    if Path(args.model).suffix in (".tflite", ".onnx") and not args.against:
        return _inspect_artifact(args.model, ui)
    surgery = _surgery()
    if args.against:
        if surgery is None:
            raise UserError("--against needs rewriter.surgery, which is not installed")
        return _inspect_checkpoint(args, ui, surgery)
    meta_missing = not _has_meta(args.model)
    if surgery is not None and surgery.is_checkpoint(args.model) and (
            args.variables or meta_missing):
        return _inspect_checkpoint(args, ui, surgery)
    with ui.step(f"loading {args.model}"):
        model = load_from_args(args)
    info: dict[str, Any] = {
        "path": model.source.path,
        "format": model.source.format,
        "signature": model.signature_json(),
        "ops": model.op_histogram(),
        "nodes": len(model.graph_def.node),
        "notes": model.source.notes,
    }
    if model.source.format == "checkpoint":
        import tensorflow as tf

        shapes = tf.compat.v1.train.NewCheckpointReader(
            model.source.path).get_variable_to_shape_map()
        info["variables"] = [{"name": n, "shape": list(shapes[n])} for n in sorted(shapes)]
    if ui.json_mode:
        ui.json(info)
        return 0
    ui.out(f"{info['path']}  ({info['format']}, {info['nodes']} nodes)")
    for title, specs in (("inputs", model.inputs), ("outputs", model.outputs)):
        ui.out(f"{title}:")
        for spec in specs:
            ui.out(f"  {spec.name:<24} {spec.dtype:<8} {list(spec.shape)}  <- {spec.tensor}")
    ui.out("ops:")
    for op, count in info["ops"].items():
        ui.out(f"  {op:<28} {count:>5}")
    if "variables" in info:
        ui.out(f"variables ({len(info['variables'])}):")
        for v in info["variables"]:
            ui.out(f"  {v['name']:<40} {v['shape']}")
    for note in info["notes"]:
        ui.out(f"note: {note}")
    return 0


def _inspect_artifact(path: str, ui: Any) -> int:
    """An exported file: what is in it, read without running it."""
    from rewriter.targets.artifact import read_artifact

    art = read_artifact(path)
    info: dict[str, Any] = {
        "path": path, "format": art.kind, "opset": art.opset,
        "signature": {"inputs": art.inputs, "outputs": art.outputs},
        "ops": art.histogram(), "operators": len(art.ops),
        "notes": [{"op": f.op, "node": f.node, "note": f.note} for f in art.ops if f.note],
    }
    if ui.json_mode:
        ui.json(info)
        return 0
    opset = f", opset {art.opset}" if art.opset else ""
    ui.out(f"{path}  ({art.kind}{opset}, {len(art.ops)} operators)")
    for title in ("inputs", "outputs"):
        ui.out(f"{title}:")
        for spec in info["signature"][title]:
            q = spec.get("quantization")
            qtext = f"  scale {q['scale']:.6g}, zero point {q['zero_point']}" if q else ""
            ui.out(f"  {spec['name']:<24} {spec['dtype'] or '?':<8} {list(spec['shape'])}{qtext}")
    ui.out("ops:")
    for op, count in info["ops"].items():
        ui.out(f"  {op:<28} {count:>5}")
    for n in info["notes"]:
        ui.out(f"note: {n['op']} ({n['node']}): {n['note']}")
    return 0


def _surgery() -> Any:
    try:
        from rewriter.surgery import checkpoints
    except ImportError:
        return None
    return checkpoints


def _inspect_checkpoint(args: argparse.Namespace, ui: Any, surgery: Any) -> int:
    if args.against:
        diff = surgery.diff_checkpoint(args.model, args.against, unsafe=args.unsafe)
        data = diff.to_json()
        if ui.json_mode:
            ui.json(data)
            return 0
        for key in ("restored", "new", "unused", "mismatched"):
            items = data.get(key, [])
            ui.out(f"{key} ({len(items)}):")
            for item in items:
                ui.out(f"  {item if isinstance(item, str) else _fmt_item(item)}")
        return 0
    variables = surgery.list_checkpoint_variables(args.model, args.unsafe)
    if ui.json_mode:
        ui.json({"path": args.model, "variables": [
            {"name": v.name, "dtype": v.dtype, "shape": list(v.shape)} for v in variables]})
        return 0
    for v in variables:
        ui.out(f"{v.name} ({v.dtype}) {list(v.shape)}")
    return 0


def _fmt_item(item: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in item.items())
