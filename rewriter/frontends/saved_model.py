"""SavedModel front end: a signature (``serving_default`` or ``--signature``) frozen to a GraphDef.

The signature's inputs become the Model inputs (keyed by the signature's argument names) and its
structured outputs, in sorted key order, the Model outputs. Dynamic dimensions are fixed as in
every front end (batch -> 1, others by ``--input-shape``) and written into the Placeholders.
Before ``tf.saved_model.load`` runs anything (init ops, resource initialisers, the restore of a
TF1 SavedModel), every graph and function in ``saved_model.pb`` is scanned for ops that touch the
file system, the network or Python, and refused unless ``--unsafe``.
"""

from __future__ import annotations

from pathlib import Path

from rewriter.errors import UserError, first_line
from rewriter.frontends._common import (
    check_shape_overrides,
    freeze_concrete_function,
    set_placeholder_shapes,
    static_shape,
)
from rewriter.frontends.cut import apply_cut
from rewriter.frontends.options import LoadOptions
from rewriter.frontends.safety import keras_metadata_notes, refuse, saved_model_findings
from rewriter.frontends.sizes import check_saved_model
from rewriter.ir.model import Model, Source, TensorSpec


def load_saved_model(directory: str, options: LoadOptions) -> Model:
    import tensorflow as tf

    refuse(directory, saved_model_findings(directory), options.unsafe)
    _check_ops_known(directory)
    check_saved_model(directory)  # sizes before reads
    try:
        loaded = tf.saved_model.load(directory)
    except Exception as exc:
        first = first_line(exc)
        raise UserError(f"{directory}: cannot load SavedModel: {first[:200]}") from None
    signatures = dict(getattr(loaded, "signatures", {}) or {})
    if not signatures:
        raise UserError(f"{directory}: SavedModel has no signatures; re-save it with "
                        "`tf.saved_model.save(obj, dir, signatures=...)`")
    key = options.signature or "serving_default"
    if key not in signatures:
        avail = ", ".join(sorted(signatures))
        hint = "--signature NAME" if options.signature is None else "one of them"
        raise UserError(f"{directory}: SavedModel has no signature {key!r}; it has: {avail} "
                        f"(choose with {hint})")
    fn = signatures[key]
    notes = [f"signature {key!r}", *keras_metadata_notes(directory)]
    arg_specs = fn.structured_input_signature[1]
    names = sorted(arg_specs)
    check_shape_overrides(options, names)
    graph_def, frozen, norm_notes = freeze_concrete_function(fn)
    notes.extend(norm_notes)
    # frozen.inputs are the signature's placeholders, in the order of fn.inputs (by name).
    by_name = {t.name.split(":")[0]: t for t in frozen.inputs}
    tf1_names = _signature_input_tensors(directory, key)  # a TF1 key may differ from its node
    inputs = []
    for name in names:
        spec = arg_specs[name]
        tensor = by_name.get(spec.name or name)
        if tensor is None:
            tensor = by_name.get(name)
        if tensor is None and name in tf1_names:
            tensor = by_name.get(tf1_names[name].split(":")[0])
        if tensor is None:
            raise UserError(f"{directory}: cannot find the placeholder of signature input "
                            f"{name!r}")
        shape = static_shape(name, _dims(spec.shape), options, notes, spec.dtype)
        inputs.append(TensorSpec(name, tensor.name, shape, spec.dtype.name))
    set_placeholder_shapes(graph_def, inputs)
    out_struct = fn.structured_outputs
    out_names = sorted(out_struct) if isinstance(out_struct, dict) else [
        f"output_{i}" for i in range(len(frozen.outputs))]
    flat = tf.nest.flatten(out_struct)
    outputs = [TensorSpec(n, t.name, tuple(_dims(s.shape) or ()), s.dtype.name)
               for n, t, s in zip(out_names, frozen.outputs, flat)]
    model = Model(graph_def, inputs, outputs, Source(str(Path(directory)), "saved_model", notes))
    if not options.inputs:
        from rewriter.frontends.parsed_inputs import cut_after_parsing

        model = cut_after_parsing(model, options)
    return apply_cut(model, options)


def _check_ops_known(directory: str) -> None:
    """An op of a library that is not installed (tf.contrib, Addons) named before loading."""
    from rewriter.frontends.safety import read_saved_model
    from rewriter.frontends.tf1_graph import check_registered

    for meta_graph in read_saved_model(directory).meta_graphs:
        check_registered(meta_graph.graph_def, directory)


def _signature_input_tensors(directory: str, key: str) -> dict[str, str]:
    """Input key -> tensor name of signature ``key`` in a TF1 SavedModel's serving MetaGraph
    (``predict_signature_def({'images': x_ph})``: the key is not the placeholder's name)."""
    from rewriter.frontends.safety import read_saved_model

    for meta_graph in read_saved_model(directory).meta_graphs:
        if key in meta_graph.signature_def and "serve" in meta_graph.meta_info_def.tags:
            return {k: v.name for k, v in meta_graph.signature_def[key].inputs.items()}
    return {}


def _dims(shape) -> list[int | None] | None:
    if shape.rank is None:
        return None
    return [None if d is None else int(d) for d in shape.as_list()]
