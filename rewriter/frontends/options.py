"""What the user told us about a model beyond its path (its own module, so that the front ends
can import it without importing the package that dispatches to them), and the command-line
options that say it, declared here once for every command that loads a model."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from rewriter.errors import UserError


@dataclass
class LoadOptions:
    """What the user told us about the model beyond its path."""

    signature: str | None = None
    inputs: list[str] | None = None
    outputs: list[str] | None = None
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    unsafe: bool = False
    #: ``--set NAME=VALUE``: scalar placeholders baked in as constants (value text as given)
    settings: dict[str, str] = field(default_factory=dict)
    #: refuse non-numeric inputs (every command that feeds or converts data; not ``inspect``)
    numeric_inputs: bool = True


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
