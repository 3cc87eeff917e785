"""Which operator of a ``.tflite`` makes TFLite Micro abort: the first prefix of the file that
TFLite Micro cannot run, found by bisection.

TFLite Micro ends some files with ``abort()`` and no message (the where-mask model of issue 28:
SIGABRT while loading, int8 SELECT_V2 with a scale of 3.9e6). The file's operators run in
order, so the prefix ``operators[:k]`` (its outputs those of operator ``k - 1``) fails exactly
when one of its first ``k`` operators does; :func:`failing_operator` finds the smallest such
``k`` with about log2(N) runs of the child process (:func:`rewriter.verify.tflm.run_subprocess`)
on zero inputs. A prefix whose own outputs are its inputs (an operator fed only by the graph
inputs) is still a valid model.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.verify.runners import RunnerError

__all__ = ["failing_operator"]

#: Numpy dtype of each TFLite tensor type the inputs may have.
_NP = {0: np.float32, 2: np.int32, 3: np.uint8, 4: np.int64, 6: np.bool_, 7: np.int16,
       9: np.int8}


def failing_operator(path: str | os.PathLike) -> tuple[int, str] | None:
    """``(index, op name)`` of the first operator TFLite Micro cannot run, or None when the
    whole file runs (or the cause is not one operator: the first prefix already runs fine and
    only the whole fails)."""
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(Path(path).read_bytes()))
    sub = model.subgraphs[0]
    n = len(sub.operators)
    if n == 0 or _runs(model, n):
        return None
    lo, hi = 0, n  # prefix lo runs (0: nothing), prefix hi fails
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _runs(model, mid):
            lo = mid
        else:
            hi = mid
    op = sub.operators[hi - 1]
    return hi - 1, flatbuffer_utils.opcode_to_name(model, op.opcodeIndex)


def _runs(model: Any, k: int) -> bool:
    """Whether TFLite Micro runs the model cut after its first ``k`` operators."""
    import copy

    from tensorflow.lite.tools import flatbuffer_utils

    from rewriter.verify.tflm import run_subprocess

    cut = copy.deepcopy(model)
    sub = cut.subgraphs[0]
    sub.operators = sub.operators[:k]
    sub.outputs = [t for t in sub.operators[-1].outputs if t >= 0]
    arrays = {}
    for j, t in enumerate(sub.inputs):
        tensor = sub.tensors[t]
        arrays[f"s0_i{j}"] = np.zeros(list(tensor.shape), _NP.get(tensor.type, np.float32))
    with tempfile.TemporaryDirectory(prefix="rewriter-tflm-cut-") as tmp:
        path = Path(tmp) / "prefix.tflite"
        path.write_bytes(bytes(flatbuffer_utils.convert_object_to_bytearray(cut)))
        try:
            run_subprocess(str(path), arrays, 1, len(sub.inputs), len(sub.outputs))
        except RunnerError:
            return False
    return True
