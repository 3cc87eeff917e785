"""``rewrite MODEL --target T -o OUT``: the whole job (see :mod:`rewriter.job.pipeline`).

Exit 0 when the exported artifact has no op the target lacks and its outputs match the original
within tolerance; 1 otherwise (``report.md`` says which and by how much); 2 for bad usage/input.
OUT holds ``model.tflite`` or ``model.onnx``, the rewritten float model as ``saved_model/``,
``report.json`` and ``report.md`` (and Vela's ``*_vela.tflite`` and summary CSV for Ethos-U).
The run is staged next to OUT and swapped in when it ends (:func:`rewriter.host.fs.
staged_output`): OUT holds this run or the previous one, never a mix, and a failed run leaves it
as it was.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rewriter.commands._common import (
    RUN_OUTPUTS,
    load_from_args,
    pixel_map,
    write_job_reports,
)
from rewriter.defaults import (
    INTEGER_MODES,
)
from rewriter.errors import UserError

HELP = "rewrite a model for a target, export it, and prove it (the main job)"


def converts(args: argparse.Namespace) -> bool:
    """The job converts (the CLI starts the converter worker before importing TensorFlow)."""
    return True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The job's options, declared once in :mod:`rewriter.job.options`."""
    from rewriter.job.options import add_run_arguments

    add_run_arguments(parser)


def validate(args: argparse.Namespace) -> None:
    """Target name and paths, checked before TensorFlow is imported."""
    from rewriter.commands._common import validate_data_path, validate_model_path
    from rewriter.targets import load_target
    from rewriter.targets.vela import configure_from_args

    target = load_target(args.target, args.opset)
    configure_from_args(target, args)
    target.resolve_quantize(args.quantize)  # e.g. 16x8 where the target runs 8-bit only
    for flag, value in (("--deploy", args.deploy), ("--sram", args.sram),
                        ("--flash", args.flash)):
        if value is not None and value is not False:
            from rewriter.export.micro import refuse_unless_deployable

            refuse_unless_deployable(target.name, flag)
            if flag != "--deploy" and not value > 0:
                raise UserError(f"{flag} must be a positive number of KiB (got {value:g})")
            if args.no_vela and target.name.startswith("ethos-u"):
                raise UserError(f"{flag} for Ethos-U measures the Vela-compiled file: drop "
                                "--no-vela")
    if target.runtime == "tflm":
        from rewriter.verify.tflm import MISSING, tflm_available

        if not tflm_available():
            raise UserError(f"the {target.name} target proves the artifact in TFLite Micro: "
                            f"{MISSING}")
    validate_model_path(args.model)
    validate_data_path(args.calibration, "--calibration")
    validate_data_path(args.verify_inputs, "--data")


def run(args: argparse.Namespace, ui: Any) -> int:
    from rewriter.export.validate import check_weights
    from rewriter.host import isolate
    from rewriter.host.fs import staged_output
    from rewriter.job.options import job_options
    from rewriter.job.pipeline import run_job
    from rewriter.targets import load_target
    from rewriter.targets.vela import configure_from_args

    target = load_target(args.target, args.opset)
    configure_from_args(target, args)
    pixel_map(args)  # bad pixel options stop the run before the model loads
    if args.epochs < 1:
        raise UserError("--epochs must be at least 1")
    inputs = [args.model, args.calibration, args.verify_inputs]
    with staged_output(args.out, inputs, RUN_OUTPUTS, "run") as stage:
        isolate.prestart()  # the converter's process imports TensorFlow while we load
        with ui.step(f"loading {args.model}"):
            model = load_from_args(args)
        from rewriter.frontends import assumptions

        for note in assumptions(model):
            ui.info(f"note: {note}")
        if target.resolve_quantize(args.quantize) in INTEGER_MODES:
            check_weights(model, masks_fixed=True)  # before the job, not at the quantizer
        options = job_options(args, model)
        result = run_job(model, target, stage.path, options, progress=ui.step, bar=ui.bar)
        report, files = write_job_reports(stage, result)
    for line in (report.get("memory") or {}).get("over_budget_lines") or []:
        print(f"over budget: {line}", file=sys.stderr)  # also with --json and -q: the verdict
    if ui.json_mode:
        ui.json(report)
    else:
        ui.out(("OK: " if result.exit_code == 0 else "NOT OK: ") + report["summary"])
        if "memory" in report:
            mem = report["memory"]
            ui.out(f"  memory: model {mem['flash']['bytes']} bytes, arena "
                   f"{mem['sram']['bytes']} bytes" + (f" ({mem['deploy']})" if "deploy" in mem
                                                       else ""))
        for key in ("artifact", "saved_model", "report.md", "report.html"):
            if key in files:
                ui.out(f"  {key}: {files[key]}")
        for w in report.get("warnings", []):
            ui.warn(w)
    return result.exit_code
