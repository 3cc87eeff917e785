"""No model code runs without ``--unsafe``: what a model file would run, found before loading it.

Two kinds of code travel inside TensorFlow model files:

* **Keras layers that carry Python** (``Lambda``'s marshalled bytecode, ``__lambda__`` functions,
  tf_keras RNN cell wrappers with a lambda ``*_fn``), objects that read files or import modules
  on load (``TFSMLayer``, lookup layers given a vocabulary *path*, a config ``module`` outside
  Keras), and tf_keras op layers (``TFOpLambda``, ``SlicingOpLambda``, ``ClassMethod``,
  ``InstanceMethod``, ``InstanceProperty``) that call a TensorFlow API function *named in the
  file* while the model is rebuilt. The model config is **parsed as JSON** (never matched as
  text: ``"class_name" : "\\u004cambda"`` is ``Lambda``), nested models and wrappers included.
  Op layers are allowed when the function they name is pure tensor math (:data:`OP_LAYER_
  NAMESPACES`, :data:`OP_LAYER_FUNCTIONS`); tf_keras has no safe mode, so this check is the
  only guard for tf_keras ``.h5`` files. HDF5 links and datasets stored in *other* files are
  refused too.
* **Graph ops that touch the file system, the network or Python** (:mod:`rewriter.frontends.
  unsafe_ops`), in the graph or in any function of its library. Checkpoint ``Save``/``Restore``
  ops are allowed only on the standard saver's path (the ``saver_def`` targets and functions
  nothing else calls).

Keras metadata in a SavedModel (``keras_metadata.pb``) is parsed too, but a Lambda found there is
a note, not a refusal: rewriter loads SavedModels with ``tf.saved_model.load``, which never
unmarshals Keras Python; it runs the graph traced at save time, and that graph is scanned.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from rewriter.errors import UserError
from rewriter.frontends.unsafe_ops import CHECKPOINT_OPS, CONDITIONAL_OPS, why_unsafe

UNSAFE_HINT = ("pass --unsafe only if you trust the file: loading it runs code or touches files "
               "chosen by its author")


@dataclass(frozen=True)
class Finding:
    """One thing in a model file that would run code or touch files: what, where, why."""

    what: str   # op type or Keras class name
    where: str  # node (in function F) or layer name
    why: str

    def describe(self) -> str:
        return f"{self.what} ({self.where}: {self.why})"


class UnsafeModelError(UserError):
    """A model refused in safe mode; ``findings`` says what and where."""

    def __init__(self, path: str, findings: list[Finding]) -> None:
        self.findings = findings
        shown = "; ".join(f.describe() for f in findings[:4])
        more = f"; and {len(findings) - 4} more" if len(findings) > 4 else ""
        super().__init__(f"{path}: refused in safe mode: {shown}{more}; {UNSAFE_HINT}")


def refuse(path: str, findings: list[Finding], unsafe: bool) -> None:
    """Raise :class:`UnsafeModelError` for ``findings`` unless the user passed ``--unsafe``."""
    if findings and not unsafe:
        raise UnsafeModelError(path, findings)


# ----------------------------------------------------------------------------- Keras configs
#: Keras classes that run code or touch files on load, whatever their config says.
CODE_CLASSES = {
    "Lambda": "runs Python code stored in the file",
    "__lambda__": "a Python lambda stored in the file",
    "TFSMLayer": "loads and runs a SavedModel from a path outside the file",
    "TorchModuleWrapper": "unpickles a torch module (runs code)",
}
#: Lookup layers read their vocabulary from a file when it is given as a path.
_VOCAB_LAYERS = {"StringLookup", "IntegerLookup", "TextVectorization", "IndexLookup"}
#: Packages a Keras 3 config may name in ``module`` (Keras refuses others in safe mode too).
_MODULE_PACKAGES = {"keras", "keras_hub", "keras_cv", "keras_nlp", "tf_keras", "builtins"}
#: tf_keras op layers (``TFOpLambda``) may call functions in these TF namespaces: pure math.
OP_LAYER_NAMESPACES = ("__operators__.", "math.", "nn.", "linalg.", "signal.", "image.",
                       "bitwise.", "random.", "sparse.", "ragged.", "strings.")
#: ... and these top-level TF functions (tensor creation and shape/array manipulation).
OP_LAYER_FUNCTIONS = frozenset("""
abs add add_n argmax argmin argsort boolean_mask broadcast_to cast clip_by_norm clip_by_value
concat constant convert_to_tensor cos cosh cumsum divide einsum equal exp expand_dims eye fill
floor gather gather_nd greater greater_equal identity less less_equal linspace logical_and
logical_not logical_or matmul maximum meshgrid minimum multiply negative norm not_equal one_hot
ones ones_like pad pow range rank reduce_all reduce_any reduce_logsumexp reduce_max reduce_mean
reduce_min reduce_prod reduce_sum repeat reshape reverse roll round scatter_nd searchsorted shape
sigmoid sign sin sinh size slice sort split sqrt square squeeze stack stop_gradient
strided_slice subtract tan tanh tensor_scatter_nd_update tensordot tile transpose truediv
unstack where zeros zeros_like
""".split())
#: ``ClassMethod`` layers may call class methods of these TF types only.
_CLASS_METHOD_TYPES = {"RaggedTensor", "SparseTensor"}
_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
#: What h5py raises on a damaged file (its C library's errors surface as all of these).
H5_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError)


def parse_config(text: str | bytes, where: str) -> Any:
    """A model config parsed as JSON; duplicate keys are refused (two readers could disagree)."""
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in items]
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise UserError(f"{where}: model config repeats the key {dup!r}; the file is "
                            "malformed or crafted")
        return dict(items)

    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(f"{where}: model config is not UTF-8 text") from None
    try:
        return json.loads(text, object_pairs_hook=pairs)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, UserError):
            raise
        raise UserError(f"{where}: model config is not valid JSON ({str(exc)[:120]})") from None


def config_findings(config: Any) -> list[Finding]:
    """Everything in a parsed Keras config that would run code or touch files when loaded."""
    found: list[Finding] = []
    stack = [config]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            here = list(_dict_findings(item))
            found.extend(here)
            if not here:  # one finding per object: a Lambda's own config says nothing more
                stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _dict_findings(obj: dict[str, Any]) -> Iterator[Finding]:
    cls = obj.get("class_name")
    cfg = obj.get("config") if isinstance(obj.get("config"), dict) else {}
    name = str(cfg.get("name") or obj.get("name") or "?")
    if isinstance(cls, str):
        if cls in CODE_CLASSES:
            yield Finding(cls, f"layer {name!r}", CODE_CLASSES[cls])
        elif cls in ("TFOpLambda", "SlicingOpLambda"):
            fn = cfg.get("function")
            if not (isinstance(fn, str) and _pure_tf_function(fn)):
                yield Finding(cls, f"layer {name!r}", f"calls TF function {fn!r} while loading "
                              "(only math and array functions are allowed)")
        elif cls == "ClassMethod":
            sym, meth = cfg.get("cls_symbol"), cfg.get("method_name")
            if sym not in _CLASS_METHOD_TYPES or not _public_name(meth):
                yield Finding(cls, f"layer {name!r}", f"calls {sym!r}.{meth!r} while loading")
        elif cls in ("InstanceMethod", "InstanceProperty"):
            attr = cfg.get("method_name", cfg.get("attr_name"))
            if not _public_name(attr):
                yield Finding(cls, f"layer {name!r}", f"reads tensor attribute {attr!r}")
        elif cls in _VOCAB_LAYERS and isinstance(cfg.get("vocabulary"), str):
            yield Finding(cls, f"layer {name!r}", f"reads the vocabulary file "
                          f"{cfg['vocabulary']!r}")
    for key, value in obj.items():
        if isinstance(key, str) and key.endswith("_type") and value == "lambda":
            yield Finding(key, f"layer {name!r}", "holds marshalled Python code")
    module = obj.get("module")
    if isinstance(cls, str) and isinstance(module, str) and \
            module.split(".", 1)[0] not in _MODULE_PACKAGES:
        yield Finding(str(cls), f"module {module!r}", "imports a module outside Keras")


def _pure_tf_function(name: str) -> bool:
    return name in OP_LAYER_FUNCTIONS or (name.startswith(OP_LAYER_NAMESPACES)
                                          and all(_IDENTIFIER.match(p) or p.startswith("__")
                                                  for p in name.split(".")))


def _public_name(name: Any) -> bool:
    return isinstance(name, str) and bool(_IDENTIFIER.match(name))


def keras_file_findings(path: str, fmt: str) -> list[Finding]:
    """Findings for a ``.keras`` zip or a Keras ``.h5`` file (config and HDF5 storage)."""
    if fmt == "keras":
        return _keras_zip_findings(path)
    import h5py

    from rewriter.frontends.sizes import check_h5

    try:
        with h5py.File(path, "r") as f:
            check_h5(f, path)  # sizes before reads
            raw = f.attrs.get("model_config")
            found = h5_storage_findings(f)
    except H5_ERRORS as exc:
        raise UserError(f"{path}: cannot read HDF5 file ({str(exc)[:160]}); is it truncated "
                        "or damaged?") from None
    if raw is None:
        return found
    return found + config_findings(parse_config(_attr_text(raw), path))


def _attr_text(raw: Any) -> str | bytes:
    if isinstance(raw, (str, bytes)):
        return raw
    try:  # numpy bytes/str scalars or arrays of one element
        item = raw.item() if hasattr(raw, "item") else raw
    except ValueError:
        item = None
    if isinstance(item, (str, bytes)):
        return item
    raise UserError("HDF5 attribute model_config is not text")


def _keras_zip_findings(path: str) -> list[Finding]:
    import io
    import zipfile

    from rewriter.frontends.sizes import check_h5, check_zip

    try:
        with zipfile.ZipFile(path) as archive:
            check_zip(archive, path)  # sizes before reads
            members = [i for i in archive.infolist() if i.filename == "config.json"]
            if len(members) != 1:
                raise UserError(f"{path}: a .keras archive holds one config.json; this one has "
                                f"{len(members)}")
            text = archive.read(members[0])
            weights = [i for i in archive.infolist() if i.filename.endswith(".h5")]
            found: list[Finding] = []
            for info in weights:
                found += _h5_bytes_findings(io.BytesIO(archive.read(info)),
                                            f"{path}!{info.filename}", check_h5)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise UserError(f"{path}: not a readable .keras archive ({str(exc)[:160]})") from None
    return found + config_findings(parse_config(text, path))


def _h5_bytes_findings(data: Any, name: str, check: Any) -> list[Finding]:
    import h5py

    try:
        with h5py.File(data, "r") as f:
            check(f, name)
            return h5_storage_findings(f)
    except H5_ERRORS as exc:  # what cannot be scanned is not loaded
        raise UserError(f"{name} in the .keras archive is not a readable HDF5 file "
                        f"({str(exc)[:160]}); is it damaged?") from None


def h5_storage_findings(f: Any) -> list[Finding]:
    """HDF5 links to other files, and datasets whose bytes live in other files."""
    import h5py

    found: list[Finding] = []

    def visit(name: str, link: Any) -> None:
        if isinstance(link, h5py.ExternalLink):
            found.append(Finding("ExternalLink", name, f"reads the file {link.filename!r}"))
            return
        if isinstance(link, h5py.SoftLink):
            return
        obj = f.get(name)
        if isinstance(obj, h5py.Dataset) and (obj.external or obj.is_virtual):
            found.append(Finding("Dataset", name, "its data is stored in another file"))

    f.visititems_links(visit)
    return found


def keras_metadata_notes(directory: str) -> list[str]:
    """Notes on Keras layers with Python code described by a SavedModel's keras_metadata.pb."""
    from pathlib import Path

    path = Path(directory) / "keras_metadata.pb"
    if not path.is_file():
        return []
    try:
        from tf_keras.protobuf import saved_metadata_pb2
    except ImportError:  # pragma: no cover - tf_keras is a dependency
        return []
    meta = saved_metadata_pb2.SavedMetadata()
    try:
        meta.ParseFromString(path.read_bytes())
    except Exception:  # noqa: BLE001 - a damaged metadata file is only not described
        return ["keras_metadata.pb is not readable; it is not used"]
    found: list[Finding] = []
    for node in meta.nodes:
        try:
            found += config_findings(parse_config(node.metadata, str(path)))
        except UserError:
            continue
    if not found:
        return []
    shown = ", ".join(sorted({f"{f.what} {f.where}" for f in found})[:4])
    return [f"keras_metadata.pb describes {shown}: their Python code is not run (the SavedModel "
            "is loaded as a graph, which is scanned for file-system and Python ops)"]


# ----------------------------------------------------------------------------- graphs
def graph_findings(graph_def: Any, *, fetches: Iterable[str] | None = None,
                   feeds: Iterable[str] = (), saver_targets: Iterable[str] = ()) -> list[Finding]:
    """Unsafe ops that running this graph could execute.

    ``fetches`` (tensor or node names) limits the scan to what running them executes, stopping
    at ``feeds`` (tensor names); None scans every node and every library function.
    ``saver_targets`` are the standard saver's save/restore nodes: checkpoint ops that only
    they use are allowed.
    """
    nodes = {n.name: n for n in graph_def.node}
    library = {f.signature.name: f for f in graph_def.library.function}
    saver = _ancestors(nodes, [_node_of(t) for t in saver_targets if _node_of(t) in nodes], ())
    if fetches is None:
        others = _ancestors(nodes, [n for n in nodes if n not in saver], ())
    else:
        others = _ancestors(nodes, list(fetches), set(feeds))
    saver_only = saver - others
    found: list[Finding] = []
    for name in sorted(saver | others):
        found.extend(_node_findings(nodes[name], f"node {name!r}", name in saver_only))
    saver_fns = _functions(library, [nodes[n] for n in saver_only])
    # Without fetches every function may be called (e.g. through a SavedModel's object graph).
    start = set(library) - saver_fns if fetches is None else set()
    other_fns = _functions(library, [nodes[n] for n in others], start)
    for fname in sorted(saver_fns | other_fns):
        for node in library[fname].node_def:
            found.extend(_node_findings(node, f"node {node.name!r} in function {fname}",
                                        fname not in other_fns))
    return found


def _node_of(ref: str) -> str:
    return ref.lstrip("^").split(":")[0]


def _ancestors(nodes: dict[str, Any], roots: list[str], feeds: Any) -> set[str]:
    """Nodes that running ``roots`` (node or tensor names) executes; fed tensors stop the walk."""
    seen: set[str] = set()
    stack = [r for r in roots if not _fed(r, feeds)]
    while stack:
        name = _node_of(stack.pop())
        if name in seen or name not in nodes:
            continue
        seen.add(name)
        for ref in nodes[name].input:
            if not _fed(ref, feeds):
                stack.append(ref)
    return seen


def _fed(ref: str, feeds: Any) -> bool:
    if not feeds or ref.startswith("^"):
        return False
    tensor = ref if ":" in ref else f"{ref}:0"
    return tensor in feeds or ref in feeds


def _functions(library: dict[str, Any], nodes: list[Any], start: Iterable[str] = ()) -> set[str]:
    """Library functions the given nodes call (and ``start``), transitively."""
    reached: set[str] = set()
    stack = [f for n in nodes for f in _called(n, library)] + list(start)
    while stack:
        fname = stack.pop()
        if fname in reached:
            continue
        reached.add(fname)
        for node in library[fname].node_def:
            stack.extend(_called(node, library))
    return reached


def _called(node: Any, library: dict[str, Any]) -> Iterator[str]:
    if node.op in library:
        yield node.op
    for value in node.attr.values():
        kind = value.WhichOneof("value")
        if kind == "func" and value.func.name in library:
            yield value.func.name
        elif kind == "list":
            yield from (f.name for f in value.list.func if f.name in library)


def _node_findings(node: Any, where: str, allow_checkpoint: bool) -> Iterator[Finding]:
    op = node.op
    if op in CHECKPOINT_OPS and allow_checkpoint:
        return
    why = why_unsafe(op)
    if why is not None:
        yield Finding(op, where, why)
        return
    rule = CONDITIONAL_OPS.get(op)
    if rule is not None:
        attr, safe = rule
        value = node.attr[attr].s.decode("utf-8", "replace") if attr in node.attr else safe[0]
        if not value.startswith(safe):
            yield Finding(op, where, f"{attr} {value!r} names a file")


def meta_graph_findings(meta_graph: Any, *, fetches: Iterable[str] | None = None,
                        feeds: Iterable[str] = ()) -> list[Finding]:
    """Unsafe ops of a ``MetaGraphDef`` (SavedModel or ``.meta``); its savers' own checkpoint
    ops are allowed."""
    targets = list(_saver_targets(meta_graph))
    return graph_findings(meta_graph.graph_def, fetches=fetches, feeds=feeds,
                          saver_targets=targets)


def collection_protos(meta_graph: Any, key: str, proto: type) -> list[Any]:
    """The entries of a MetaGraph collection of serialized ``proto`` messages; unreadable
    entries are skipped (they exempt nothing, and ``import_meta_graph`` reports them)."""
    if key not in meta_graph.collection_def:
        return []
    items = []
    for raw in meta_graph.collection_def[key].bytes_list.value:
        item = proto()
        try:
            item.ParseFromString(raw)
        except Exception:  # noqa: BLE001 - protobuf's DecodeError and friends
            continue
        items.append(item)
    return items


def _saver_targets(meta_graph: Any) -> Iterator[str]:
    from tensorflow.core.protobuf import saver_pb2

    savers = [meta_graph.saver_def] if meta_graph.HasField("saver_def") else []
    savers += collection_protos(meta_graph, "savers", saver_pb2.SaverDef)
    for s in savers:
        yield from (t for t in (s.save_tensor_name, s.restore_op_name) if t)


def read_saved_model(directory: str) -> Any:
    """The ``SavedModel`` proto of ``saved_model.pb`` (or ``.pbtxt``) in ``directory``."""
    from pathlib import Path

    from google.protobuf import message, text_format
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    pb, pbtxt = Path(directory) / "saved_model.pb", Path(directory) / "saved_model.pbtxt"
    try:
        if pb.is_file():
            sm.ParseFromString(pb.read_bytes())
        else:
            text_format.Parse(pbtxt.read_text(encoding="utf-8"), sm)
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError, ValueError,
            RecursionError) as exc:
        raise UserError(f"{directory}: saved_model.pb is not a valid SavedModel "
                        f"({str(exc)[:120] or 'parse error'}); is it truncated?") from None
    except OSError as exc:
        raise UserError(f"{directory}: cannot read saved_model.pb ({exc.strerror})") from None
    return sm


#: Collections of TF1 SavedModels whose ops loading runs (init ops, table initialisers).
_TF1_LOAD_COLLECTIONS = ("saved_model_main_op", "legacy_init_op", "table_initializer",
                         "saved_model_train_op")


def saved_model_findings(directory: str) -> list[Finding]:
    """Unsafe ops in any MetaGraph of the SavedModel at ``directory``.

    A TF2 SavedModel is scanned whole (all nodes, all functions: loading runs init ops and
    resource initialisers, and its object graph may call any function). A TF1 MetaGraph (no
    object graph) runs only what loading runs: its saver's restore, its init ops and table
    initialisers, and its signatures from their inputs to their outputs; another Saver's ops
    in the graph never run and are not judged."""
    found: list[Finding] = []
    for meta_graph in read_saved_model(directory).meta_graphs:
        if meta_graph.object_graph_def.nodes:
            found.extend(meta_graph_findings(meta_graph))
            continue
        fetches, feeds = [], []
        for sig in meta_graph.signature_def.values():
            fetches.extend(t.name for t in sig.outputs.values())
            feeds.extend(t.name for t in sig.inputs.values())
        for key in _TF1_LOAD_COLLECTIONS:
            if key in meta_graph.collection_def:
                col = meta_graph.collection_def[key]
                fetches.extend(col.node_list.value)
        found.extend(meta_graph_findings(meta_graph, fetches=fetches, feeds=feeds))
    return found
