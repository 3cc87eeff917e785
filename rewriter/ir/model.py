"""The one intermediate form: a frozen inference ``GraphDef`` plus its signature.

Every front end (Keras, SavedModel, frozen GraphDef, TF1 checkpoint) produces a :class:`Model`;
every rule, checker, exporter and runner starts from one. Weights are ``Const`` nodes in the graph.
A ``Model`` can run itself in TensorFlow (:meth:`Model.run`), fetch intermediate tensors for
first-divergence analysis, and become a concrete function for the exporters.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
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
    _weights: tuple[GraphDef, dict[str, Any]] | None = field(default=None, repr=False,
                                                             compare=False)
    #: After an ``--inputs`` cut: the original graph from its inputs up to the cut tensors
    #: (outputs named as the cut's inputs), to map data given for the original inputs.
    prefix: Model | None = field(default=None, repr=False, compare=False)
    _memo: dict[Any, tuple[int, Any, Any]] = field(default_factory=dict, repr=False,
                                                   compare=False)

    # ----------------------------------------------------------------- structure
    def op_histogram(self) -> dict[str, int]:
        """Count of each op type, excluding graph plumbing (Placeholder, Const, Identity, NoOp)."""
        counts: dict[str, int] = {}
        for node in self.graph_def.node:
            if node.op in PLUMBING_OPS:
                continue
            counts[node.op] = counts.get(node.op, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def memo(self, key: Any, make: Callable[[], Any], keep: Any = None) -> Any:
        """``make()`` once per ``key`` for this graph: a verdict on the graph kept with it, so
        each graph is judged once per state. ``keep`` is held with the value (a key may then
        use ``id(keep)``). A changed graph (its serialised size differs) is judged afresh;
        rewrites make new models (:meth:`with_graph`), which start with no memo."""
        state = self.graph_def.ByteSize()
        hit = self._memo.get(key)
        if hit is not None and hit[0] == state:
            return hit[2]
        value = make()
        self._memo[key] = (state, keep, value)
        return value

    def with_graph(self, graph_def: GraphDef, note: str | None = None) -> Model:
        """A copy of this model with another graph (same signature), e.g. after a rewrite."""
        src = Source(self.source.path, self.source.format, list(self.source.notes))
        if note:
            src.notes.append(note)
        return Model(graph_def, list(self.inputs), list(self.outputs), src, prefix=self.prefix)

    def copy(self) -> Model:
        return self.with_graph(copy.deepcopy(self.graph_def))

    # ----------------------------------------------------------------- running
    def concrete_function(self, fetches: Sequence[str] | None = None,
                          constants: bool = False) -> Any:
        """A TF concrete function with this model's inputs as arguments.

        ``fetches`` are graph tensor names (default: the signature outputs). The function returns
        a list of tensors in that order. By default it reads the model's weights from variables
        shared by all of this model's functions (:meth:`weights`): each function then holds a
        graph without its weights, where one over constants copies them at every step TensorFlow
        takes (import, pruning, the function definition, Grappler). ``constants`` builds it over
        the frozen graph as it is, for callers that freeze the function again and need the weight
        nodes under their own names (:func:`rewriter.frontends._normalize.lower_control_flow`).
        """
        fetches = tuple(fetches) if fetches is not None else tuple(o.tensor for o in self.outputs)
        key = ("constants", *fetches) if constants else fetches
        fn = self._fn_cache.get(key)
        if fn is not None:
            return fn
        graph, variables = (self.graph_def, {}) if constants else self.weights()
        fn = import_function(graph, variables, [i.tensor for i in self.inputs], fetches)
        self._fn_cache[key] = fn
        return fn

    def weights(self) -> tuple[GraphDef, dict[str, Any]]:
        """``(graph, variables)`` of :func:`lift_weights`, made once and shared by this model's
        functions until :meth:`forget_functions`."""
        if self._weights is None:
            self._weights = lift_weights(self.graph_def)
        return self._weights

    def forget_functions(self, keep_outputs: bool = False) -> None:
        """Drop the cached TF functions (each holds its own copy of the graph), except the one
        computing the signature outputs when ``keep_outputs``, and, when none is left, the
        weights' variables; they are rebuilt when needed again."""
        outputs = tuple(o.tensor for o in self.outputs)
        for key in [k for k in self._fn_cache if not (keep_outputs and k == outputs)]:
            del self._fn_cache[key]
        if not self._fn_cache:
            self._weights = None

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



#: Float constants of at least this many elements are the weights :func:`lift_weights` lifts.
WEIGHT_MIN_ELEMENTS = 1024
_FLOAT_DTYPES = frozenset({1, 2, 14, 19})  # DT_FLOAT, DT_DOUBLE, DT_BFLOAT16, DT_HALF


def lift_weights(graph_def: GraphDef) -> tuple[GraphDef, dict[str, Any]]:
    """``(graph, variables)``: a copy of ``graph_def`` whose large float constants (at least
    :data:`WEIGHT_MIN_ELEMENTS` elements) hold a scalar zero, and a ``tf.Variable`` with each
    one's value keyed by its tensor name (``"node:0"``), to be fed with ``input_map`` when the
    graph is imported (:class:`WeightsFunction`).

    Why (measured on TF 2.21, ResNet50 at 64x64): a TF function or SavedModel whose weights are
    constants copies them at every step TensorFlow takes (the imported graph, the pruned graph,
    Grappler's optimised graph, the kernels' tensors; the TFLite converter's import and
    calibration model), so a converter or a many-fetch run needs 1-2 GB above TensorFlow's own
    for ~100 MB of weights; read from variables, the weights stay in one place."""
    import tensorflow as tf

    from rewriter.ir.graph import GraphDef as _GraphDef

    out = _GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    variables: dict[str, Any] = {}
    for node in graph_def.node:
        copy_ = out.node.add()
        if node.op == "Const" and _is_weight(node.attr["value"].tensor):
            copy_.name, copy_.op, copy_.device = node.name, node.op, node.device
            copy_.input.extend(node.input)
            for key, value in node.attr.items():
                if key != "value":
                    copy_.attr[key].CopyFrom(value)
            array = tf.make_ndarray(node.attr["value"].tensor)
            copy_.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(array.dtype.type(0)))
            variables[f"{node.name}:0"] = tf.Variable(array, trainable=False,
                                                      name=f"weight_{len(variables)}")
            del array
        else:
            copy_.CopyFrom(node)
    return out, variables


def shape_only(graph_def: GraphDef) -> GraphDef:
    """A copy of ``graph_def`` whose weights (the constants :func:`lift_weights` lifts) are
    ``Placeholder`` nodes of their dtype and shape: what shape inference needs, without the
    values."""
    from rewriter.ir.graph import GraphDef as _GraphDef

    out = _GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        copy_ = out.node.add()
        tensor = node.attr["value"].tensor if node.op == "Const" else None
        if tensor is not None and _is_weight(tensor):
            copy_.name, copy_.op, copy_.device = node.name, "Placeholder", node.device
            copy_.attr["dtype"].type = tensor.dtype
            copy_.attr["shape"].shape.CopyFrom(tensor.tensor_shape)
        else:
            copy_.CopyFrom(node)
    return out


def _is_weight(tensor: Any) -> bool:
    if tensor.dtype not in _FLOAT_DTYPES or tensor.tensor_shape.unknown_rank:
        return False
    n = 1
    for d in tensor.tensor_shape.dim:
        n *= max(int(d.size), 0)
    return n >= WEIGHT_MIN_ELEMENTS


def import_function(graph: GraphDef, variables: Mapping[str, Any], feeds: Sequence[str],
                    fetches: Sequence[str]) -> Any:
    """A concrete function importing ``graph`` under its nodes' own names, each tensor named in
    ``variables`` (:func:`lift_weights`; none for a graph with its weights as constants) mapped
    to its variable's value: called with one tensor per feed (graph tensor names), it returns
    the ``fetches`` (graph tensor names), a list in that order.

    A pruned ``wrap_function``, not a ``tf.function``: a ``tf.function`` adds control edges
    from stateful ops to its outputs, which TF1 control flow (a frozen Keras LSTM's while
    frame) does not allow."""
    import tensorflow as tf

    def _import() -> None:
        with tf.name_scope("rewriter_weights"):
            input_map = {name: var.read_value() for name, var in variables.items()}
        tf.compat.v1.import_graph_def(graph, input_map=input_map, name="")

    wrapped = tf.compat.v1.wrap_function(_import, [])
    g = wrapped.graph
    return wrapped.prune(feeds=[g.as_graph_element(f) for f in feeds],
                         fetches=[g.as_graph_element(f) for f in fetches])


class WeightsFunction:
    """A TF function over ``graph_def`` with its weights as variables (:func:`lift_weights`):
    called with one array per feed (graph tensor name, shape, numpy dtype name), it returns the
    ``fetches`` (graph tensor names) as numpy arrays keyed by name."""

    def __init__(self, graph_def: GraphDef,
                 feeds: Sequence[tuple[str, Sequence[int | None], str]],
                 fetches: Sequence[str]) -> None:
        graph, self.variables = lift_weights(graph_def)
        self.dtypes = [d for _, _, d in feeds]
        self.fetches = list(fetches)
        self.fn = import_function(graph, self.variables, [f for f, _, _ in feeds], fetches)

    def __call__(self, *arrays: np.ndarray) -> dict[str, np.ndarray]:
        import tensorflow as tf

        args = [tf.constant(np.asarray(a, dtype=d)) for a, d in zip(arrays, self.dtypes,
                                                                    strict=True)]
        outs = self.fn(*args)
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        return {k: np.asarray(v.numpy()) for k, v in zip(self.fetches, outs, strict=True)}
