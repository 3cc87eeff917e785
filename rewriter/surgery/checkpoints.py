"""Read the variables of any TensorFlow checkpoint or model, list them, and diff two sets.

Sources understood (``open_variables``): TF1 name-based checkpoint prefixes, TF2 object-based
checkpoints, Keras ``.keras`` / ``.h5`` models and ``.weights.h5`` / legacy ``.h5`` weight files,
and SavedModel directories (their ``variables/`` bundle). Every variable gets one name:

* TF1 checkpoints: the checkpoint key (``model_vars/w1``), as ``inspect_checkpoint`` prints it.
* TF2 object-based checkpoints: the object path without ``/.ATTRIBUTES/VARIABLE_VALUE``.
* SavedModels: the variable's own name from the saved object graph (``dense/kernel``) when those
  names are unambiguous, else the object path.
* Keras models: the variable path (``layer/kernel``); Keras 3 ``.weights.h5`` files carry no
  variable names, so they are ``layer/vars/0``, and :func:`keras_weight_aliases` translates them
  for a given Keras model.

``model_variable_infos`` lists the variables a *model* declares (a TF1 ``.meta`` graph included)
and :func:`diff_variables` / :func:`diff_checkpoint` compare the two sides by name after optional
``--map`` rules (:class:`NameMap`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.errors import UserError, first_line
from rewriter.surgery.keras_weights import (
    h5_file,
    keras_weight_aliases,
    load_keras_model,
    open_h5,
    open_h5_weights,
    open_keras_model,
)
from rewriter.surgery.variables import (
    Diff,
    NameMap,
    VariableSet,
    VarInfo,
    diff_variables,
)

_ATTR_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


# ----------------------------------------------------------------------------- detection
def detect_format(path: str) -> str:
    """The variable container at ``path``; raises UserError for missing or unknown paths."""
    p = Path(path)
    name = p.name.lower()
    if p.is_dir():
        if (p / "saved_model.pb").exists() or (p / "saved_model.pbtxt").exists():
            return "saved_model"
        from rewriter.frontends.ckpt_files import is_checkpoint_path

        if is_checkpoint_path(path):
            return "checkpoint"
        raise UserError(f"{path}: directory is neither a SavedModel nor a checkpoint directory")
    if name.endswith(".weights.h5"):
        return _must_exist(p, "keras-weights")
    if name.endswith(".keras"):
        return _must_exist(p, "keras")
    if name.endswith((".h5", ".hdf5")):
        return _must_exist(p, "h5")
    if name.endswith(".meta"):
        return _must_exist(p, "meta")
    if _checkpoint_prefix(path) is not None:
        return "checkpoint"
    if not p.exists():
        raise UserError(f"{path}: no such file, directory or checkpoint prefix")
    raise UserError(f"{path}: not a checkpoint, Keras file, SavedModel or .meta graph")


def is_checkpoint(path: str) -> bool:
    """True for weights without a graph: a TF1/TF2 checkpoint prefix (or its .index/.data file,
    or its directory), a Keras ``.weights.h5`` or a weights-only legacy ``.h5``."""
    try:
        fmt = detect_format(path)
        if fmt == "h5":
            from rewriter.frontends.safety import H5_ERRORS

            try:
                with h5_file(path) as f:
                    return "model_config" not in f.attrs
            except H5_ERRORS:  # damaged: not a checkpoint; the model loader says what is wrong
                return False
        return fmt in ("checkpoint", "keras-weights")
    except UserError:
        return False


def _must_exist(p: Path, fmt: str) -> str:
    if not p.is_file():
        raise UserError(f"{p}: no such file")
    return fmt


def _checkpoint_prefix(path: str) -> str | None:
    """The checkpoint prefix named by ``path`` (prefix, .index, .data-*, or directory; see
    :mod:`rewriter.frontends.ckpt_files` for empty prefixes and foreign ``checkpoint`` files)."""
    from rewriter.frontends.ckpt_files import checkpoint_prefix

    if os.path.isdir(path):
        return checkpoint_prefix(path)[0]
    prefix = re.sub(r"\.(index|data-\d+-of-\d+)$", "", path)
    if os.path.exists(prefix + ".index"):
        return prefix
    return None


# ----------------------------------------------------------------------------- readers
def open_variables(path: str, unsafe: bool = False) -> VariableSet:
    """The variables (with values) of a checkpoint, Keras file or SavedModel at ``path``.

    Keras models with code in them (:mod:`rewriter.frontends.safety`) are only loaded with
    ``unsafe``; otherwise their stored weights are read without building the model."""
    fmt = detect_format(path)
    if fmt == "checkpoint":
        return _open_bundle(_checkpoint_prefix(path) or path, path)
    if fmt == "meta":
        prefix = path[: -len(".meta")]
        if not os.path.exists(prefix + ".index"):
            raise UserError(f"{path}: a .meta graph holds no weights and no checkpoint "
                            f"{prefix}.index sits next to it")
        return _open_bundle(prefix, path)
    if fmt == "saved_model":
        return _open_saved_model(path)
    if fmt == "keras":
        return open_keras_model(path, unsafe)
    if fmt == "keras-weights":
        return open_h5_weights(path)
    return open_h5(path, unsafe)


def list_checkpoint_variables(path: str, unsafe: bool = False) -> list[VarInfo]:
    """Names, dtypes and shapes of the variables stored at ``path``, sorted by name."""
    return open_variables(path, unsafe).list()


def diff_checkpoint(ckpt_path: str, model_path: str,
                    maps: Iterable[str] | None = None, unsafe: bool = False) -> Diff:
    """Which of a model's variables the checkpoint would restore (``inspect --against``)."""
    source = open_variables(ckpt_path, unsafe)
    target = model_variable_infos(model_path, unsafe)
    aliases = _aliases_for(source, model_path, unsafe)
    return diff_variables(source.infos, target, NameMap.parse(maps), aliases)


def _aliases_for(source: VariableSet, model_path: str, unsafe: bool) -> dict[str, str]:
    if source.format != "keras-weights":
        return {}
    fmt = detect_format(model_path)
    if fmt not in ("keras", "h5"):
        return {}
    return keras_weight_aliases(load_keras_model(model_path, unsafe))


def _open_reader(prefix: str, shown: str) -> Any:
    import tensorflow as tf

    from rewriter.frontends.sizes import check_bundle

    try:  # the reader, not load_checkpoint: an empty prefix ("DIR/") is not a directory here
        reader = tf.compat.v1.train.NewCheckpointReader(prefix)
    except Exception as exc:
        raise UserError(f"cannot read checkpoint {shown}: {first_line(exc)}") from None
    check_bundle(reader, shown)  # sizes before reads
    return reader


def _np_dtype_name(tf_dtype: Any) -> str:
    try:
        return np.dtype(tf_dtype.as_numpy_dtype).name
    except TypeError:
        return tf_dtype.name


def _open_bundle(prefix: str, shown: str, names: Mapping[str, str] | None = None,
                 fmt: str | None = None) -> VariableSet:
    """A TF checkpoint bundle; ``names`` maps checkpoint keys to variable names when known."""
    reader = _open_reader(prefix, shown)
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    object_based = _OBJECT_GRAPH_KEY in shapes
    keys: dict[str, list[str]] = {}
    for key in sorted(shapes):
        if key == _OBJECT_GRAPH_KEY or (object_based and not key.endswith(_ATTR_SUFFIX)):
            continue
        name = (names or {}).get(key) or (key[: -len(_ATTR_SUFFIX)] if object_based else key)
        keys.setdefault(name, []).append(key)
    infos: dict[str, VarInfo] = {}
    for name, ks in list(keys.items()):
        shapes_of = {tuple(shapes[k]) for k in ks}
        if len(shapes_of) > 1:  # an ambiguous object-graph name: fall back to the paths
            del keys[name]
            for k in ks:
                path_name = k[: -len(_ATTR_SUFFIX)]
                keys[path_name] = [k]
                infos[path_name] = VarInfo(path_name, _np_dtype_name(dtypes[k]),
                                           tuple(shapes[k]))
            continue
        infos[name] = VarInfo(name, _np_dtype_name(dtypes[ks[0]]), tuple(shapes[ks[0]]))

    def read(name: str) -> np.ndarray:
        value = reader.get_tensor(keys[name][0])
        return value if isinstance(value, np.ndarray) else np.asarray(value)

    kind = fmt or ("tf2-checkpoint" if object_based else "tf1-checkpoint")
    return VariableSet(shown, kind, infos, read, keys)


def saved_model_variable_names(path: str, reader: Any) -> dict[str, str]:
    """Checkpoint key -> variable name for a TF2 SavedModel (empty for TF1 SavedModels)."""
    from tensorflow.core.protobuf import saved_model_pb2, trackable_object_graph_pb2

    if _OBJECT_GRAPH_KEY not in reader.get_variable_to_shape_map():
        return {}
    pb = Path(path) / "saved_model.pb"
    if not pb.exists():
        return {}
    sm = saved_model_pb2.SavedModel()
    try:
        sm.ParseFromString(pb.read_bytes())
    except Exception as exc:
        raise UserError(f"cannot parse {pb}: {first_line(exc)}") from None
    saved_nodes = sm.meta_graphs[0].object_graph_def.nodes if sm.meta_graphs else []
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(_OBJECT_GRAPH_KEY))
    names: dict[str, str] = {}
    if len(saved_nodes) != len(graph.nodes):  # no node-for-node correspondence: use paths
        return names
    for saved, ckpt in zip(saved_nodes, graph.nodes, strict=True):
        if saved.WhichOneof("kind") != "variable" or not saved.variable.name:
            continue
        for attr in ckpt.attributes:
            if attr.name == "VARIABLE_VALUE":
                names[attr.checkpoint_key] = saved.variable.name.split(":")[0]
    return names


def _open_saved_model(path: str) -> VariableSet:
    prefix = os.path.join(path, "variables", "variables")
    if not os.path.exists(prefix + ".index"):
        return VariableSet(path, "saved_model", {}, None, {})
    reader = _open_reader(prefix, path)
    return _open_bundle(prefix, path, saved_model_variable_names(path, reader), "saved_model")


# ----------------------------------------------------------------------------- model side
def model_variable_infos(path: str, unsafe: bool = False) -> dict[str, VarInfo]:
    """The variables a model declares: a TF1 ``.meta`` graph, Keras model or SavedModel."""
    fmt = detect_format(path)
    if fmt == "meta":
        return meta_graph_variables(path)
    if fmt == "checkpoint":
        prefix = _checkpoint_prefix(path) or path
        if os.path.exists(prefix + ".meta"):
            return meta_graph_variables(prefix + ".meta")
    return open_variables(path, unsafe).infos


def meta_graph_variables(meta_path: str) -> dict[str, VarInfo]:
    """Global variables of a TF1 ``.meta`` graph (names without ``:0``), without running it."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        import_meta_graph(meta_path)
        variables = tf.compat.v1.global_variables()
        return {_var_name(v): VarInfo(_var_name(v), _np_dtype_name(v.dtype.base_dtype),
                                      tuple(int(d) for d in v.shape))
                for v in variables}


def _var_name(v: Any) -> str:
    return v.op.name if hasattr(v, "op") else v.name.split(":")[0]


def import_meta_graph(meta_path: str) -> Any:
    """``import_meta_graph`` into the default graph; UserError when the file cannot be parsed.

    ``_output_shapes`` attributes are dropped first: only a cache, and a published training graph
    can hold stale ones (a gradient node's) that would stop the import."""
    import tensorflow as tf

    from rewriter.frontends.checkpoint import read_meta_graph

    meta_def = read_meta_graph(meta_path)
    for node in meta_def.graph_def.node:
        if "_output_shapes" in node.attr:
            del node.attr["_output_shapes"]
    try:
        return tf.compat.v1.train.import_meta_graph(meta_def, clear_devices=True)
    except Exception as exc:
        raise UserError(f"cannot parse meta graph {meta_path}: {first_line(exc)}") from None
