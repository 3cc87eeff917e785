"""Model Explorer node data: the job's findings drawn on the graph a user opens.

Model Explorer (Google's graph viewer; ``pip install 'rewriter[explore]'``, then ``rewrite
explore OUT``) colours nodes from *node data* files. This module writes them, beside the
artifact, in OUT/explorer/: where each op runs (placement), the rule that produced it (with its
bound), the int8 error each layer adds and its cosine, the range-starved tensors, and Vela's
per-layer cycles for Ethos-U; for the rewritten TF graph and for ``rewrite check``'s original
graph, the rules and the unsupported ops with their fixes.

The format is what ``model_explorer.node_data_builder.ModelNodeData.to_json_string`` writes:
``{graph_id: {"results": {node_id: {"value": v, "bgColor": c}}, ...}}`` (tests rebuild every
file with those classes). Node ids are the ones Model Explorer's adapters assign (checked in
tests with the adapters): for a ``.tflite``, the operator's index in its subgraph and the graph
id the subgraph's name; for a GraphDef ``.pb``, the node's index in ``graph_def.node``.
Categorical overlays (placement, rule) carry strings, which the viewer shows and counts as
labels; measured ones carry numbers. Render only: nothing here imports Model Explorer.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rewriter.host.fs import atomic_write_text

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    from tensorflow.core.framework.graph_pb2 import GraphDef

    from rewriter.job.results import Job
    from rewriter.targets.verdicts import OpVerdict

#: OUT's directory of node data, and the manifest ``rewrite explore`` reads.
EXPLORER_DIR = "explorer"
MANIFEST = "explorer.json"

#: Placement categories and their colours (light, so the labels stay readable).
ACCELERATOR, MAY_NOT_MAP = "accelerator", "accelerator (might not be mapped)"
HOST_EDGE, AFTER_CUT, HOST = "host (graph edge)", "host (after the cut)", "host (unsupported)"
COLOURS = {ACCELERATOR: "#a5d6a7", MAY_NOT_MAP: "#fff59d", HOST_EDGE: "#e0e0e0",
           AFTER_CUT: "#ffcc80", HOST: "#ef9a9a"}
RULE_COLOUR, STARVED_COLOUR = "#90caf9", "#ef9a9a"
#: Low-to-high gradients: more error / more cycles is redder; lower cosine is redder.
WORSE_HIGH = [{"stop": 0, "bgColor": "#ffffff"}, {"stop": 1, "bgColor": "#e53935"}]
WORSE_LOW = [{"stop": 0, "bgColor": "#e53935"}, {"stop": 1, "bgColor": "#ffffff"}]
#: Constants with more elements than this are emptied in the GraphDef written for the viewer
#: (it draws structure and shows at most 16 values of a constant).
VIEW_CONST_LIMIT = 64


@dataclass
class Overlay:
    """One node-data file: values per node id of one graph."""

    name: str  # file stem; Model Explorer names the node data after the file
    graph: str  # graph id (TFLite: the subgraph's name; GraphDef: "main")
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    gradient: list[dict[str, Any]] = field(default_factory=list)
    #: strings: show the count of each label in the side panel
    categorical: bool = False

    def set(self, node_id: int | str, value: float | int | str, colour: str | None = None) -> None:
        entry: dict[str, Any] = {"value": value}
        if colour is not None:
            entry["bgColor"] = colour
        self.results[str(node_id)] = entry

    def to_json(self) -> dict[str, Any]:
        """The ``ModelNodeData`` JSON (one graph)."""
        graph: dict[str, Any] = {"results": self.results, "name": self.name,
                                 "thresholds": [], "gradient": self.gradient,
                                 "hideInAggregatedStatsTable": False,
                                 "hideInChildrenStatsTable": False,
                                 "showExpandedSummaryOnGroupNode": self.categorical,
                                 "showLabelCountColumnsInChildrenStatsTable": self.categorical}
        return {self.graph: graph}


# ----------------------------------------------------------------------------- the artifact
def placement_of(v: OpVerdict) -> str:
    """The placement category of one artifact verdict."""
    from rewriter.targets.verdicts import EDGE_REASON

    if v.supported and v.placement == "accelerator":
        return MAY_NOT_MAP if v.warning else ACCELERATOR
    if v.supported:
        return HOST_EDGE if v.reason == EDGE_REASON else AFTER_CUT
    return HOST


def placement_overlay(verdicts: Sequence[OpVerdict], graph: str, cut: dict | None) -> Overlay:
    """Where each op of the file runs, with the reason when it is not plainly on the chip."""
    ov = Overlay("placement", graph, categorical=True)
    for i, v in enumerate(verdicts):
        if v.placement != "none":
            ov.set(i, *_placement_label(v, cut))
    return ov


def _placement_label(v: OpVerdict, cut: dict | None) -> tuple[str, str]:
    """(label, colour) of one verdict: its category, with the reason when it is not plainly on
    the chip (after the cut: where the cut is)."""
    kind = placement_of(v)
    why = v.warning if kind == MAY_NOT_MAP else v.reason
    if kind == AFTER_CUT and cut:
        why = f"the cut is at {cut.get('op')} ({cut.get('node')})"
    return (f"{kind}: {why}" if why and kind != ACCELERATOR else kind), COLOURS[kind]


def rule_text(r: dict[str, Any]) -> str:
    """"rule (exact)" or "rule (its bound)" for a ``rules_applied`` entry."""
    return f"{r['rule']} ({'exact' if r.get('exact') else r.get('exactness') or 'bounded'})"


def rule_overlay(tensor_names: Sequence[str], rules_applied: Sequence[dict[str, Any]],
                 graph: str) -> Overlay:
    """The rule that produced each op of the file: one of the op's fused TF nodes (the converter
    joins their names with ';' in the output tensor's name) is a node the rule created, or
    sits in the rule's name scope (``.../<rule>/...``)."""
    texts = {r["rule"]: rule_text(r) for r in rules_applied}
    by_node = {n: texts[r["rule"]] for r in rules_applied for n in r.get("created", [])}
    ov = Overlay("rule", graph, categorical=True)
    for i, tensor in enumerate(tensor_names):
        parts = [p[:-2] if p.endswith(":0") else p for p in tensor.split(";")]
        hit = next((by_node[p] for p in parts if p in by_node), None)
        if hit is None:
            hit = next((t for rule, t in texts.items() for p in parts if f"/{rule}/" in p), None)
        if hit is not None:
            ov.set(i, hit, RULE_COLOUR)
    return ov


def int8_overlays(int8: dict[str, Any], graph: str) -> list[Overlay]:
    """Per op: the relative error its int8 layer adds and the layer's cosine; the range-starved
    tensors (share of values below one quantisation step)."""
    added = Overlay("int8_added_error", graph, gradient=WORSE_HIGH)
    cosine = Overlay("int8_cosine", graph, gradient=WORSE_LOW)
    for layer in int8.get("layers", []):
        for i in range(int(layer["first"]), int(layer["last"]) + 1):
            if _finite(layer.get("added")):
                added.set(i, round(float(layer["added"]), 6))
            if _finite(layer.get("cosine")):
                cosine.set(i, round(float(layer["cosine"]), 6))
    starved = Overlay("range_starved", graph)
    for t in (int8.get("range") or {}).get("tensors", []):
        if t.get("starved") and int(t.get("index", -1)) >= 0 and _finite(t.get("below_step")):
            starved.set(int(t["index"]), round(float(t["below_step"]), 4), STARVED_COLOUR)
    return [o for o in (added, cosine, starved) if o.results]


def vela_overlay(layers: Sequence[Any], ops: Sequence[tuple[str, str, list[str]]],
                 graph: str) -> Overlay:
    """Vela's cycles per op of the file. A row of its per-layer CSV names the tensor it writes:
    an op's output, ``<output>_intermediate`` for a step of it (MEAN), or ``<input>_copy`` for
    the memory copy Vela makes of a RESHAPE's input (counted on that RESHAPE). ``ops``: (op, output tensor, input tensors) per op; the rows of
    one op are summed."""
    out_index = {out: i for i, (_, out, _) in enumerate(ops)}
    cycles: dict[int, int] = {}
    for layer in layers:
        i = out_index.get(layer.name)
        if i is None and layer.name.endswith("_intermediate"):  # a step of the op (MEAN)
            i = out_index.get(layer.name[:-len("_intermediate")])
        if i is None and layer.name.endswith("_copy"):
            kind = layer.original_op.upper().replace("_", "")
            i = next((j for j, (op, _, ins) in enumerate(ops) if layer.name[:-5] in ins
                      and op.replace("_", "") == kind), None)
        if i is not None:
            cycles[i] = cycles.get(i, 0) + int(layer.cycles)
    ov = Overlay("vela_cycles", graph, gradient=WORSE_HIGH)
    for i, c in cycles.items():
        ov.set(i, c)
    return ov


def tflite_op_tensors(path: str | Path) -> list[tuple[str, str, list[str]]]:
    """(op, first output tensor's name, input tensors' names) of each op of subgraph 0."""
    from rewriter.targets.artifact import read_tflite_tensors

    return read_tflite_tensors(Path(path))


def tflite_graph_ids(path: str | Path) -> list[str]:
    """Graph ids Model Explorer gives the subgraphs of a ``.tflite``: their names."""
    from rewriter.targets.artifact import tflite_subgraph_names

    return tflite_subgraph_names(Path(path))


def artifact_overlays(path: str | Path, verdicts: Sequence[OpVerdict], report: dict[str, Any],
                      vela_layers: Sequence[Any] = ()) -> list[Overlay]:
    """Every overlay on the exported ``.tflite`` (subgraph 0, whose ops the verdicts are)."""
    graph = tflite_graph_ids(path)[0]
    tensors = [v.node.split(" ", 1)[1] if v.node.startswith("#") and " " in v.node else v.node
               for v in verdicts]
    after = report.get("placement_after") or {}
    out = [rule_overlay(tensors, report.get("rules_applied") or [], graph),
           *int8_overlays(report.get("int8_layers") or {}, graph)]
    if vela_layers:
        out.append(vela_overlay(vela_layers, tflite_op_tensors(path), graph))
    # the last one loaded is the one Model Explorer colours the graph with at first
    return [*(o for o in out if o.results), placement_overlay(verdicts, graph, after.get("cut"))]


# ----------------------------------------------------------------------------- TF graphs
def view_graph(graph_def: GraphDef) -> GraphDef:
    """A copy of ``graph_def`` for the viewer: the same nodes in the same order (the node ids),
    constants of more than :data:`VIEW_CONST_LIMIT` elements emptied (shape and dtype kept)."""
    from tensorflow.core.framework.graph_pb2 import GraphDef as _GraphDef

    out = _GraphDef()
    out.CopyFrom(graph_def)
    for node in out.node:
        if node.op != "Const" or "value" not in node.attr:
            continue
        t = node.attr["value"].tensor
        n = math.prod(d.size for d in t.tensor_shape.dim) if t.tensor_shape.dim else 1
        if n > VIEW_CONST_LIMIT:
            dtype, shape = t.dtype, type(t.tensor_shape)()
            shape.CopyFrom(t.tensor_shape)
            t.Clear()
            t.dtype = dtype
            t.tensor_shape.CopyFrom(shape)
    return out


def graph_rule_overlay(graph_def: GraphDef, rules_applied: Sequence[dict[str, Any]]) -> Overlay:
    """The rewritten TF graph: the rule that created each node (its ``_rewriter_rule``)."""
    from rewriter.rules.base import RULE_ATTR

    texts = {r["rule"]: rule_text(r) for r in rules_applied}
    ov = Overlay("rule", "main", categorical=True)
    for i, node in enumerate(graph_def.node):
        if RULE_ATTR in node.attr:
            rule = node.attr[RULE_ATTR].s.decode()
            ov.set(i, texts.get(rule, rule), RULE_COLOUR)
    return ov


def saved_model_rule_overlay(saved_model_pb: Path,
                             rules_applied: Sequence[dict[str, Any]]) -> Overlay | None:
    """The rewritten SavedModel as Model Explorer's TF adapter draws it: the rule of each node
    a rule created, in the function that holds them (graph id: the function's name; node id:
    1 + the node's index in it, the adapter's GraphInputs node being 0)."""
    from tensorflow.core.protobuf.saved_model_pb2 import SavedModel

    sm = SavedModel()
    sm.ParseFromString(saved_model_pb.read_bytes())
    texts = {r["rule"]: rule_text(r) for r in rules_applied}
    by_node = {n: texts[r["rule"]] for r in rules_applied for n in r.get("created", [])}
    best: Overlay | None = None
    for fn in sm.meta_graphs[0].graph_def.library.function if sm.meta_graphs else []:
        ov = Overlay("rule", fn.signature.name, categorical=True)
        for i, node in enumerate(fn.node_def):
            if node.name in by_node:
                ov.set(i + 1, by_node[node.name], RULE_COLOUR)
        if ov.results and (best is None or len(ov.results) > len(best.results)):
            best = ov
    return best


def graph_check_overlays(graph_def: GraphDef, verdicts: Sequence[OpVerdict],
                         fixes: dict[str, str | None], cut: dict | None) -> list[Overlay]:
    """``rewrite check`` on the original graph: predicted placement of each node, and for each
    unsupported node the rule that fixes it (``fixes``: TF op -> rule or None)."""
    index = {n.name: i for i, n in enumerate(graph_def.node)}
    place = Overlay("placement", "main", categorical=True)
    fix = Overlay("fix", "main", categorical=True)
    for v in verdicts:
        i = index.get(v.node)
        if i is None or v.placement == "none":
            continue
        place.set(i, *_placement_label(v, cut))
        if not v.supported:
            rule = fixes.get(v.op)
            fix.set(i, f"{rule} fixes {v.op}" if rule else f"no rule fixes {v.op}",
                    RULE_COLOUR if rule else COLOURS[HOST])
    return [fix, place]  # the last one loaded colours the graph at first


# ----------------------------------------------------------------------------- files
def write_overlays(outdir: Path, models: dict[str, tuple[str, list[Overlay]]]) -> Path:
    """Write OUT/explorer/: one JSON file per overlay and ``explorer.json``, the manifest
    ``rewrite explore`` reads: ``{"models": [{"key", "model", "node_data": [...]}]}`` with paths
    relative to OUT. ``models``: key -> (model path relative to OUT, its overlays)."""
    d = outdir / EXPLORER_DIR
    d.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"models": []}
    for key, (model, overlays) in models.items():
        files = []
        for ov in (o for o in overlays if o.results):  # no rule applied: no rule overlay
            name = f"{key}.{ov.name}.json"
            atomic_write_text(d / name, json.dumps(ov.to_json(), indent=1) + "\n")
            files.append(f"{EXPLORER_DIR}/{name}")
        manifest["models"].append({"key": key, "model": model, "node_data": files})
    atomic_write_text(d / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return d / MANIFEST


def write_job_overlays(outdir: Path, job: Job, report: dict[str, Any]) -> Path:
    """The job's node data in OUT/explorer/: on the exported ``.tflite`` (an ``.onnx`` has no
    Model Explorer adapter: none), on the rewritten TF graph, written there as a GraphDef
    (``rewritten_graph.pb``, constants emptied: :func:`view_graph`), and on the rewritten
    SavedModel's graph (its rules). Returns the manifest."""
    models: dict[str, tuple[str, list[Overlay]]] = {}
    dep = job.attempt.deployment
    if (dep is not None and dep.exported.ok and dep.verdict is not None
            and dep.exported.path.suffix == ".tflite"):
        vela = dep.verdict.vela
        models["artifact"] = (dep.exported.path.name, artifact_overlays(
            dep.exported.path, dep.verdict.check.verdicts, report, vela.layers if vela else ()))
    graph = view_graph(job.attempt.rewrite.model.graph_def)
    d = outdir / EXPLORER_DIR
    d.mkdir(parents=True, exist_ok=True)
    (d / "rewritten_graph.pb").write_bytes(graph.SerializeToString())
    models["rewritten_graph"] = (f"{EXPLORER_DIR}/rewritten_graph.pb",
                                 [graph_rule_overlay(graph, report.get("rules_applied") or [])])
    pb = outdir / "saved_model" / "saved_model.pb"
    if job.attempt.saved_model is not None and pb.is_file():
        ov = saved_model_rule_overlay(pb, report.get("rules_applied") or [])
        if ov is not None:
            models["saved_model"] = ("saved_model/saved_model.pb", [ov])
    return write_overlays(outdir, models)


def check_artifact_overlays(path: str | Path, verdicts: Sequence[OpVerdict],
                            fixes: dict[str, str | None], cut: dict | None) -> list[Overlay]:
    """``rewrite check`` on a ``.tflite`` (the plain converter's file, or the one given): each
    op's placement and, for each unsupported op, the rule that fixes it."""
    graph = tflite_graph_ids(path)[0]
    fix = Overlay("fix", graph, categorical=True)
    for i, v in enumerate(verdicts):
        if not v.supported and v.placement != "none":
            rule = fixes.get(v.op)
            fix.set(i, f"{rule} fixes {v.op}" if rule else f"no rule fixes {v.op}",
                    RULE_COLOUR if rule else COLOURS[HOST])
    return [*([fix] if fix.results else []), placement_overlay(verdicts, graph, cut)]


def write_check_overlays(outdir: Path, graph_def: GraphDef | None,
                         graph: tuple[Sequence[OpVerdict], dict[str, str | None], dict | None],
                         artifact: tuple[Path, Sequence[OpVerdict], dict[str, str | None],
                                         dict | None] | None) -> Path:
    """``rewrite check -o OUT``: the original TF graph (as ``explorer/original_graph.pb``) with
    ``graph`` = (its predicted verdicts, TF op -> fixing rule, the cut), and the ``.tflite``
    the plain converter exports from it (copied to ``OUT/converted.tflite``) with ``artifact``
    = (its path, verdicts, target op -> fixing rule, the cut)."""
    import shutil

    models: dict[str, tuple[str, list[Overlay]]] = {}
    if artifact is not None and Path(artifact[0]).suffix == ".tflite":
        shutil.copyfile(artifact[0], outdir / "converted.tflite")
        models["converted"] = ("converted.tflite", check_artifact_overlays(
            outdir / "converted.tflite", artifact[1], artifact[2], artifact[3]))
    if graph_def is not None:
        view = view_graph(graph_def)
        d = outdir / EXPLORER_DIR
        d.mkdir(parents=True, exist_ok=True)
        (d / "original_graph.pb").write_bytes(view.SerializeToString())
        models["original_graph"] = (f"{EXPLORER_DIR}/original_graph.pb",
                                    graph_check_overlays(view, *graph))
    return write_overlays(outdir, models)


def explorer_summary(manifest: Path, out: str) -> dict[str, Any]:
    """``report.json``'s ``explorer``: the command that opens OUT in Model Explorer and the node
    data each model has there."""
    models = json.loads(manifest.read_text())["models"]
    import shlex

    return {"open": f"rewrite explore {shlex.quote(out)}", "needs": "pip install 'rewriter[explore]'",
            "manifest": f"{EXPLORER_DIR}/{MANIFEST}",
            "models": {m["model"]: [Path(f).name.split(".")[1] for f in m["node_data"]]
                       for m in models}}


def html_section(report: dict[str, Any]) -> str:
    """How to open the job in Model Explorer, for report.html."""
    from html import escape

    ex = report.get("explorer")
    if not ex:
        return ""
    items = "".join(f"<li><code>{escape(m)}</code>: {escape(', '.join(names))}</li>"
                    for m, names in ex["models"].items())
    return ("<h2>In Model Explorer</h2><p>See placement, rules and int8 error on every node: "
            f"<code>{escape(ex['open'])}</code> (needs <code>{escape(ex['needs'])}</code>; "
            "serves on 127.0.0.1 and prints the URL). Node data:</p>"
            f"<ul>{items}</ul>")


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
