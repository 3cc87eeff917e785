"""Variables of Keras files: a built model's variables, or the weights stored in ``.h5``/``.keras``.

A full model is built with Keras 3 (``compile=False``) after :mod:`rewriter.frontends.safety` has
found no code in it (or the user passed ``--unsafe``); otherwise, and for weights-only files, the
stored weights are read with h5py: legacy ``layer_names``/``weight_names`` layouts by their
weight names, Keras 3 ``.weights.h5`` slots as ``layer/vars/i`` (:func:`keras_weight_aliases`
translates those for a given model).
"""

from __future__ import annotations

import os
import zipfile
from typing import Any

import numpy as np

from rewriter.errors import UserError, first_line
from rewriter.surgery.variables import VariableSet, VarInfo


def load_keras_model(path: str, unsafe: bool = False) -> Any:
    """A Keras 3 model from ``.keras`` / ``.h5`` (compile=False); UserError when unreadable,
    :class:`~rewriter.frontends.safety.UnsafeModelError` when it holds code and not ``unsafe``."""
    import keras

    from rewriter.frontends.safety import keras_file_findings, refuse

    refuse(path, keras_file_findings(path, "keras" if zipfile.is_zipfile(path) else "h5"), unsafe)
    try:
        return keras.saving.load_model(path, compile=False, safe_mode=not unsafe)
    except Exception as exc:
        raise UserError(f"cannot load Keras model {path}: {first_line(exc)}") from None


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


def open_keras_model(path: str, unsafe: bool) -> VariableSet:
    _check_keras_zip(path)
    try:
        model = load_keras_model(path, unsafe)
    except UserError:  # custom layers not importable here, or code refused: read the weights
        return _open_keras_zip_weights(path)
    variables = keras_variables(model)
    infos = {n: var_info(n, v) for n, v in variables.items()}
    return VariableSet(path, "keras", infos, lambda n: np.asarray(variables[n].numpy()))


def _open_keras_zip_weights(path: str) -> VariableSet:
    """The ``model.weights.h5`` inside a ``.keras`` zip, named ``layer/vars/i``."""
    import tempfile

    from rewriter.frontends.sizes import check_zip

    with zipfile.ZipFile(path) as archive:
        check_zip(archive, path)  # sizes before reads (also when loading refused the file)
        if "model.weights.h5" not in archive.namelist():
            raise UserError(f"cannot load Keras model {path}: it holds no model.weights.h5")
        data = archive.read("model.weights.h5")
    fd, tmp = tempfile.mkstemp(suffix=".weights.h5")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    weights = open_h5_weights(tmp)
    values = {n: weights.read(n) for n in weights.infos}
    os.remove(tmp)
    return VariableSet(path, "keras-weights", weights.infos, values.__getitem__)


def _check_keras_zip(path: str) -> None:
    if not zipfile.is_zipfile(path):
        raise UserError(f"cannot load Keras model {path}: not a .keras (zip) file")


def h5_file(path: str) -> Any:
    import h5py

    from rewriter.frontends.sizes import check_h5

    try:
        f = h5py.File(path, "r")
    except Exception as exc:
        raise UserError(f"cannot read {path}: not an HDF5 file ({first_line(exc)})") from None
    try:
        check_h5(f, path)  # sizes before reads
    except UserError:
        f.close()
        raise
    return f


def open_h5(path: str, unsafe: bool) -> VariableSet:
    from rewriter.frontends.safety import UnsafeModelError

    with h5_file(path) as f:
        full_model = "model_config" in f.attrs
    if not full_model:
        return open_h5_weights(path)
    try:
        model = load_keras_model(path, unsafe)
    except UnsafeModelError:  # read the stored weights without building the model
        return open_h5_weights(path)
    variables = keras_variables(model)
    infos = {n: var_info(n, v) for n, v in variables.items()}
    return VariableSet(path, "h5", infos, lambda n: np.asarray(variables[n].numpy()))


def open_h5_weights(path: str) -> VariableSet:
    """Weights-only HDF5: legacy (``layer_names`` + ``weight_names``) or Keras 3 layout."""
    from rewriter.frontends.safety import H5_ERRORS

    try:
        with h5_file(path) as f:
            root = f["model_weights"] if "model_weights" in f else f
            if "layer_names" in root.attrs:
                datasets = _legacy_h5_datasets(root)
            else:
                datasets = _keras3_h5_datasets(f)
            infos = {n: VarInfo(n, np.dtype(f[k].dtype).name, tuple(f[k].shape))
                     for n, k in datasets.items()}
    except H5_ERRORS as exc:
        raise UserError(f"cannot read the weights in {path}: {first_line(exc)}; is the file "
                        "damaged?") from None

    def read(name: str) -> np.ndarray:
        with h5_file(path) as f:
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
