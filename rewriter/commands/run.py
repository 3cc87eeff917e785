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
from typing import Any

from rewriter.commands._common import (
    RUN_OUTPUTS,
    add_model_arguments,
    add_pixel_arguments,
    load_from_args,
    onnx_opset,
    pixel_map,
    write_job_reports,
)
from rewriter.defaults import (
    CALIBRATION_CAP,
    DEFAULT_OPSET,
    INTEGER_MODES,
    QUANTIZE_MODES,
    RECOVER_EPOCHS,
    VERIFY_SAMPLES,
)
from rewriter.errors import UserError

HELP = "rewrite a model for a target, export it, and prove it (the main job)"


def converts(args: argparse.Namespace) -> bool:
    """The job converts (the CLI starts the converter worker before importing TensorFlow)."""
    return True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--target", "-t", required=True, help="target name (see `rewrite targets`)")
    parser.add_argument("-o", "--out", default="out", help="output directory (default: out)")
    parser.add_argument("--quantize", choices=QUANTIZE_MODES,
                        help="TFLite quantization (default: the target's, int8 for edgetpu, "
                        "ethos-u* and tflm); 16x8 = int16 activations, int8 weights, where the "
                        "target runs it (ethos-u*, tflm, tflite)")
    parser.add_argument("--opset", type=onnx_opset, help=f"ONNX opset for ONNX targets (default {DEFAULT_OPSET})")
    parser.add_argument("--exact-only", action="store_true",
                        help="refuse approximate rules (ops they would fix stay unsupported)")
    parser.add_argument("--calibration", metavar="DATA",
                        help="int8 calibration data: .npy, .npz (keyed by input) or image dir")
    parser.add_argument("--data", dest="verify_inputs", metavar="DATA",
                        help="verification inputs (default: the last quarter of the one set "
                        "given, at most --samples, held back from calibration; else seeded "
                        "synthetic inputs)")
    parser.add_argument("--input-range", action="append", default=[], metavar="[NAME:]LO,HI",
                        help="range of synthetic inputs when no data is given (default: what "
                        "the model's input Rescaling/Normalization layer or --pixel-range "
                        "implies, else -1,1)")
    parser.add_argument("--calibration-samples", type=int, default=None, metavar="N",
                        help="at most N samples calibrate int8 (default: every one given, up to "
                        f"{CALIBRATION_CAP}; the samples held back for verification excluded)")
    parser.add_argument("--samples", type=int, default=VERIFY_SAMPLES,
                        help=f"verification samples (default {VERIFY_SAMPLES})")
    parser.add_argument("--float-io", action="store_true",
                        help="keep float input/output in int8 models (default for int8 "
                        "accelerators: int8 I/O, so no QUANTIZE/DEQUANTIZE runs on the CPU)")
    parser.add_argument("--check-each-rule", action="store_true",
                        help="compare outputs after every applied rule; a mismatch names the "
                        "rule and the node")
    parser.add_argument("--no-vela", action="store_true", help="do not run Vela for Ethos-U")
    from rewriter.targets.vela import add_arguments as add_vela_arguments

    add_vela_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print report.json to stdout")
    add_pixel_arguments(parser)
    r = parser.add_argument_group("winning back accuracy")
    r.add_argument("--recover", action="store_true",
                   help="after export, fine-tune the rewritten graph's weights by distillation "
                        "from the original on the calibration inputs (int8 simulated in the "
                        "loop), export and verify again on held-back inputs")
    r.add_argument("--epochs", type=int, default=RECOVER_EPOCHS,
                   help=f"fine-tuning epochs of --recover (default {RECOVER_EPOCHS})")
    r.add_argument("--qat", action="store_true",
                   help="like --recover, with tensorflow-model-optimization's quantization-aware "
                        "training (tf_keras .h5 models only; otherwise --recover is used, and "
                        "the report says why)")
    r.add_argument("--seed", type=int, default=0,
                   help="seed of the fine-tuning's shuffling (default 0)")


def validate(args: argparse.Namespace) -> None:
    """Target name and paths, checked before TensorFlow is imported."""
    from rewriter.commands._common import validate_data_path, validate_model_path
    from rewriter.targets import load_target
    from rewriter.targets.vela import configure

    target = load_target(args.target, args.opset)
    configure(target, args.system_config, args.memory_mode)
    target.resolve_quantize(args.quantize)  # e.g. 16x8 where the target runs 8-bit only
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
    from rewriter.job.pipeline import JobOptions, run_job
    from rewriter.targets import load_target
    from rewriter.targets.vela import configure

    target = load_target(args.target, args.opset)
    configure(target, args.system_config, args.memory_mode)
    pixels = pixel_map(args)
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
        from rewriter.verify.data import parse_ranges

        options = JobOptions(input_ranges=parse_ranges(args.input_range, model.inputs),
                             pixels=pixels,
                             quantize=args.quantize, exact_only=args.exact_only,
                             calibration=args.calibration, inputs=args.verify_inputs,
                             samples=max(1, args.samples), run_vela=not args.no_vela,
                             calibration_samples=(max(1, args.calibration_samples)
                                                  if args.calibration_samples else None),
                             int8_io=False if args.float_io else None,
                             check_each_rule=args.check_each_rule, recover=args.recover,
                             qat=args.qat,
                             epochs=args.epochs, seed=args.seed)
        result = run_job(model, target, stage.path, options, progress=ui.step, bar=ui.bar)
        report, files = write_job_reports(stage, result)
    if ui.json_mode:
        ui.json(report)
    else:
        ui.out(("OK: " if result.exit_code == 0 else "NOT OK: ") + report["summary"])
        for key in ("artifact", "saved_model", "report.md", "report.html"):
            if key in files:
                ui.out(f"  {key}: {files[key]}")
        for w in report.get("warnings", []):
            ui.warn(w)
    return result.exit_code
