"""Sizes before reads: a model file's declared sizes are checked before any of its bytes are read.

A 10 KB ``.h5`` can declare a dataset of 8 GiB (HDF5 allocates chunks lazily: a dataset never
written takes no space, and reading it returns the fill value at its full size), a ``.keras`` zip
member can inflate to any size, and a checkpoint's index names the shape of every variable. The
loaders read all of it. So, before they do, the sizes the file declares are added up and compared
with the budget the input check applies to one tensor (:func:`rewriter.frontends.limits.budget`:
half the memory available now, the address-space limit included):

* HDF5 (``.h5``, the ``model.weights.h5`` inside a ``.keras``): every dataset's shape x itemsize;
* ``.keras`` zip: every member's uncompressed size, from the zip's central directory;
* TF checkpoints and SavedModel ``variables/``: every variable's shape x dtype from the bundle's
  index (read without the data shards).

Over the budget is a :class:`~rewriter.errors.UserError` (exit 2) naming the largest
dataset/variable and its declared size. Only headers are read here; h5py and zipfile only (no
TensorFlow) for the Keras formats, so the check runs before TensorFlow is imported.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rewriter.errors import UserError
from rewriter.frontends.limits import budget

_GIB = 2**30
#: What h5py raises on a damaged file (as :data:`rewriter.frontends.safety.H5_ERRORS`).
_H5_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError)


def _size_text(n: int) -> str:
    if n >= _GIB // 10:
        return f"{n / _GIB:.3g} GiB"
    return f"{n / 2**20:.3g} MiB" if n >= 2**20 else f"{n / 2**10:.3g} KiB"


def check_declared(path: str, what: str, sizes: Iterable[tuple[str, int]]) -> None:
    """UserError when the declared ``sizes`` ((name, bytes) pairs) add up beyond the budget."""
    total, largest, where = 0, 0, ""
    for name, size in sizes:
        total += size
        if size > largest:
            largest, where = size, name
    limit = budget()
    if limit is None or total <= limit:
        return
    raise UserError(f"{path}: the {what} {where!r} declares {_size_text(largest)} "
                    f"({_size_text(total)} in all) and at most {_size_text(limit)} may be read "
                    "(half the memory available now); refusing to read it: is the file damaged, "
                    "or does it need a machine with more memory?")


def h5_sizes(f: Any) -> list[tuple[str, int]]:
    """(name, declared bytes) of every dataset of an open h5py File (headers only)."""
    import h5py

    found: list[tuple[str, int]] = []

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            shape = obj.shape or ()
            try:
                itemsize = obj.dtype.itemsize
            except (TypeError, ValueError):
                itemsize = 1
            found.append((name, math.prod(int(d) for d in shape) * max(itemsize, 1)))

    f.visititems(visit)
    return found


def check_h5(f: Any, path: str) -> None:
    """Refuse an open HDF5 file whose datasets declare more than the budget."""
    check_declared(path, "HDF5 dataset", h5_sizes(f))


def check_zip(archive: zipfile.ZipFile, path: str) -> None:
    """Refuse a zip whose members inflate beyond the budget (sizes from its central directory)."""
    check_declared(path, "archive member",
                   ((i.filename, int(i.file_size)) for i in archive.infolist()))


def check_bundle(reader: Any, path: str) -> None:
    """Refuse a TF checkpoint (a ``tf.train.load_checkpoint`` reader: the index only) whose
    variables declare more than the budget."""
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    sizes = []
    for name, shape in shapes.items():
        try:
            itemsize = int(dtypes[name].size)
        except (KeyError, TypeError, ValueError, AttributeError):
            itemsize = 4  # strings and resources: their bytes are not declared; count a word
        sizes.append((name, math.prod(int(d) for d in shape) * max(itemsize, 1)))
    check_declared(path, "variable", sizes)


def check_saved_model(directory: str) -> None:
    """Refuse a SavedModel whose ``variables/`` bundle declares more than the budget."""
    prefix = Path(directory) / "variables" / "variables"
    if not Path(str(prefix) + ".index").exists():
        return
    import tensorflow as tf

    try:
        reader = tf.train.load_checkpoint(str(prefix))
    except Exception:  # noqa: BLE001 - an unreadable index is the loader's to report
        return
    check_bundle(reader, directory)


def check_file(path: str, fmt: str) -> None:
    """The check for a Keras file (``fmt`` keras or h5) by path, before TensorFlow is imported:
    the zip's members and the HDF5 weights inside, or the ``.h5``'s datasets."""
    import h5py

    if fmt == "keras":
        try:
            with zipfile.ZipFile(path) as archive:
                check_zip(archive, path)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
            return  # the loader names what is wrong with the archive
        return
    try:
        with h5py.File(path, "r") as f:
            check_h5(f, path)
    except _H5_ERRORS:
        return  # the loader names what is wrong with the file
