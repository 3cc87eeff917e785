"""Arguments and helpers shared by commands: how a model is named and loaded, output dirs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rewriter.errors import UserError
from rewriter.frontends import LoadOptions, detect_format, load_model
from rewriter.ir.model import Model


def add_model_arguments(parser: argparse.ArgumentParser, positional: str = "model") -> None:
    """The model path and the options every front end understands."""
    parser.add_argument(positional, help="model: .keras, .h5, SavedModel dir, frozen .pb/.pbtxt, "
                        "or a TF1 checkpoint prefix with its .meta")
    add_load_options(parser)


def add_load_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("loading")
    g.add_argument("--signature", help="SavedModel signature (default: serving_default)")
    g.add_argument("--inputs", dest="input_names", metavar="NAMES",
                   help="comma-separated input tensors of a graph (frozen .pb, checkpoint)")
    g.add_argument("--outputs", dest="output_names", metavar="NAMES",
                   help="comma-separated output tensors of a graph (frozen .pb, checkpoint)")
    g.add_argument("--input-shape", action="append", default=[], metavar="NAME:D0,D1,...",
                   help="fix an input's shape (repeatable); unknown batch defaults to 1; "
                   "NAME: alone is a scalar")
    g.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="settings",
                   help="bake a scalar placeholder in as a constant (repeatable), e.g. "
                   "is_training=false; tf.cond then folds to the branch taken. A bool "
                   "placeholder deciding tf.cond is a training flag, set false by default")
    g.add_argument("--unsafe", action="store_true",
                   help="allow models holding code: Keras Lambda layers and graph ops that "
                   "touch files, the network or Python (only for files you trust)")


def add_pixel_arguments(parser: argparse.ArgumentParser) -> None:
    """How images in a data directory become input values (:mod:`rewriter.verify.data`)."""
    g = parser.add_argument_group("images (when data is a directory of images)")
    g.add_argument("--pixel-range", metavar="LO,HI",
                   help="map pixels 0..255 linearly to LO..HI, the range the model was trained "
                        "on (e.g. 0,1 or -1,1); not needed when the model has a Rescaling or "
                        "Normalization layer at its input (it takes raw pixels)")
    g.add_argument("--pixel-norm", metavar="MEAN/STD",
                   help="map pixels p to (p - MEAN) / STD, one value or one per channel in RGB "
                        "order, pixel units (e.g. 123.7,116.3,103.5/58.4,57.1,57.4)")


def pixel_map(args: argparse.Namespace) -> object | None:
    from rewriter.verify.data import pixel_map_from_args

    return pixel_map_from_args(getattr(args, "pixel_range", None),
                               getattr(args, "pixel_norm", None))


def validate_model_path(path: str, artifact_ok: bool = False) -> None:
    """Refuse a model path that cannot be loaded, before TensorFlow is imported (a typo is
    reported at once); ``artifact_ok`` accepts a ``.tflite``/``.onnx`` file too."""
    if artifact_ok and Path(path).suffix in (".tflite", ".onnx"):
        if not Path(path).is_file():
            raise UserError(f"{path}: no such file")
        return
    fmt = detect_format(path)
    if fmt in ("keras", "h5"):  # sizes before reads, before TensorFlow takes its memory
        from rewriter.frontends.sizes import check_file

        check_file(path, fmt)


def validate_data_path(path: str | None, option: str) -> None:
    """Refuse a data file or directory (``--calibration``, ``--data``) that does not exist."""
    if path is not None and not Path(path).exists():
        raise UserError(f"{option} {path}: no such file or directory")


def load_options(args: argparse.Namespace) -> LoadOptions:
    return LoadOptions(
        signature=getattr(args, "signature", None),
        inputs=_split(getattr(args, "input_names", None)),
        outputs=_split(getattr(args, "output_names", None)),
        input_shapes=parse_input_shapes(getattr(args, "input_shape", []) or []),
        unsafe=bool(getattr(args, "unsafe", False)),
        settings=parse_settings(getattr(args, "settings", []) or []),
        numeric_inputs=getattr(args, "command", None) != "inspect",
    )


def onnx_opset(text: str) -> int:
    """``--opset``: an integer in the range tf2onnx and ONNX Runtime support (exit 2 otherwise)."""
    from rewriter.export.onnx import OPSET_MAX, OPSET_MIN

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not OPSET_MIN <= value <= OPSET_MAX:
        raise argparse.ArgumentTypeError(f"{value} is outside the supported opsets "
                                         f"{OPSET_MIN}..{OPSET_MAX}")
    return value


def load_from_args(args: argparse.Namespace, attr: str = "model") -> Model:
    return load_model(getattr(args, attr), load_options(args))


def parse_input_shapes(items: list[str]) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = item.rpartition(":")
        if not sep or not name:
            raise UserError(f"--input-shape {item!r} is not NAME:D0,D1,... "
                            "(e.g. input_1:1,224,224,3)")
        try:
            text = dims.strip().strip("()[]").strip()
            shapes[name] = tuple(int(d) for d in text.split(",")) if text else ()
        except ValueError:
            raise UserError(f"--input-shape {item!r}: dimensions must be integers") from None
        if any(d <= 0 for d in shapes[name]):
            raise UserError(f"--input-shape {item!r}: dimensions must be positive")
    return shapes


def parse_settings(items: list[str]) -> dict[str, str]:
    """``--set NAME=VALUE`` items as a dict (the value is parsed against the placeholder)."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UserError(f"--set {item!r} is not NAME=VALUE (e.g. --set is_training=false)")
        out[name.strip()] = value.strip()
    return out


def _split(value: str | None) -> list[str] | None:
    if not value:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


#: What the main job writes into OUT (an existing OUT holding only these may be replaced).
RUN_OUTPUTS = ("model.tflite", "model.onnx", "saved_model", "report.json", "report.md",
               "report.html", "*_vela.tflite", "*.csv")


def write_job_reports(stage: Any, result: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Build a finished job's report from its typed results, with OUT's paths instead of the
    staging directory's, and write it once: ``report.json``, ``report.md``, ``report.html``.
    Returns the report and the job's files (artifact, SavedModel, reports) as OUT's paths."""
    from rewriter.report.build import build_report, write_reports
    from rewriter.report.html import write_html

    report = stage.relocate(build_report(result.job))
    files = dict(stage.relocate(result.files))
    files.update({p.name: stage.relocate(str(p)) for p in write_reports(stage.path, report)})
    files["report.html"] = stage.relocate(str(write_html(stage.path, report)))
    return report, files
