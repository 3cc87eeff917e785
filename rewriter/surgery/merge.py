"""Put two models in one graph under namespaces, the first feeding the second (seed 002).

Seed 002 asks whether the output of one graph can be the input of another and whether both can
live in one graph "if you are careful with namespace", so gradients can flow through the whole
thing. :func:`merge_models` does it on the frozen form: every node of FIRST is renamed under
``first/``, every node of SECOND under ``second/``, and SECOND's connected input placeholders are
replaced by FIRST's output tensors. The result is one frozen :class:`~rewriter.ir.model.Model`;
``rewrite unfreeze`` on it gives one trainable SavedModel whose gradients reach both parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rewriter.errors import UserError
from rewriter.ir.graph import GraphDef, parse_input, tensor_ref
from rewriter.ir.model import Model, Source, TensorSpec


@dataclass(frozen=True)
class Connection:
    """FIRST's output (signature name) feeding SECOND's input (signature name)."""

    output: str
    input: str

    def to_json(self) -> dict[str, str]:
        return {"output": self.output, "input": self.input}


def parse_connections(specs: Sequence[str] | None) -> list[Connection]:
    """``OUTPUT=INPUT`` strings (signature names of FIRST's output and SECOND's input)."""
    out = []
    for spec in specs or []:
        left, sep, right = spec.partition("=")
        if not sep or not left or not right:
            raise UserError(f"--connect {spec!r} is not FIRST_OUTPUT=SECOND_INPUT")
        out.append(Connection(left, right))
    return out


def merge_models(first: Model, second: Model, connections: Sequence[Connection] = (),
                 names: tuple[str, str] = ("first", "second"), path: str = "merged") -> Model:
    """One frozen model computing ``second(first(x))`` (see the module docstring)."""
    if names[0] == names[1] or not all(names):
        raise UserError(f"namespaces must be two different non-empty names, got {names}")
    conns = list(connections) or _default_connections(first, second)
    outs = {o.name: o for o in first.outputs}
    ins = {i.name: i for i in second.inputs}
    feeds: dict[str, str] = {}  # second's input node -> first's (renamed) tensor
    for c in conns:
        if c.output not in outs:
            raise UserError(f"--connect: FIRST has no output {c.output!r} "
                            f"(outputs: {', '.join(outs)})")
        if c.input not in ins:
            raise UserError(f"--connect: SECOND has no input {c.input!r} "
                            f"(inputs: {', '.join(ins)})")
        _check_compatible(outs[c.output], ins[c.input])
        node, idx, _ = parse_input(outs[c.output].tensor)
        feeds[ins[c.input].node] = tensor_ref(f"{names[0]}/{node}", idx)
    graph = GraphDef()
    graph.versions.CopyFrom(first.graph_def.versions)
    _merge_library(graph, first.graph_def, second.graph_def)
    _copy_prefixed(graph, first.graph_def, names[0], {})
    _copy_prefixed(graph, second.graph_def, names[1], feeds)
    inputs = [_renamed(s, names[0]) for s in first.inputs]
    taken = {s.name for s in inputs}
    for s in second.inputs:
        if s.node not in feeds:
            spec = _renamed(s, names[1])
            if spec.name in taken:
                spec = TensorSpec(f"{names[1]}/{s.name}", spec.tensor, spec.shape, spec.dtype)
            inputs.append(spec)
    outputs = [_renamed(s, names[1]) for s in second.outputs]
    note = (f"merged {first.source.path} ({names[0]}/) feeding {second.source.path} "
            f"({names[1]}/)")
    return Model(graph, inputs, outputs, Source(path, "graphdef", [note]))


def merged_reference(first: Model, second: Model, merged: Model,
                     connections: Sequence[Connection], feeds: dict[str, Any]) -> dict[str, Any]:
    """``second(first(x))`` run as two separate graphs, keyed like ``merged``'s outputs."""
    conns = list(connections) or _default_connections(first, second)
    first_feeds = {s.name: feeds[s.name] for s in first.inputs}
    first_out = first.run(first_feeds)
    second_feeds: dict[str, Any] = {c.input: first_out[c.output] for c in conns}
    fed = {c.input for c in conns}
    rest = [s for s in second.inputs if s.name not in fed]
    merged_rest = merged.inputs[len(first.inputs):]
    for s, m in zip(rest, merged_rest, strict=True):
        second_feeds[s.name] = feeds[m.name]
    return second.run(second_feeds)


def _default_connections(first: Model, second: Model) -> list[Connection]:
    if len(first.outputs) != len(second.inputs):
        raise UserError(f"FIRST has {len(first.outputs)} outputs and SECOND {len(second.inputs)}"
                        " inputs; say which feeds which with --connect OUTPUT=INPUT")
    return [Connection(o.name, i.name) for o, i in zip(first.outputs, second.inputs, strict=True)]


def _check_compatible(out: TensorSpec, inp: TensorSpec) -> None:
    if out.dtype != inp.dtype:
        raise UserError(f"cannot feed {out.name} ({out.dtype}) into {inp.name} ({inp.dtype})")
    same_rank = len(out.shape) == len(inp.shape)
    if not same_rank or any(a is not None and b is not None and a != b
                            for a, b in zip(out.shape, inp.shape, strict=False)):
        raise UserError(f"cannot feed {out.name} of shape {list(out.shape)} into {inp.name} "
                        f"of shape {list(inp.shape)}")


def _copy_prefixed(graph: GraphDef, source: GraphDef, prefix: str, feeds: dict[str, str]
                   ) -> None:
    for node in source.node:
        if node.name in feeds:
            continue
        new = graph.node.add()
        new.CopyFrom(node)
        new.name = f"{prefix}/{node.name}"
        del new.input[:]
        for ref in node.input:
            name, idx, ctrl = parse_input(ref)
            if name in feeds:
                if ctrl:  # a control edge on a fed placeholder: depend on the feeding node
                    new.input.append("^" + parse_input(feeds[name])[0])
                else:
                    new.input.append(feeds[name])
                continue
            renamed = tensor_ref(f"{prefix}/{name}", idx)
            new.input.append("^" + renamed if ctrl else renamed)
        if "_class" in new.attr:  # colocation hints name nodes of the old graph
            del new.attr["_class"]


def _merge_library(graph: GraphDef, *sources: GraphDef) -> None:
    seen: dict[str, Any] = {}
    for src in sources:
        for fn in src.library.function:
            name = fn.signature.name
            if name in seen:
                if seen[name] != fn:
                    raise UserError(f"both models define a different function {name!r}; "
                                    "cannot merge their graphs")
                continue
            seen[name] = fn
            graph.library.function.add().CopyFrom(fn)
        for grad in src.library.gradient:
            graph.library.gradient.add().CopyFrom(grad)


def _renamed(spec: TensorSpec, prefix: str) -> TensorSpec:
    node, idx, _ = parse_input(spec.tensor)
    return TensorSpec(spec.name, f"{prefix}/{node}:{idx}", spec.shape, spec.dtype)


__all__ = ["Connection", "merge_models", "parse_connections"]
