"""Front ends: every TensorFlow model format becomes one :class:`rewriter.ir.model.Model`.

``load_model(path, options)`` detects the format from the path and the file's first bytes, never
from the name alone: a Keras ``.keras`` (zip) or ``.h5`` (HDF5; Keras 3 or tf_keras), a SavedModel
directory, a frozen ``GraphDef`` (``.pb`` binary or ``.pbtxt`` text), or a TF1 checkpoint prefix
with its ``.meta`` graph. Bad input raises :class:`rewriter.errors.UserError` with one line saying
what is wrong and what to do. Inputs are only read.
"""

from __future__ import annotations

import os
from pathlib import Path

from rewriter.errors import UserError, first_line
from rewriter.frontends.limits import check_memory, check_numeric
from rewriter.frontends.options import LoadOptions
from rewriter.ir.model import Model

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
ZIP_MAGIC = b"PK\x03\x04"

__all__ = ["LoadOptions", "assumptions", "detect_format", "load_model"]

#: Notes that say what loading assumed for the user (a training flag set, a checkpoint found
#: beside a foreign path, outputs or a cut chosen): commands also say them on stderr.
_ASSUMED = ("training flag ", "outputs: ", "cut after ")


def assumptions(model: Model) -> list[str]:
    """The notes of ``model`` that say what loading assumed (to be said on stderr too)."""
    return [n for n in model.source.notes
            if n.startswith(_ASSUMED) or "which does not exist here" in n]


def detect_format(path: str) -> str:
    """One of keras, h5, saved_model, graphdef, graphdef_text, checkpoint; UserError otherwise."""
    from rewriter.frontends.ckpt_files import is_checkpoint_path

    p = Path(path)
    if not p.exists():
        if is_checkpoint_path(path):
            return "checkpoint"
        raise UserError(f"{path}: no such file or directory")
    if p.is_dir():
        if (p / "saved_model.pb").exists() or (p / "saved_model.pbtxt").exists():
            return "saved_model"
        if is_checkpoint_path(path):
            return "checkpoint"
        raise UserError(f"{path}: directory holds no saved_model.pb (not a SavedModel) "
                        "and no TF1 checkpoint (.index, .meta)")
    suffix = p.suffix.lower()
    head = _head(p)
    if p.name == "saved_model.pb":
        return "saved_model"
    if suffix == ".keras":
        if head[:4] != ZIP_MAGIC:
            raise UserError(f"{path}: not a Keras .keras file (it is not a zip archive); "
                            "was it truncated or saved in another format?")
        return "keras"
    if suffix in (".h5", ".hdf5"):
        if head[:8] != HDF5_MAGIC:
            raise UserError(f"{path}: not an HDF5 file (a Keras .h5 model starts with the HDF5 "
                            "signature); was it truncated or saved in another format?")
        return "h5"
    if p.name.endswith((".meta", ".index")) or is_checkpoint_path(path):
        return "checkpoint"
    if suffix == ".pbtxt":
        return "graphdef_text"
    if suffix in (".pb", ".graphdef"):
        return "graphdef"
    if head[:4] == ZIP_MAGIC:
        return "keras"
    if head[:8] == HDF5_MAGIC:
        return "h5"
    raise UserError(f"{path}: unknown model format; expected .keras, .h5, a SavedModel "
                    "directory, a frozen .pb/.pbtxt, or a TF1 checkpoint prefix with .meta")


def load_model(path: str | os.PathLike, options: LoadOptions | None = None) -> Model:
    """Load any supported TF model format as a frozen inference :class:`Model`."""
    options = options or LoadOptions()
    path = os.fspath(path)
    fmt = detect_format(path)
    model = _with_output_specs(_load(path, fmt, options))
    if fmt not in ("keras", "h5"):  # Keras models were checked before they were frozen
        check_memory(model.concrete_function().graph, path)
    if options.numeric_inputs:
        check_numeric(model)
    return model


def _load(path: str, fmt: str, options: LoadOptions) -> Model:
    if fmt in ("keras", "h5"):
        from rewriter.frontends.keras import load_keras

        return load_keras(path, fmt, options)
    if fmt == "saved_model":
        from rewriter.frontends.saved_model import load_saved_model

        directory = str(Path(path).parent) if Path(path).is_file() else path
        return load_saved_model(directory, options)
    if fmt in ("graphdef", "graphdef_text"):
        from rewriter.frontends.graphdef import load_graphdef

        return load_graphdef(path, options, text=fmt == "graphdef_text")
    from rewriter.frontends.checkpoint import load_checkpoint

    return load_checkpoint(path, options)


def _with_output_specs(model: Model) -> Model:
    """Fill output shapes/dtypes from the graph at the static input shapes (and prove it imports)."""
    from rewriter.ir.model import TensorSpec

    try:
        fn = model.concrete_function()
    except Exception as exc:  # import_graph_def / prune failures: the graph is not usable
        first = first_line(exc)
        raise UserError(f"{model.source.path}: graph cannot be imported into TensorFlow: "
                        f"{first[:200]}") from None
    outs = []
    for spec, t in zip(model.outputs, fn.outputs):
        shape = tuple(t.shape.as_list()) if t.shape.rank is not None else spec.shape
        outs.append(TensorSpec(spec.name, spec.tensor, shape, t.dtype.name))
    model.outputs = outs
    return model


def _head(p: Path, n: int = 16) -> bytes:
    try:
        with open(p, "rb") as f:
            return f.read(n)
    except OSError as exc:
        raise UserError(f"{p}: cannot read ({exc.strerror})") from None
