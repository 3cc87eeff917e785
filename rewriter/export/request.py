"""A model and its export options as a request directory for the converter worker, and back.

The exporters hand the converter to :mod:`rewriter.host.isolate` (a child process, or this process
when it is the supervised child of the ``rewrite`` command): the model travels
as ``model.pb`` (the frozen GraphDef) plus its signature and options in ``payload.json``;
calibration samples as ``calibration.npz``. The worker rebuilds the :class:`Model` and runs the
in-process converter on it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.export.result import ExportError
from rewriter.ir.model import Model, Source, TensorSpec


def model_request(model: Model, options: dict[str, Any],
                  samples: Sequence[dict[str, np.ndarray]] | None = None
                  ) -> tuple[dict[str, Any], dict[str, bytes]]:
    """``(payload, files)`` describing ``model``, ``options`` and calibration ``samples``."""
    payload = {"inputs": [s.to_json() for s in model.inputs],
               "outputs": [s.to_json() for s in model.outputs],
               "source": model.source.to_json(), "options": options,
               "samples": len(samples) if samples is not None else None}
    files = {"model.pb": model.graph_def.SerializeToString()}
    if samples is not None:
        arrays = {f"s{k}_i{j}": np.asarray(sample[spec.name])
                  for k, sample in enumerate(samples) for j, spec in enumerate(model.inputs)}
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        files["calibration.npz"] = buf.getvalue()
    return payload, files


def read_request(directory: Path) -> tuple[Model, dict[str, Any],
                                           list[dict[str, np.ndarray]] | None]:
    """The worker side: ``(model, options, samples)`` from a request directory."""
    from rewriter.ir.graph import GraphDef

    payload = json.loads((directory / "payload.json").read_text())
    graph_def = GraphDef()
    graph_def.ParseFromString((directory / "model.pb").read_bytes())

    def specs(items: list[dict[str, Any]]) -> list[TensorSpec]:
        return [TensorSpec(s["name"], s["tensor"], tuple(s["shape"]), s["dtype"]) for s in items]

    src = payload["source"]
    model = Model(graph_def, specs(payload["inputs"]), specs(payload["outputs"]),
                  Source(src["path"], src["format"], list(src["notes"])))
    samples = None
    if payload["samples"] is not None:
        with np.load(directory / "calibration.npz") as data:
            samples = [{spec.name: data[f"s{k}_i{j}"] for j, spec in enumerate(model.inputs)}
                       for k in range(payload["samples"])]
    return model, payload["options"], samples


def export_error_json(exc: ExportError) -> dict[str, Any]:
    return {"export_error": exc.to_json()}


def raise_export_error(result: dict[str, Any]) -> None:
    """Re-raise the worker's :class:`ExportError`, if it reported one."""
    err = result.get("export_error")
    if err is not None:
        raise ExportError(err["message"], format=err["format"], ops=err["ops"],
                          nodes=err["nodes"], detail=err["detail"],
                          refused=bool(err.get("refused")))
