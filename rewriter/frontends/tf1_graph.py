"""TF1 training graphs to inference graphs, on the GraphDef, before TensorFlow imports anything.

A TF1 ``.meta`` is the training graph: gradients, optimizer slots and updates, the saver,
summaries, queues, a labels and a learning-rate placeholder, and a bool ``is_training``
placeholder that every batch norm and dropout reads through ``tf.cond`` (``Switch``/``Merge``).
Inference needs none of it but the forward path of the chosen outputs, so:

* :func:`inference_subgraph` copies only the outputs' ancestors (stale ``_output_shapes``
  attributes dropped; control edges to state updates cut): gradients, optimizer, saver,
  summary and queue nodes are never imported, and placeholders that do not reach the outputs
  (labels, learning rate) are not inputs.
* :func:`settle` bakes scalar placeholders in as constants (``--set NAME=VALUE``; a bool scalar
  placeholder that decides a ``Switch`` is a training flag and is set False unless ``--set``
  says otherwise) and :func:`fold_conds` folds every ``Switch`` whose predicate is then
  constant to the branch it takes: the other branch is removed (exact: it never runs), so
  batch norm is its inference form and dropout is gone.
* :func:`output_candidates` finds outputs as a person would: the sinks of the graph without its
  control-flow helpers and training-only nodes, nearest the end first.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from rewriter.errors import UserError
from rewriter.ir.graph import GraphDef, GraphIndex, make_const, np_dtype, parse_input

#: Ops that only move control (tf.cond / tf.while_loop plumbing): never an output.
CONTROL_FLOW_OPS = frozenset({"Switch", "RefSwitch", "Merge", "RefMerge", "Enter", "RefEnter",
                              "Exit", "RefExit", "NextIteration", "RefNextIteration",
                              "LoopCond", "ControlTrigger", "NoOp"})
#: Ops that change state, save, restore, summarise or feed queues: training-only roots.
_TRAINING_OP = re.compile(r"^(Apply|ResourceApply|SparseApply|ResourceSparseApply|Assign|"
                          r"ScatterAdd|ScatterSub|ScatterUpdate|ResourceScatter|.*Summary.*|"
                          r"Save|SaveV2|SaveSlices|Restore|RestoreV2|RestoreSlice|"
                          r"MergeV2Checkpoints|ShardedFilename|QueueEnqueue.*|QueueClose.*|"
                          r"VarIsInitializedOp|IsVariableInitialized|Assert)")
#: Name scopes of training-only parts (gradients, optimizers, losses, metrics, saver, init).
_TRAINING_SCOPE = re.compile(
    r"(^|/)(gradients|train|training_ops|optimizer|Adam|Adagrad|RMSProp|Momentum|"
    r"GradientDescent|Ftrl|beta[12]_power|loss|losses|total_loss|cross_entropy|xent|"
    r"softmax_cross_entropy_loss|sigmoid_cross_entropy_loss|l2_loss|regularization_loss|"
    r"metrics|accuracy|summaries|summary|save|init|report_uninitialized_variables|"
    r"global_step|ExponentialMovingAverage|AssignMovingAvg\w*|Initializer|Regularizer|"
    r"IsInitialized)(_\d+)?(/|$)", re.IGNORECASE)
_LOSS_SCOPE = re.compile(r"(^|/)(loss|losses|total_loss|cross_entropy|xent)(_\d+)?(/|$)",
                         re.IGNORECASE)
#: Helper nodes of tf.cond (their Identity nodes are not outputs either).
_COND_HELPER = re.compile(r"/(switch_t|switch_f|pred_id|Switch(_\d+)?|Merge)$")
#: MetaGraph collections whose members (and everything computed from them) are training-only.
TRAINING_COLLECTIONS = ("train_op", "losses", "summaries", "update_ops", "local_variables",
                        "metric_variables", "global_step", "queue_runners", "cond_context",
                        "regularization_losses")


def inference_subgraph(graph_def: GraphDef, outputs: Iterable[str]) -> GraphDef:
    """A copy of the nodes the ``outputs`` (node or tensor names) depend on, with the library
    (``graph_def`` itself, changed in place, when they depend on every node).

    ``_output_shapes`` (a cache TF may find stale in a training graph) is dropped, and control
    edges from state-changing nodes (an ``update_ops`` dependency) are cut before the walk.
    """
    nodes = {n.name: n for n in graph_def.node}
    missing = [o for o in outputs if parse_input(o)[0] not in nodes]
    if missing:
        raise UserError(f"--outputs names {missing[0]!r}, which is not a node of the graph")
    keep: set[str] = set()
    queue = deque(parse_input(o)[0] for o in outputs)
    while queue:
        name = queue.popleft()
        if name in keep or name not in nodes:
            continue
        keep.add(name)
        for ref in nodes[name].input:
            src, _, ctrl = parse_input(ref)
            if ctrl and src in nodes and _TRAINING_OP.match(nodes[src].op):
                continue
            queue.append(src)
    if len(keep) == len(nodes):  # nothing to prune (a frozen graph): no copy of its weights
        for node in graph_def.node:
            if "_output_shapes" in node.attr:
                del node.attr["_output_shapes"]
            node.ClearField("device")
        return graph_def
    out = GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        if node.name not in keep:
            continue
        copy = out.node.add()
        copy.CopyFrom(node)
        copy.ClearField("device")
        if "_output_shapes" in copy.attr:
            del copy.attr["_output_shapes"]
        refs = [r for r in copy.input if parse_input(r)[0] in keep]
        if len(refs) != len(copy.input):
            del copy.input[:]
            copy.input.extend(refs)
    return out


# ----------------------------------------------------------------------------- training flags
def training_flags(graph_def: GraphDef) -> list[str]:
    """Bool placeholders of scalar (or unknown) shape that decide a ``Switch`` (its predicate
    is computed from them): ``is_training``, Keras's ``keras_learning_phase``."""
    g = {n.name: n for n in graph_def.node}
    flags: list[str] = []
    for node in graph_def.node:
        if node.op in ("If", "StatelessIf") and node.input:
            pred = node.input[0]
        elif node.op in ("Switch", "RefSwitch") and len(node.input) >= 2:
            pred = node.input[1]
        else:
            continue
        for name in _ancestors(g, [pred], limit=32):
            p = g[name]
            if _is_scalar_placeholder(p) and p.attr["dtype"].type == 10 and name not in flags:
                flags.append(name)  # 10: DT_BOOL
    return flags


def settle(graph_def: GraphDef, settings: Mapping[str, str], protect: Iterable[str]
           ) -> tuple[GraphDef, list[str], dict[str, Any]]:
    """Bake ``settings`` (placeholder -> value text) and the training flags (False) in as
    constants and fold the conds they decide. Returns the graph, notes, and what was set
    (name -> value) for the report."""
    nodes = {n.name: n for n in graph_def.node}
    values: dict[str, Any] = {}
    notes: list[str] = []
    for name, text in settings.items():
        node = nodes.get(parse_input(name)[0])
        if node is None or node.op not in ("Placeholder", "PlaceholderWithDefault"):
            reach = [n.name for n in graph_def.node
                     if n.op in ("Placeholder", "PlaceholderWithDefault")]
            raise UserError(f"--set {name}: no placeholder {name!r} reaches the outputs; those "
                            f"that do: {', '.join(reach) or 'none'}")
        values[node.name] = _parse_value(node, text)
        notes.append(f"placeholder {node.name!r} set to {values[node.name]!r} by --set")
    for flag in training_flags(graph_def):
        if flag not in values:
            values[flag] = False
            notes.append(f"training flag {flag!r} (a bool placeholder deciding tf.cond) set to "
                         f"False: inference branches of batch norm and dropout; --set "
                         f"{flag}=true to change it")
    if not values:
        return graph_def, [], {}
    for node in graph_def.node:
        if node.name in values:
            const = make_const(node.name, np.asarray(values[node.name],
                                                     dtype=np_dtype(node.attr["dtype"].type)))
            node.CopyFrom(const)
    graph_def, folded = fold_conds(graph_def, protect)
    if folded:
        notes.append(f"{folded} tf.cond switch(es) folded to the branch taken (exact: the other "
                     "branch never runs)")
    return graph_def, notes, {k: (bool(v) if isinstance(v, (bool, np.bool_)) else v)
                              for k, v in values.items()}


def _parse_value(node: Any, text: str) -> Any:
    dtype = np_dtype(node.attr["dtype"].type)
    if not _is_scalar_placeholder(node):
        raise UserError(f"--set {node.name}: it is not a scalar placeholder (shape "
                        f"{_shape_text(node)}); --set bakes in scalars only")
    low = text.strip().lower()
    try:
        if dtype == np.bool_:
            if low not in ("true", "false", "1", "0"):
                raise ValueError
            return low in ("true", "1")
        if dtype.kind in "iu":
            return int(low)
        if dtype.kind == "f":
            return float(low)
    except ValueError:
        kind = "true or false" if dtype == np.bool_ else f"a {dtype.name} number"
        raise UserError(f"--set {node.name}={text}: the placeholder is {dtype.name}; give "
                        f"{kind}, e.g. --set {node.name}="
                        f"{'false' if dtype == np.bool_ else '0'}") from None
    raise UserError(f"--set {node.name}: placeholder of dtype {dtype.name} cannot be set")


def _is_scalar_placeholder(node: Any) -> bool:
    if node.op not in ("Placeholder", "PlaceholderWithDefault"):
        return False
    shape = node.attr["shape"].shape if "shape" in node.attr else None
    return shape is None or shape.unknown_rank or len(shape.dim) == 0


def _shape_text(node: Any) -> str:
    shape = node.attr["shape"].shape
    return "[" + ",".join("?" if d.size < 0 else str(d.size) for d in shape.dim) + "]"


def _ancestors(nodes: Mapping[str, Any], refs: Iterable[str], limit: int) -> list[str]:
    seen: list[str] = []
    queue = deque(parse_input(r)[0] for r in refs)
    while queue and len(seen) < limit:
        name = queue.popleft()
        if name in seen or name not in nodes:
            continue
        seen.append(name)
        queue.extend(parse_input(r)[0] for r in nodes[name].input if not r.startswith("^"))
    return seen


# ----------------------------------------------------------------------------- cond folding
def fold_conds(graph_def: GraphDef, protect: Iterable[str] = ()) -> tuple[GraphDef, int]:
    """Fold every ``Switch`` with a constant predicate to the branch it takes.

    TF's own semantics: the untaken output of such a Switch is dead, and so is every node that
    reads a dead tensor or has a control input from a dead node, except a ``Merge``, which
    forwards its one live input. Dead nodes are removed, a folded Switch's consumers read its
    data input, a Merge with one live input is replaced by that input. Returns the graph and
    the number of Switches folded.
    """
    from rewriter.ir.static_eval import static_value

    inlined = _fold_functional_ifs(graph_def)
    g = GraphIndex(graph_def)
    dead: set[str] = set()
    dead_port: dict[str, int] = {}
    taken: dict[str, int] = {}
    for node in g.topological_order():
        data = [r for r in node.input if not r.startswith("^")]
        ctrl = [r[1:] for r in node.input if r.startswith("^")]

        def is_dead(ref: str) -> bool:
            name, idx, _ = parse_input(ref)
            return name in dead or dead_port.get(name) == idx

        if node.op in ("Merge", "RefMerge"):
            if data and all(is_dead(r) for r in data):
                dead.add(node.name)
            continue
        if any(is_dead(r) for r in data) or any(c in dead for c in ctrl):
            dead.add(node.name)
            continue
        if node.op in ("Switch", "RefSwitch") and len(data) == 2:
            found = static_value(g, data[1])
            if found is not None and np.asarray(found[0]).size == 1:
                side = int(bool(np.asarray(found[0]).reshape(())))
                taken[node.name] = side
                dead_port[node.name] = 1 - side
    if not taken and not inlined:
        return graph_def, 0
    protected = {parse_input(p)[0] for p in protect}
    for name in dead:
        g.remove(name)
    for name, side in taken.items():
        if name in g:
            _bypass(g, name, side, g[name].input[0], protected)
    for node in [n for n in g if n.op in ("Merge", "RefMerge")]:
        live = [r for r in node.input if not r.startswith("^") and parse_input(r)[0] in g]
        if len(live) != len(node.input) and len(live) == 1:
            index = [r for r in node.input if not r.startswith("^")].index(live[0])
            for c in g.consumers(node.name):  # value_index readers get the taken index
                if any(parse_input(r)[:2] == (node.name, 1) for r in c.input):
                    const = g.add(make_const(g.unique_name(node.name + "/value_index"),
                                             np.int32(index)))
                    g.redirect(f"{node.name}:1", const.name)
            _bypass(g, node.name, 0, live[0], protected)
    _drop_helper_control_edges(g)
    g.prune(protected)
    return g.to_graph_def(), len(taken) + inlined


def _fold_functional_ifs(graph_def: GraphDef) -> int:
    """A functional ``If``/``StatelessIf`` (tf.cond as TF 2 writes it, also in a compat.v1
    graph) whose condition is constant becomes a call of the branch taken, then inlined."""
    from rewriter.frontends._normalize import _inline_calls
    from rewriter.ir.static_eval import static_value

    if not any(n.op in ("If", "StatelessIf") for n in graph_def.node):
        return 0
    g = GraphIndex(graph_def)
    count = 0
    for node in [n for n in g if n.op in ("If", "StatelessIf")]:
        found = static_value(g, node.input[0])
        if found is None or np.asarray(found[0]).size != 1:
            continue
        side = "then_branch" if bool(np.asarray(found[0]).reshape(())) else "else_branch"
        branch, tin, tout = node.attr[side], node.attr["Tin"], node.attr["Tout"]
        refs = list(node.input[1:])
        node.op = "PartitionedCall"
        attrs = {"f": branch, "Tin": tin, "Tout": tout}
        node.ClearField("attr")
        for key, value in attrs.items():
            node.attr[key].CopyFrom(value)
        g.set_inputs(node, refs)
        g.rename(node.name, g.unique_name(node.name + "/taken"))  # its body's names are free
        count += 1
    if count:
        out = g.to_graph_def()
        del graph_def.node[:]
        graph_def.node.extend(out.node)
        _inline_calls(graph_def)
    return count


def _bypass(g: GraphIndex, name: str, port: int, source: str, protected: set[str]) -> None:
    """Readers of ``name:port`` read ``source`` instead; the node becomes an Identity of it
    when it is protected (an output), else it is removed."""
    node = g[name]
    if name in protected:
        dtype = node.attr["T"]
        node.op = "Identity"
        node.ClearField("attr")
        node.attr["T"].CopyFrom(dtype)
        g.set_inputs(node, [source])
        if port:
            g.redirect(f"{name}:{port}", name)
        return
    g.redirect(f"{name}:{port}", source)
    if port == 0:
        g.redirect(name, source)
    for c in g.consumers(name):  # control readers: the node ran when its input did
        refs = [r if r != f"^{name}" else f"^{parse_input(source)[0]}" for r in c.input]
        g.set_inputs(c, list(dict.fromkeys(refs)))
    g.remove(name)


def _drop_helper_control_edges(g: GraphIndex) -> None:
    """Control edges from cond helpers (``cond/switch_t``, a Const) only placed nodes in a
    branch; once the branch is taken for good they order nothing."""
    for node in list(g):
        refs = [r for r in node.input if not (
            r.startswith("^") and (parse_input(r)[0] not in g
                                   or g[parse_input(r)[0]].op in ("Identity", "Const")))]
        if len(refs) != len(node.input):
            g.set_inputs(node, refs)


# ----------------------------------------------------------------------------- outputs
def output_candidates(graph_def: GraphDef, training_roots: Iterable[str] = ()) -> list[str]:
    """The sinks a person would take as outputs, nearest the end first: nodes no inference node
    reads, leaving out control-flow helpers and training-only nodes (gradients, optimizer, loss,
    metrics, summaries, saver, initialisers, queues: by op, by name scope, ``training_roots``
    from the MetaGraph's collections, and everything computed from them)."""
    nodes = {n.name: n for n in graph_def.node}
    consumers: dict[str, list[str]] = {}
    for node in graph_def.node:
        for ref in node.input:
            if not ref.startswith("^"):
                consumers.setdefault(parse_input(ref)[0], []).append(node.name)
    training = {n.name for n in graph_def.node
                if _TRAINING_SCOPE.search(n.name) or _TRAINING_OP.match(n.op)}
    training |= {parse_input(r)[0] for r in training_roots if parse_input(r)[0] in nodes}
    queue = deque(training)
    while queue:  # what is computed from training-only nodes is training-only
        for c in consumers.get(queue.popleft(), ()):
            if c not in training:
                training.add(c)
                queue.append(c)
    feeds_loss = {parse_input(r)[0] for n in training if _LOSS_SCOPE.search(n)
                  for r in nodes[n].input}
    changed = True
    while changed:  # what only training-only nodes read is training-only (the value an
        changed = False  # update assigns), except what a loss reads (the prediction)
        for name in nodes:
            users = consumers.get(name)
            if name not in training and users and name not in feeds_loss and \
                    all(u in training for u in users):
                training.add(name)
                changed = True
    infer = {n for n in nodes if n not in training}
    read = {parse_input(r)[0] for n in infer for r in nodes[n].input}
    sinks = [n for n in infer if n not in read and not _helper(nodes[n])]
    sinks = [n for n in sinks if not _unused_output(nodes[n], infer, nodes)] or sinks
    depth = _depths(nodes, infer)
    return sorted(sinks, key=lambda n: (-depth.get(n, 0), n))


def _helper(node: Any) -> bool:
    return (node.op in CONTROL_FLOW_OPS or node.op in ("Const", "Placeholder",
                                                       "PlaceholderWithDefault")
            or (node.op == "Identity" and bool(_COND_HELPER.search(node.name)))
            or node.name.endswith("/read"))


#: Ops that compute nothing new: as a sink inside a composite op's scope, a leftover.
_PLUMBING = frozenset({"Squeeze", "Reshape", "Identity", "ExpandDims", "Shape", "Cast",
                       "StopGradient"})


def _unused_output(node: Any, infer: set[str], nodes: Mapping[str, Any]) -> bool:
    """An unused output of a composite op (``moments/Squeeze_1``, the variance of a
    ``tf.nn.moments`` whose mean alone is read): plumbing in a scope another output of which
    is read outside it."""
    scope = node.name.rpartition("/")[0]
    if node.op not in _PLUMBING or not scope:
        return False
    inside = scope + "/"
    return any(parse_input(r)[0].startswith(inside) for n in infer
               if not n.startswith(inside) for r in nodes[n].input)


def _depths(nodes: Mapping[str, Any], names: set[str]) -> dict[str, int]:
    """Longest path (in data edges) from a source to each node; loop back edges ignored."""
    depth: dict[str, int] = {}
    indeg: dict[str, int] = {}
    succ: dict[str, list[str]] = {}
    for n in names:
        srcs = [parse_input(r)[0] for r in nodes[n].input if not r.startswith("^")]
        srcs = [s for s in srcs if s in names and "NextIteration" not in nodes[s].op]
        indeg[n] = len(srcs)
        for s in srcs:
            succ.setdefault(s, []).append(n)
    queue = deque(n for n, d in indeg.items() if d == 0)
    while queue:
        n = queue.popleft()
        for c in succ.get(n, ()):
            depth[c] = max(depth.get(c, 0), depth.get(n, 0) + 1)
            indeg[c] -= 1
            if indeg[c] == 0:
                queue.append(c)
    return depth


def collection_roots(meta_def: Any) -> list[str]:
    """Node names in the MetaGraph's training collections (train_op, losses, summaries, ...)."""
    out: list[str] = []
    for key in TRAINING_COLLECTIONS:
        if key in meta_def.collection_def:
            col = meta_def.collection_def[key]
            out.extend(v.decode("utf-8", "replace") if isinstance(v, bytes) else v
                       for v in col.node_list.value)
    return out


# ----------------------------------------------------------------------------- op libraries
#: Op-name prefixes of op libraries outside core TensorFlow.
_LIBRARIES = {"Addons>": "TensorFlow Addons (tensorflow-addons)", "Text>": "TensorFlow Text",
              "IO>": "TensorFlow I/O", "Sentencepiece": "sentencepiece / TensorFlow Text"}


def check_registered(graph_def: GraphDef, path: str) -> None:
    """UserError naming the first op TensorFlow does not know (a library not installed: tf.contrib,
    TensorFlow Addons, ...), its library and what to do; exit 2 instead of an import failure."""
    from tensorflow.python.framework import op_def_registry

    functions = {f.signature.name for f in graph_def.library.function}
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    for node in nodes:
        if node.op in functions or op_def_registry.get(node.op) is not None:
            continue
        lib = next((v for k, v in _LIBRARIES.items() if node.op.startswith(k)),
                   "tf.contrib (removed in TensorFlow 2) or another op library")
        before = [parse_input(r)[0] for r in node.input if not r.startswith("^")]
        end = f"end the model before it (--outputs {before[0]})" if before else \
            "cut the model around it with --inputs/--outputs"
        raise UserError(f"{path}: node {node.name!r} is op {node.op!r}, which this TensorFlow "
                        f"does not have: it comes from {lib}, which is not installed; rewriter "
                        f"cannot run it: {end}, or start after it (--inputs {node.name}), or "
                        "rebuild the graph with core TensorFlow ops")
