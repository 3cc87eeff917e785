"""Arguments and helpers shared by commands: how a model is named and loaded, output dirs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rewriter.errors import UserError
from rewriter.frontends import detect_format, load_model
from rewriter.frontends.options import load_options
from rewriter.ir.model import Model


def pixel_map(args: argparse.Namespace) -> object | None:
    from rewriter.verify.data import pixel_map_from_args

    return pixel_map_from_args(getattr(args, "pixel_range", None),
                               getattr(args, "pixel_norm", None))


def validate_model_path(path: str, artifact_ok: bool = False) -> None:
    """Refuse a model path that cannot be loaded, before TensorFlow is imported (a typo is
    reported at once); ``artifact_ok`` accepts a ``.tflite``/``.onnx`` file too."""
    if artifact_ok and Path(path).suffix in (".tflite", ".onnx"):
        if not Path(path).is_file():
            raise UserError(f"{path}: no such file")
        return
    fmt = detect_format(path)
    if fmt in ("keras", "h5"):  # sizes before reads, before TensorFlow takes its memory
        from rewriter.frontends.sizes import check_file

        check_file(path, fmt)


def validate_data_path(path: str | None, option: str) -> None:
    """Refuse a data file or directory (``--calibration``, ``--data``) that does not exist."""
    if path is not None and not Path(path).exists():
        raise UserError(f"{option} {path}: no such file or directory")


def load_from_args(args: argparse.Namespace, attr: str = "model") -> Model:
    return load_model(getattr(args, attr), load_options(args))


#: What the main job writes into OUT (an existing OUT holding only these may be replaced).
RUN_OUTPUTS = ("model.tflite", "model.onnx", "saved_model", "report.json", "report.md",
               "report.html", "*_vela.tflite", "*.csv", "deploy", "explorer")


def write_job_reports(stage: Any, result: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Build a finished job's report from its typed results, with OUT's paths instead of the
    staging directory's, and write it once: ``report.json``, ``report.md``, ``report.html``,
    and Model Explorer's node data in ``explorer/`` (:mod:`rewriter.report.explorer`). Returns
    the report and the job's files (artifact, SavedModel, reports) as OUT's paths."""
    from rewriter.report.build import build_report, write_reports
    from rewriter.report.explorer import explorer_summary, write_job_overlays
    from rewriter.report.html import write_html

    report = stage.relocate(build_report(result.job))
    files = dict(stage.relocate(result.files))
    manifest = write_job_overlays(stage.path, result.job, report)
    files["explorer"] = stage.relocate(str(manifest))
    report["explorer"] = explorer_summary(manifest, stage.shown)
    files.update({p.name: stage.relocate(str(p)) for p in write_reports(stage.path, report)})
    files["report.html"] = stage.relocate(str(write_html(stage.path, report)))
    return report, files
