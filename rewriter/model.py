"""The one intermediate form: a frozen inference ``GraphDef`` plus its signature.

Every front end (Keras, SavedModel, frozen GraphDef, TF1 checkpoint) produces a :class:`Model`;
every rule, checker, exporter and runner starts from one. Weights are ``Const`` nodes in the graph.
A ``Model`` can run itself in TensorFlow (:meth:`Model.run`), fetch intermediate tensors for
first-divergence analysis, and become a concrete function for the exporters.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from tensorflow.core.framework.graph_pb2 import GraphDef


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model's signature.

    ``name`` is the user-facing key (Keras input name, signature key); ``tensor`` the graph
    tensor it is bound to (``"node:0"``); ``shape`` is static (no ``None`` once normalised).
    """

    name: str
    tensor: str
    shape: tuple[int | None, ...]
    dtype: str  # numpy dtype name, e.g. "float32"

    @property
    def node(self) -> str:
        return self.tensor.split(":")[0]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "tensor": self.tensor, "shape": list(self.shape),
                "dtype": self.dtype}


@dataclass
class Source:
    """Where a model came from: path, detected format, and notes for the report."""

    path: str
    format: str  # keras | h5 | saved_model | graphdef | checkpoint | memory
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "format": self.format, "notes": list(self.notes)}


@dataclass
class Model:
    """A frozen inference graph with its signature and provenance."""

    graph_def: GraphDef
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    source: Source
    _fn_cache: dict[tuple[str, ...], Any] = field(default_factory=dict, repr=False, compare=False)

    # ----------------------------------------------------------------- structure
    def op_histogram(self) -> dict[str, int]:
        """Count of each op type, excluding graph plumbing (Placeholder, Const, Identity, NoOp)."""
        counts: dict[str, int] = {}
        for node in self.graph_def.node:
            if node.op in PLUMBING_OPS:
                continue
            counts[node.op] = counts.get(node.op, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def with_graph(self, graph_def: GraphDef, note: str | None = None) -> Model:
        """A copy of this model with another graph (same signature), e.g. after a rewrite."""
        src = Source(self.source.path, self.source.format, list(self.source.notes))
        if note:
            src.notes.append(note)
        return Model(graph_def, list(self.inputs), list(self.outputs), src)

    def copy(self) -> Model:
        return self.with_graph(copy.deepcopy(self.graph_def))

    # ----------------------------------------------------------------- running
    def concrete_function(self, fetches: Sequence[str] | None = None) -> Any:
        """A TF concrete function with this model's inputs as arguments.

        ``fetches`` are graph tensor names (default: the signature outputs). The function returns
        a list of tensors in that order.
        """
        fetches = tuple(fetches) if fetches is not None else tuple(o.tensor for o in self.outputs)
        fn = self._fn_cache.get(fetches)
        if fn is not None:
            return fn
        import tensorflow as tf

        graph_def = self.graph_def

        def _import() -> None:
            tf.compat.v1.import_graph_def(graph_def, name="")

        wrapped = tf.compat.v1.wrap_function(_import, [])
        graph = wrapped.graph
        feeds = [graph.as_graph_element(i.tensor) for i in self.inputs]
        outs = [graph.as_graph_element(f) for f in fetches]
        fn = wrapped.prune(feeds=feeds, fetches=outs)
        self._fn_cache[fetches] = fn
        return fn

    def forget_functions(self, keep_outputs: bool = False) -> None:
        """Drop the cached TF functions (each holds its own copies of the graph and its weights:
        one import, one pruned graph, one function definition), except the one computing the
        signature outputs when ``keep_outputs``; they are rebuilt when needed again."""
        outputs = tuple(o.tensor for o in self.outputs)
        for key in [k for k in self._fn_cache if not (keep_outputs and k == outputs)]:
            del self._fn_cache[key]

    def run(self, feeds: Mapping[str, np.ndarray],
            fetches: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Run the graph in TensorFlow.

        ``feeds`` is keyed by input name (``TensorSpec.name``). Returns outputs keyed by output
        name, or by tensor name when ``fetches`` (graph tensor names) is given.
        """
        import tensorflow as tf

        args = []
        for spec in self.inputs:
            if spec.name not in feeds:
                raise KeyError(f"missing input {spec.name!r}")
            args.append(tf.constant(np.asarray(feeds[spec.name], dtype=spec.dtype)))
        keys = list(fetches) if fetches is not None else [o.name for o in self.outputs]
        fn = self.concrete_function(fetches)
        results = fn(*args)
        if not isinstance(results, (list, tuple)):
            results = [results]
        return {k: np.asarray(v.numpy()) for k, v in zip(keys, results)}

    def signature_json(self) -> dict[str, Any]:
        return {"inputs": [i.to_json() for i in self.inputs],
                "outputs": [o.to_json() for o in self.outputs]}


_VALID_SIGNATURE_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]*$")


def signature_names(names: Sequence[str], prefix: str) -> list[str]:
    """The keys an exported signature gives tensors named ``names``: the names themselves when
    all are valid keys and unique, else ``prefix_i`` by position (``output_0``, ...)."""
    ok = all(_VALID_SIGNATURE_KEY.match(n) for n in names) and len(set(names)) == len(names)
    return list(names) if ok else [f"{prefix}_{i}" for i in range(len(names))]


#: Ops that are graph plumbing rather than computation; never reported as unsupported.
PLUMBING_OPS = frozenset({"Placeholder", "Const", "Identity", "NoOp", "IdentityN",
                          "PlaceholderWithDefault", "StopGradient", "Snapshot"})

