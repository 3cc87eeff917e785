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
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.errors import UserError

_ATTR_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
_OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


# ----------------------------------------------------------------------------- data types
@dataclass(frozen=True)
class VarInfo:
    """One variable: its name, numpy dtype name and static shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    def describe(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


@dataclass(frozen=True)
class Pair:
    """A source variable matched to a target variable (same shape and dtype)."""

    source: str
    target: str
    dtype: str
    shape: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "dtype": self.dtype,
                "shape": list(self.shape)}


@dataclass(frozen=True)
class Mismatch:
    """A source and a target variable with the same name but another shape or dtype."""

    source: VarInfo
    target: VarInfo

    def reason(self) -> str:
        return (f"{self.target.name}: target {self.target.describe()} but source "
                f"{self.source.name} is {self.source.describe()}")

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source.to_json(), "target": self.target.to_json(),
                "reason": self.reason()}


@dataclass
class Diff:
    """How a source's variables line up with a target's, by name."""

    restored: list[Pair] = field(default_factory=list)
    new: list[VarInfo] = field(default_factory=list)       # in the target only
    unused: list[VarInfo] = field(default_factory=list)    # in the source only
    mismatched: list[Mismatch] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when every target variable gets a value from the source."""
        return not self.new and not self.mismatched

    def to_json(self) -> dict[str, Any]:
        return {"restored": [p.to_json() for p in self.restored],
                "new": [v.to_json() for v in self.new],
                "unused": [v.to_json() for v in self.unused],
                "mismatched": [m.to_json() for m in self.mismatched]}


@dataclass
class VariableSet:
    """The variables of one checkpoint or model: infos by name and a reader of values."""

    path: str
    format: str   # tf1-checkpoint | tf2-checkpoint | saved_model | keras | h5 | keras-weights
    infos: dict[str, VarInfo]
    reader: Callable[[str], np.ndarray] | None = None
    #: checkpoint keys holding each variable (bundle formats; several for shared variables)
    keys: dict[str, list[str]] = field(default_factory=dict)

    def read(self, name: str) -> np.ndarray:
        if self.reader is None:
            raise UserError(f"{self.path}: holds no variable values")
        try:
            return self.reader(name)
        except UserError:
            raise
        except Exception as exc:  # corrupt data files surface only here
            raise UserError(f"cannot read variable {name!r} from {self.path}: "
                            f"{_first_line(exc)}") from None

    def list(self) -> list[VarInfo]:
        return sorted(self.infos.values(), key=lambda v: v.name)


# ----------------------------------------------------------------------------- name maps
@dataclass(frozen=True)
class MapRule:
    """One rename rule for source names: prefix ``old/=new/`` or regex ``re:PATTERN=REPL``."""

    old: str
    new: str
    regex: re.Pattern[str] | None = None

    def apply(self, name: str) -> str | None:
        if self.regex is not None:
            if not self.regex.search(name):
                return None
            return self.regex.sub(self.new, name)
        if name.startswith(self.old):
            return self.new + name[len(self.old):]
        return None


class NameMap:
    """Rename rules applied to source names; the first rule that matches a name renames it."""

    def __init__(self, rules: Iterable[MapRule] = ()) -> None:
        self.rules = list(rules)

    @classmethod
    def parse(cls, specs: Iterable[str] | None) -> NameMap:
        rules = []
        for spec in specs or []:
            is_regex = spec.startswith("re:")
            body = spec[3:] if is_regex else spec
            old, sep, new = body.partition("=")
            if not sep or not old:
                raise UserError(f"--map {spec!r} is not OLD=NEW (prefix) or re:PATTERN=REPL")
            pattern = None
            if is_regex:
                try:
                    pattern = re.compile(old)
                except re.error as exc:
                    raise UserError(f"--map {spec!r}: bad regular expression: {exc}") from None
            rules.append(MapRule(old, new, pattern))
        return cls(rules)

    def __call__(self, name: str) -> str:
        for rule in self.rules:
            renamed = rule.apply(name)
            if renamed is not None:
                return renamed
        return name


def diff_variables(source: Mapping[str, VarInfo], target: Mapping[str, VarInfo],
                   name_map: NameMap | None = None,
                   aliases: Mapping[str, str] | None = None) -> Diff:
    """Match source variables to target variables by (mapped) name, checking shape and dtype.

    ``aliases`` renames source names before the map (e.g. Keras ``.weights.h5`` slots to paths).
    Two source variables mapped onto one target name is a usage error.
    """
    name_map = name_map or NameMap()
    aliases = aliases or {}
    claimed: dict[str, str] = {}
    diff = Diff()
    for src_name in sorted(source):
        tgt_name = name_map(aliases.get(src_name, src_name))
        if tgt_name in claimed:
            raise UserError(f"--map sends both {claimed[tgt_name]!r} and {src_name!r} "
                            f"to {tgt_name!r}")
        claimed[tgt_name] = src_name
        src = source[src_name]
        tgt = target.get(tgt_name)
        if tgt is None:
            diff.unused.append(src)
        elif tgt.shape == src.shape and tgt.dtype == src.dtype:
            diff.restored.append(Pair(src_name, tgt_name, tgt.dtype, tgt.shape))
        else:
            diff.mismatched.append(Mismatch(src, tgt))
    diff.new = [target[n] for n in sorted(target) if n not in claimed]
    return diff


# ----------------------------------------------------------------------------- detection
def detect_format(path: str) -> str:
    """The variable container at ``path``; raises UserError for missing or unknown paths."""
    p = Path(path)
    name = p.name.lower()
    if p.is_dir():
        if (p / "saved_model.pb").exists() or (p / "saved_model.pbtxt").exists():
            return "saved_model"
        if (p / "checkpoint").exists():
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
            with _h5(path) as f:
                return "model_config" not in f.attrs
        return fmt in ("checkpoint", "keras-weights")
    except UserError:
        return False


def _must_exist(p: Path, fmt: str) -> str:
    if not p.is_file():
        raise UserError(f"{p}: no such file")
    return fmt


def _checkpoint_prefix(path: str) -> str | None:
    """The checkpoint prefix named by ``path`` (prefix, .index, .data-*, or directory)."""
    if os.path.isdir(path):
        import tensorflow as tf

        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise UserError(f"{path}: its 'checkpoint' file names no readable checkpoint")
        return latest
    prefix = re.sub(r"\.(index|data-\d+-of-\d+)$", "", path)
    if os.path.exists(prefix + ".index"):
        return prefix
    return None


# ----------------------------------------------------------------------------- readers
def open_variables(path: str) -> VariableSet:
    """The variables (with values) of a checkpoint, Keras file or SavedModel at ``path``."""
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
        return _open_keras_model(path)
    if fmt == "keras-weights":
        return _open_h5_weights(path)
    return _open_h5(path)


def list_checkpoint_variables(path: str) -> list[VarInfo]:
    """Names, dtypes and shapes of the variables stored at ``path``, sorted by name."""
    return open_variables(path).list()


def diff_checkpoint(ckpt_path: str, model_path: str,
                    maps: Iterable[str] | None = None) -> Diff:
    """Which of a model's variables the checkpoint would restore (``inspect --against``)."""
    source = open_variables(ckpt_path)
    target = model_variable_infos(model_path)
    aliases = _aliases_for(source, model_path)
    return diff_variables(source.infos, target, NameMap.parse(maps), aliases)


def _aliases_for(source: VariableSet, model_path: str) -> dict[str, str]:
    if source.format != "keras-weights":
        return {}
    fmt = detect_format(model_path)
    if fmt not in ("keras", "h5"):
        return {}
    return keras_weight_aliases(load_keras_model(model_path))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def _open_reader(prefix: str, shown: str) -> Any:
    import tensorflow as tf

    try:
        return tf.train.load_checkpoint(prefix)
    except Exception as exc:
        raise UserError(f"cannot read checkpoint {shown}: {_first_line(exc)}") from None


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
        raise UserError(f"cannot parse {pb}: {_first_line(exc)}") from None
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


def load_keras_model(path: str) -> Any:
    """A Keras 3 model from ``.keras`` / ``.h5`` (compile=False); UserError when unreadable."""
    import keras

    try:
        return keras.saving.load_model(path, compile=False)
    except Exception as exc:
        raise UserError(f"cannot load Keras model {path}: {_first_line(exc)}") from None


def keras_variables(model: Any) -> dict[str, Any]:
    """A Keras model's variables by path (``layer/kernel``), in model order."""
    out: dict[str, Any] = {}
    for v in model.weights:
        name = getattr(v, "path", None) or v.name.split(":")[0]
        out.setdefault(name, v)
    return out


def var_info(name: str, v: Any) -> VarInfo:
    """The VarInfo of a Keras or TF variable ``v`` under ``name``."""
    return VarInfo(name, np.dtype(_keras_dtype(v)).name, tuple(int(d) for d in v.shape))


def _keras_dtype(v: Any) -> str:
    dt = v.dtype
    return dt if isinstance(dt, str) else getattr(dt, "name", str(dt))


def _open_keras_model(path: str) -> VariableSet:
    _check_keras_zip(path)
    try:
        model = load_keras_model(path)
    except UserError:  # e.g. custom layers not importable here: read the stored weights
        return _open_keras_zip_weights(path)
    variables = keras_variables(model)
    infos = {n: var_info(n, v) for n, v in variables.items()}
    return VariableSet(path, "keras", infos, lambda n: np.asarray(variables[n].numpy()))


def _open_keras_zip_weights(path: str) -> VariableSet:
    """The ``model.weights.h5`` inside a ``.keras`` zip, named ``layer/vars/i``."""
    import tempfile

    with zipfile.ZipFile(path) as archive:
        if "model.weights.h5" not in archive.namelist():
            raise UserError(f"cannot load Keras model {path}: it holds no model.weights.h5")
        data = archive.read("model.weights.h5")
    fd, tmp = tempfile.mkstemp(suffix=".weights.h5")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    weights = _open_h5_weights(tmp)
    values = {n: weights.read(n) for n in weights.infos}
    os.remove(tmp)
    return VariableSet(path, "keras-weights", weights.infos, values.__getitem__)


def _check_keras_zip(path: str) -> None:
    if not zipfile.is_zipfile(path):
        raise UserError(f"cannot load Keras model {path}: not a .keras (zip) file")


def _h5(path: str) -> Any:
    import h5py

    try:
        return h5py.File(path, "r")
    except Exception as exc:
        raise UserError(f"cannot read {path}: not an HDF5 file ({_first_line(exc)})") from None


def _open_h5(path: str) -> VariableSet:
    with _h5(path) as f:
        full_model = "model_config" in f.attrs
    if not full_model:
        return _open_h5_weights(path)
    model = load_keras_model(path)
    variables = keras_variables(model)
    infos = {n: var_info(n, v) for n, v in variables.items()}
    return VariableSet(path, "h5", infos, lambda n: np.asarray(variables[n].numpy()))


def _open_h5_weights(path: str) -> VariableSet:
    """Weights-only HDF5: legacy (``layer_names`` + ``weight_names``) or Keras 3 layout."""
    with _h5(path) as f:
        root = f["model_weights"] if "model_weights" in f else f
        if "layer_names" in root.attrs:
            datasets = _legacy_h5_datasets(root)
        else:
            datasets = _keras3_h5_datasets(f)
        infos = {n: VarInfo(n, np.dtype(f[k].dtype).name, tuple(f[k].shape))
                 for n, k in datasets.items()}

    def read(name: str) -> np.ndarray:
        with _h5(path) as f:
            return np.asarray(f[datasets[name]][()])

    return VariableSet(path, "keras-weights", infos, read)


def _legacy_h5_datasets(root: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for layer in root.attrs["layer_names"]:
        layer = layer.decode() if isinstance(layer, bytes) else str(layer)
        group = root[layer]
        for wname in group.attrs.get("weight_names", []):
            wname = wname.decode() if isinstance(wname, bytes) else str(wname)
            out[wname.split(":")[0]] = group[wname].name
    return out


def _keras3_h5_datasets(f: Any) -> dict[str, str]:
    """``layer_name/vars/i`` -> dataset path for the Keras 3 ``.weights.h5`` layout."""
    import h5py

    out: dict[str, str] = {}

    def visit(key: str, obj: Any) -> None:
        if not isinstance(obj, h5py.Dataset):
            return
        group_path, _, index = key.rpartition("/")
        group = f[group_path]
        owner = group.attrs.get("name")
        owner = owner.decode() if isinstance(owner, bytes) else owner
        name = f"{owner}/vars/{index}" if owner else key
        if name in out:
            name = key
        out[name] = obj.name

    f.visititems(visit)
    return out


def keras_weight_aliases(model: Any) -> dict[str, str]:
    """``layer_name/vars/i`` (Keras 3 ``.weights.h5`` slots) -> variable path, for ``model``."""
    aliases: dict[str, str] = {}
    for layer in _all_layers(model):
        own = list(getattr(layer, "_trainable_variables", [])) + list(
            getattr(layer, "_non_trainable_variables", []))
        for i, v in enumerate(own):
            aliases.setdefault(f"{layer.name}/vars/{i}", getattr(v, "path", v.name))
    return aliases


def _all_layers(model: Any) -> list[Any]:
    try:
        return list(model._flatten_layers(include_self=True, recursive=True))
    except (AttributeError, TypeError):
        return [model, *getattr(model, "layers", [])]


# ----------------------------------------------------------------------------- model side
def model_variable_infos(path: str) -> dict[str, VarInfo]:
    """The variables a model declares: a TF1 ``.meta`` graph, Keras model or SavedModel."""
    fmt = detect_format(path)
    if fmt == "meta":
        return meta_graph_variables(path)
    if fmt == "checkpoint":
        prefix = _checkpoint_prefix(path) or path
        if os.path.exists(prefix + ".meta"):
            return meta_graph_variables(prefix + ".meta")
    return open_variables(path).infos


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
    """``import_meta_graph`` into the default graph; UserError when the file cannot be parsed."""
    import tensorflow as tf

    try:
        return tf.compat.v1.train.import_meta_graph(meta_path, clear_devices=True)
    except Exception as exc:
        raise UserError(f"cannot parse meta graph {meta_path}: {_first_line(exc)}") from None
