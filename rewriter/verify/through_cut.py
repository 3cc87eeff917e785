"""Data for a model cut by ``--inputs``, given for the original model's inputs.

After ``--inputs`` starts a model past its front end (a host lookup ``table[ids]``, a
spectrogram), the user's data is often what the original model takes (the ids), not the cut's
new inputs (the rows). :func:`gather_through_cut` loads it as the cut's inputs when it is shaped
so, else as the original inputs and maps it through the original graph up to the cut tensors
(the cut model's ``prefix``, run in TensorFlow: the loaded graph, no model code beyond it),
exactly what the original model computes there; anything else is a UserError naming both
expected shapes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rewriter.errors import UserError
from rewriter.targets.host_lookup import GATHER_OPS
from rewriter.verify.data import Data, gather

if TYPE_CHECKING:  # pragma: no cover
    from rewriter.ir.model import Model, TensorSpec


def gather_through_cut(path: str | os.PathLike | None, model: Model, *, samples: int,
                       **common: Any) -> Data:
    """:func:`~rewriter.verify.data.gather` for ``model.inputs``, or, when ``path`` holds the
    original model's inputs instead, those samples mapped through ``model.prefix``."""
    prefix = model.prefix
    if path is None or prefix is None or Path(path).is_dir() or not Path(path).exists():
        return gather(path, model.inputs, samples=samples, **common)
    try:
        return gather(path, model.inputs, samples=samples, **common)
    except UserError:
        pass
    try:
        raw = gather(path, prefix.inputs, samples=samples)
    except UserError:
        raise UserError(f"{path}: holds neither the inputs after the --inputs cut "
                        f"({_shapes(model.inputs)}) nor the original model's inputs "
                        f"({_shapes(prefix.inputs)}): give data shaped as one of them") from None
    how = mapped_how(prefix)
    mapped = [_fit(prefix.run(s), model.inputs) for s in raw.samples]
    return Data(mapped, raw.source, raw.format, {s.name: how for s in model.inputs},
                [how, *raw.notes], dict(raw.recipe) | {"through_cut": True}, list(raw.warnings),
                {})


def mapped_how(prefix: Model) -> str:
    """How data was mapped: through the host lookup(s) when every cut tensor is a GATHER."""
    ops = {n.name: n.op for n in prefix.graph_def.node}
    nodes = [o.node for o in prefix.outputs]
    ins = ", ".join(s.name for s in prefix.inputs)
    if all(ops.get(n) in GATHER_OPS for n in nodes):
        return (f"data mapped through the host lookup {', '.join(nodes)}: ids -> rows (the "
                f"original graph from {ins} up to the cut, run in TensorFlow)")
    return (f"data mapped through the original graph from {ins} up to the --inputs cut "
            f"({', '.join(nodes)}, run in TensorFlow)")


def _fit(values: dict[str, np.ndarray], specs: Sequence[TensorSpec]) -> dict[str, np.ndarray]:
    out = {}
    for s in specs:
        arr = np.asarray(values[s.name], dtype=s.dtype)
        if s.shape and all(d is not None for d in s.shape) and arr.size == int(np.prod(s.shape)):
            arr = arr.reshape(s.shape)
        out[s.name] = arr
    return out


def _shapes(specs: Sequence[TensorSpec]) -> str:
    return ", ".join(f"{s.name} {list(s.shape)} {s.dtype}" for s in specs)
