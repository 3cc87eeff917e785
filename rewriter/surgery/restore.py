"""Restore a checkpoint's weights into a modified model: match by name, copy exactly, report.

The seeds' problem (``NotFoundError: Key ... not found in checkpoint`` after the graph gained,
lost or renamed variables) done as one call: :func:`restore` matches SOURCE variables to TARGET
variables by name after ``--map`` rules, copies those with equal shape and dtype bit for bit,
leaves every other target variable at the target's own value (its initializer, or its own
checkpoint when one sits next to the ``.meta``), and writes the directory OUT in the target's
format, with nothing beside it:

* TF1 ``.meta`` graph -> ``OUT/model.ckpt.index``, ``OUT/model.ckpt.data-*``, a copy of the graph
  as ``OUT/model.ckpt.meta`` and ``OUT/checkpoint``, loadable with ``import_meta_graph`` +
  ``Saver.restore`` or ``tf.train.latest_checkpoint(OUT)``.
* Keras ``.keras`` / ``.h5`` -> ``OUT/model.keras`` (or ``OUT/model.h5``).
* SavedModel -> OUT is a copy of the SavedModel whose ``variables/`` bundle holds the new values.

When nothing restores (no source variable matches a target variable) nothing is written unless
``allow_empty``. Restored values are read back from the written files and compared byte for
byte. (The ``restore`` command stages OUT and swaps it in; see :mod:`rewriter.host.fs`.)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.errors import UserError, first_line
from rewriter.host.fs import apply_umask, atomic_write_text, file_mode
from rewriter.surgery.checkpoints import (
    _checkpoint_prefix,
    _open_reader,
    detect_format,
    import_meta_graph,
    meta_graph_variables,
    open_variables,
)
from rewriter.surgery.keras_weights import (
    keras_variables,
    keras_weight_aliases,
    load_keras_model,
    var_info,
)
from rewriter.surgery.variables import Diff, NameMap, VariableSet, diff_variables

TARGET_KINDS = ("tf1", "keras", "saved_model")


@dataclass
class RestoreResult:
    """What :func:`restore` did: the name-level diff, where it wrote, what it checked."""

    source: str
    target: str
    output: str
    target_kind: str          # tf1 | keras | saved_model
    diff: Diff
    written: bool = False
    verified: int = 0         # restored values read back from OUT and found identical
    files: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.diff.complete

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "output": self.output,
                "target_kind": self.target_kind, "written": self.written,
                "complete": self.complete, "verified": self.verified,
                "files": list(self.files), **self.diff.to_json()}


# ----------------------------------------------------------------------------- entry point
def plan_restore(source: str, target: str, maps: Iterable[str] | None = None,
                 unsafe: bool = False) -> tuple[VariableSet, Diff, str, Any]:
    """Read both sides and match them; returns (source vars, diff, target kind, target handle).

    A target with code in it (a Keras Lambda; initialisers that touch files or run Python) is
    refused unless ``unsafe``: restoring builds and initialises it."""
    src = open_variables(source, unsafe)
    kind, handle = _open_target(target, unsafe)
    name_map = NameMap.parse(maps)
    aliases: dict[str, str] = {}
    if kind == "keras":
        target_infos = {n: var_info(n, v) for n, v in keras_variables(handle).items()}
        if src.format == "keras-weights":
            aliases = keras_weight_aliases(handle)
    elif kind == "tf1":
        target_infos = meta_graph_variables(handle[0])
    else:
        target_infos = handle.infos
    return src, diff_variables(src.infos, target_infos, name_map, aliases), kind, handle


def restore(source: str, target: str, output: str, maps: Iterable[str] | None = None,
            strict: bool = False, unsafe: bool = False, allow_empty: bool = False
            ) -> RestoreResult:
    """Copy SOURCE's variables into TARGET by name and write the result into the directory
    ``output``.

    Nothing is written (``written`` stays False) with ``strict`` unless every target variable
    is restored, or when no variable restores at all unless ``allow_empty``.
    """
    _check_output(output)
    src, diff, kind, handle = plan_restore(source, target, maps, unsafe)
    output = _resolve_output(output, kind, target)
    result = RestoreResult(source, target, output, kind, diff)
    if (strict and not diff.complete) or (not diff.restored and not allow_empty):
        return result
    values = {p.target: src.read(p.source) for p in diff.restored}
    if kind == "tf1":
        result.files = _write_tf1(handle[0], handle[1], values, output)
        written = _read_bundle(output, list(values))
    else:
        if kind == "keras":
            result.files = _write_keras(handle, values, output)
        else:
            result.files = _write_saved_model(handle, values, output)
        written_set = open_variables(output)
        written = {n: written_set.read(n) for n in values}
    result.written = True
    result.verified = _verify(values, written)
    return result


def _verify(expected: dict[str, np.ndarray], written: dict[str, np.ndarray]) -> int:
    for name, value in expected.items():
        got = written.get(name)
        if got is None or got.dtype != value.dtype or got.shape != value.shape or \
                np.ascontiguousarray(got).tobytes() != np.ascontiguousarray(value).tobytes():
            raise RuntimeError(f"restored variable {name!r} does not read back identical")
    return len(expected)


# ----------------------------------------------------------------------------- targets
def _open_target(target: str, unsafe: bool) -> tuple[str, Any]:
    fmt = detect_format(target)
    if fmt == "meta":
        prefix = target[: -len(".meta")]
        own = prefix if os.path.exists(prefix + ".index") else None
        _check_initialisers(target, unsafe)
        return "tf1", (target, own)
    if fmt == "checkpoint":
        prefix = _checkpoint_prefix(target) or target
        if os.path.exists(prefix + ".meta"):
            _check_initialisers(prefix + ".meta", unsafe)
            return "tf1", (prefix + ".meta", prefix)
        raise UserError(f"{target}: a checkpoint without its .meta graph cannot be a restore "
                        "target; give the modified model (.meta, .keras/.h5 or SavedModel)")
    if fmt in ("keras", "h5"):
        return "keras", load_keras_model(target, unsafe)
    if fmt == "saved_model":
        return "saved_model", _open_saved_model_target(target)
    raise UserError(f"{target}: a weights-only file cannot be a restore target; give the "
                    "modified model (.meta, .keras/.h5 or SavedModel)")


def _check_initialisers(meta: str, unsafe: bool) -> None:
    """Refuse a ``.meta`` whose variable initialisers (run to write the checkpoint) touch the
    file system, the network or Python."""
    from tensorflow.core.framework import variable_pb2

    from rewriter.frontends.checkpoint import read_meta_graph
    from rewriter.frontends.safety import collection_protos, meta_graph_findings, refuse

    meta_def = read_meta_graph(meta)
    fetches = [name for var in collection_protos(meta_def, "variables", variable_pb2.VariableDef)
               for name in (var.initializer_name, var.snapshot_name)]
    refuse(meta, meta_graph_findings(meta_def, fetches=[f for f in fetches if f]), unsafe)


def _open_saved_model_target(path: str) -> VariableSet:
    prefix = os.path.join(path, "variables", "variables")
    if not os.path.exists(prefix + ".index"):
        raise UserError(f"{path}: SavedModel has no variables to restore into")
    return open_variables(path)


def _check_output(output: str) -> None:
    if not output:
        raise UserError("give the output directory with -o")
    if os.path.exists(output) and not os.path.isdir(output):
        raise UserError(f"-o {output} is an existing file; give a directory with -o")


def _resolve_output(output: str, kind: str, target: str) -> str:
    """The path written inside the output directory: a checkpoint prefix, a Keras file, or the
    directory itself for a SavedModel."""
    if kind == "tf1":
        return os.path.join(output, "model.ckpt")
    if kind == "keras":
        suffix = ".h5" if target.lower().endswith((".h5", ".hdf5")) else ".keras"
        return os.path.join(output, "model" + suffix)
    return output


# ----------------------------------------------------------------------------- TF1
def _write_tf1(meta_path: str, own_prefix: str | None, values: dict[str, np.ndarray],
               output: str) -> list[str]:
    """Initialise the graph, load the target's own values, then the restored ones; save."""
    import tensorflow as tf

    out_dir = os.path.dirname(os.path.abspath(output))
    os.makedirs(out_dir, exist_ok=True)
    graph = tf.Graph()
    with graph.as_default():
        import_meta_graph(meta_path)
        variables = {v.op.name: v for v in tf.compat.v1.global_variables()}
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            if own_prefix:
                _load_own(sess, variables, own_prefix)
            for name, value in values.items():
                _set_value(sess, variables[name], value)
            saver = tf.compat.v1.train.Saver(var_list=variables, write_version=2)
            tmp = tempfile.mkdtemp(prefix=".restore-", dir=out_dir)
            try:
                saver.save(sess, os.path.join(tmp, "ckpt"), write_meta_graph=False,
                           write_state=False)
                files = _move_bundle(os.path.join(tmp, "ckpt"), os.path.abspath(output))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    meta_out = os.path.abspath(output) + ".meta"
    if os.path.abspath(meta_path) != meta_out:
        shutil.copyfile(meta_path, meta_out)
    _write_state_file(out_dir, os.path.basename(output))
    return [*files, meta_out]


def _write_state_file(folder: str, prefix_name: str) -> None:
    """The ``checkpoint`` file that ``tf.train.latest_checkpoint(folder)`` reads."""
    text = (f'model_checkpoint_path: "{prefix_name}"\n'
            f'all_model_checkpoint_paths: "{prefix_name}"\n')
    atomic_write_text(os.path.join(folder, "checkpoint"), text)


def _set_value(sess: Any, variable: Any, value: np.ndarray) -> None:
    """Assign exactly ``value`` by feeding the variable's initial-value input."""
    init = variable.initializer
    sess.run(init, feed_dict={init.inputs[1]: value})


def _load_own(sess: Any, variables: dict[str, Any], prefix: str) -> None:
    reader = _open_reader(prefix, prefix)
    shapes = reader.get_variable_to_shape_map()
    for name, var in variables.items():
        if name in shapes and tuple(shapes[name]) == tuple(var.shape):
            _set_value(sess, var, reader.get_tensor(name))


def _move_bundle(tmp_prefix: str, prefix: str) -> list[str]:
    moved = []
    base = os.path.basename(tmp_prefix)
    folder = os.path.dirname(tmp_prefix)
    for name in sorted(os.listdir(folder)):
        if name.startswith(base + "."):
            dest = prefix + name[len(base):]
            os.replace(os.path.join(folder, name), dest)
            moved.append(dest)
    return moved


def _read_bundle(prefix: str, names: list[str]) -> dict[str, np.ndarray]:
    reader = _open_reader(prefix, prefix)
    return {n: np.asarray(reader.get_tensor(n)) for n in names}


# ----------------------------------------------------------------------------- Keras
def _write_keras(model: Any, values: dict[str, np.ndarray], output: str) -> list[str]:
    suffix = Path(output).suffix.lower()
    variables = keras_variables(model)
    for name, value in values.items():
        variables[name].assign(value)
    out = os.path.abspath(output)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".restore-", suffix=suffix, dir=os.path.dirname(out))
    os.close(fd)
    try:
        model.save(tmp)
        os.chmod(tmp, file_mode())  # Keras rewrote the mkstemp file, which is 0600
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return [out]


# ----------------------------------------------------------------------------- SavedModel
def _write_saved_model(target: VariableSet, values: dict[str, np.ndarray],
                       output: str) -> list[str]:
    """Copy the SavedModel and rewrite its variables bundle with the same keys."""
    out = os.path.abspath(output)
    if os.path.isdir(out) and os.listdir(out) and not os.path.exists(
            os.path.join(out, "saved_model.pb")):
        raise UserError(f"output directory {output!r} exists and is not a SavedModel; "
                        "choose a new path")
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".restore-", dir=parent)
    staged = os.path.join(tmp, "sm")
    try:
        shutil.copytree(target.path, staged, copy_function=shutil.copyfile)
        apply_umask(staged)
        _rewrite_bundle(target, values, os.path.join(staged, "variables"))
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.replace(staged, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [out]


def _rewrite_bundle(target: VariableSet, values: dict[str, np.ndarray], var_dir: str) -> None:
    import tensorflow as tf

    prefix = os.path.join(os.path.abspath(target.path), "variables", "variables")
    reader = _open_reader(prefix, target.path)
    by_key = {k: values[name] for name, ks in target.keys.items() if name in values for k in ks}
    keys = sorted(reader.get_variable_to_shape_map())
    tensors = []
    for key in keys:
        value = by_key[key] if key in by_key else reader.get_tensor(key)
        tensors.append(tf.constant(value))
    for name in os.listdir(var_dir):
        if name.startswith("variables."):
            os.remove(os.path.join(var_dir, name))
    try:
        tf.raw_ops.SaveV2(prefix=os.path.join(var_dir, "variables"), tensor_names=keys,
                          shape_and_slices=[""] * len(keys), tensors=tensors)
    except tf.errors.OpError as exc:
        raise UserError(f"cannot write {var_dir}: {first_line(exc)}") from None


__all__ = ["RestoreResult", "plan_restore", "restore"]
