"""Inputs checked before any work: numeric dtypes, no zero-size dimension, shapes that fit memory.

A huge ``--input-shape`` once crashed even ``rewrite inspect`` (Grappler died by SIGSEGV while
freezing a Keras model traced at 1x100000x100000x3), a zero-size dimension made every comparison
vacuous, and a string input ended in a traceback. So, before a graph is frozen or run:

* each input is at most :data:`MAX_INPUT_BYTES` per sample (TFLite and TFLite Micro index
  tensors with 32-bit sizes; no edge model takes 2 GiB per inference) and has no zero dimension;
* the largest tensor of the graph at those shapes (from TensorFlow's static shape inference, no
  allocation) must fit in half the memory available now (:func:`check_memory`);
* commands that feed data need numeric inputs (:func:`check_numeric`; ``inspect`` does not).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from rewriter.errors import UserError

#: Largest input tensor accepted, in bytes per sample.
MAX_INPUT_BYTES = 2**31 - 1
_GIB = 2**30


def check_input_shape(name: str, shape: Sequence[int], dtype: Any = "float32") -> None:
    """UserError for a zero-size dimension or an input beyond :data:`MAX_INPUT_BYTES`."""
    dims = ",".join(str(d) for d in shape)
    if any(d == 0 for d in shape):
        raise UserError(f"input {name!r} has a zero-size dimension [{dims}]: the model computes "
                        f"nothing on it; give --input-shape {name}:D0,D1,... with sizes > 0")
    size = math.prod(int(d) for d in shape) * _itemsize(dtype)
    if size > MAX_INPUT_BYTES:
        raise UserError(f"input {name!r} of shape [{dims}] takes {size / _GIB:.3g} GiB per "
                        f"sample (limit {MAX_INPUT_BYTES / _GIB:.0f} GiB); give a smaller "
                        f"--input-shape {name}:...")


def _itemsize(dtype: Any) -> int:
    try:
        return np.dtype(getattr(dtype, "as_numpy_dtype", dtype)).itemsize
    except TypeError:
        return 4


def check_numeric(model: Any) -> None:
    """UserError when an input is not a number tensor (strings, resources, variants)."""
    for spec in model.inputs:
        try:
            kind = np.dtype(spec.dtype).kind
        except TypeError:
            kind = "?"
        if kind not in "fiub":
            raise UserError(f"{model.source.path}: input {spec.name!r} is a {spec.dtype} tensor; "
                            "rewriter feeds and converts numeric tensors only: export the model "
                            "with a numeric input (e.g. the signature after its string decoding "
                            "or preprocessing)")


def check_memory(graph: Any, path: str) -> None:
    """UserError when one tensor of ``graph`` (a TF Graph at static shapes) would need more than
    half of the memory available now."""
    peak, where = 0, ""
    for op in graph.get_operations():
        for t in op.outputs:
            shape = t.shape
            if shape.rank is None or not shape.is_fully_defined():
                continue
            try:
                size = math.prod(shape.as_list()) * t.dtype.size
            except (TypeError, ValueError):  # resource/variant tensors have no size
                continue
            if size > peak:
                peak, where = size, f"{t.name} {shape.as_list()}"
    available = available_memory()
    if available and peak > available // 2:
        raise UserError(f"{path}: at these input shapes the tensor {where} alone needs "
                        f"{peak / _GIB:.3g} GiB and {available / _GIB:.3g} GiB of memory are "
                        "available; give a smaller --input-shape")


def budget() -> int | None:
    """Bytes one tensor, or a model file's declared weights, may take: half the memory
    available now (:func:`available_memory`); None when unknown."""
    available = available_memory()
    return available // 2 if available else None


def available_memory() -> int | None:
    """Bytes of memory available now (``MemAvailable``, or less under an address-space limit:
    ``RLIMIT_AS``), or None when unknown."""
    free = _mem_available()
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, ValueError, OSError):
        limit = -1
    if limit is not None and limit > 0 and limit != getattr(resource, "RLIM_INFINITY", -1):
        return min(free, limit) if free else limit
    return free


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
