"""Estimator-style exports: a serialized ``tf.Example`` input, parsed in the graph, becomes the
parsed features.

``Estimator.export_saved_model`` with a parsing serving input writes a signature whose input is
a string tensor of serialized ``tf.Example`` protos, read by ``ParseExample``/``ParseExampleV2``
into the features the model computes from. No edge target parses protos, and calibration and
verification data are arrays, not protos: the model is cut after the parse (each dense feature
the outputs read becomes an input named by its feature key, of its parsed shape), exactly (the
rest of the graph is unchanged), and a note says so. Sparse features cannot be cut this way;
the error names them and the ``--inputs`` to give instead.
"""

from __future__ import annotations

from dataclasses import replace

from rewriter.errors import UserError
from rewriter.frontends.options import LoadOptions
from rewriter.ir.graph import GraphIndex, const_to_array, parse_input
from rewriter.ir.model import Model

_PARSE_OPS = ("ParseExample", "ParseExampleV2", "ParseSingleExample")


def cut_after_parsing(model: Model, options: LoadOptions) -> Model:
    """``model`` starting at its parsed features when a string input is only parsed; else the
    model unchanged."""
    strings = {s.node for s in model.inputs if s.dtype in ("string", "object", "bytes_")}
    if not strings:
        return model
    g = GraphIndex(model.graph_def)
    parses = [n for n in g if n.op in _PARSE_OPS and n.input
              and _source(g, n.input[0]) in strings]
    if not parses:
        return model
    read = {r for n in g for r in (parse_input(x)[:2] for x in n.input if not x.startswith("^"))}
    aliases: dict[str, str] = {}
    for node in parses:
        keys, first_dense, sparse = _layout(g, node)
        for i, key in enumerate(keys):
            if (node.name, first_dense + i) in read:
                aliases[key] = f"{node.name}:{first_dense + i}"
        used_sparse = [k for i, k in enumerate(sparse)
                       if any((node.name, j * len(sparse) + i) in read for j in range(3))]
        if used_sparse:
            raise UserError(f"{model.source.path}: the model reads sparse tf.Example feature(s) "
                            f"{', '.join(used_sparse)}, which cannot become inputs of an edge "
                            "model; start it after them with --inputs NODE")
    if not aliases:
        return model
    from rewriter.frontends.cut import apply_cut

    cut = apply_cut(model, replace(options, inputs=sorted(aliases), outputs=None), aliases)
    cut.source.notes.append(
        "cut after tf.Example parsing: the serialized input "
        f"{', '.join(sorted(s.name for s in model.inputs if s.node in strings))} is parsed "
        "on the host; the model starts at the parsed feature(s) "
        + ", ".join(f"{s.name} {list(s.shape)} {s.dtype}" for s in cut.inputs))
    return cut


def _source(g: GraphIndex, ref: str) -> str | None:
    node = g.skip_identity(ref)
    return None if node is None else node.name


def _layout(g: GraphIndex, node) -> tuple[list[str], int, list[str]]:
    """Dense keys, the output index of the first dense value, sparse keys of a parse node."""
    if node.op == "ParseSingleExample":
        dense = [k.decode() for k in node.attr["dense_keys"].list.s]
        sparse = [k.decode() for k in node.attr["sparse_keys"].list.s]
        return dense, 3 * len(sparse), sparse
    if node.op == "ParseExampleV2":
        sparse = _strings(g, node.input[2])
        dense = _strings(g, node.input[3])
        return dense, 3 * len(sparse), sparse
    n_sparse = node.attr["Nsparse"].i
    n_dense = node.attr["Ndense"].i
    sparse = [_strings(g, r)[0] for r in node.input[2:2 + n_sparse]]
    dense = [_strings(g, r)[0] for r in node.input[2 + n_sparse:2 + n_sparse + n_dense]]
    return dense, 3 * n_sparse, sparse


def _strings(g: GraphIndex, ref: str) -> list[str]:
    node = g.skip_identity(ref)
    if node is None or node.op != "Const":
        raise UserError(f"the tf.Example parse reads its feature keys from {ref!r}, which is "
                        "not a constant; name the parsed features with --inputs")
    return [k.decode() if isinstance(k, bytes) else str(k)
            for k in const_to_array(node).reshape(-1)]
