"""The main job's options, declared once.

:class:`JobOptions` is the library's form (typed fields with their defaults, what
:func:`rewriter.job.pipeline.run_job` takes). :data:`OPTIONS` declares each option of ``rewrite
run`` once: its flag, the field it sets, its type and help (defaults in the help are read from
:class:`JobOptions`). ``rewrite run``'s parser is built from it (:func:`add_run_arguments`), and
so is the parser ``rewrite batch`` checks each ``[[job]]`` of a manifest with
(:func:`run_parser`), so the CLI, the manifest and the API cannot drift apart.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from rewriter.defaults import (
    CALIBRATION_CAP,
    DATA_SAMPLES,
    DEFAULT_OPSET,
    QUANTIZE_MODES,
    RECOVER_EPOCHS,
    VERIFY_SAMPLES,
)
from rewriter.errors import UserError
from rewriter.frontends.options import add_model_arguments

if TYPE_CHECKING:  # pragma: no cover
    from rewriter.ir.model import Model

__all__ = ["OPTIONS", "JobOptions", "Option", "add_pixel_arguments", "add_run_arguments",
           "job_options", "onnx_opset", "run_parser"]


@dataclass
class JobOptions:
    """What the user asked for beyond model and target (the library API of the job)."""

    quantize: str | None = None  # None: the target's default
    opset: int | None = None
    exact_only: bool = False
    calibration: str | None = None  # .npy/.npz/image dir for int8 calibration
    inputs: str | None = None  # .npy/.npz/image dir for verification (default: calibration)
    samples: int | None = None  # verification samples (None: job_data's defaults)
    calibration_samples: int | None = None  # None: every sample given, up to CALIBRATION_CAP
    int8_io: bool | None = None  # None: int8 I/O when the target is an int8 accelerator
    input_ranges: dict[str, tuple[float, float]] = field(default_factory=dict)  # synthetic data
    pixels: Any = None  # verify.data.PixelMap for image directories (--pixel-range/--pixel-norm)
    run_vela: bool = True
    versus_plain: bool = False  # export the plain file too, for the report's latency comparison
    check_each_rule: bool = False  # compare outputs after every rule (names a breaking rule)
    divergence_samples: int = 2  # samples for the intermediate-tensor comparison
    accuracy: float | None = None  # --accuracy COS: search an int8/16x8 plan meeting it
    recover: bool = False  # fine-tune by distillation after export (rewriter.tune.recover)
    qat: bool = False  # tf_keras: TFMOT quantization-aware training instead (rewriter.tune.qat)
    epochs: int = RECOVER_EPOCHS
    seed: int = 0
    deploy: bool = False  # write OUT/deploy/, a TFLite Micro package (rewriter.export.micro)
    sram_kb: float | None = None  # budgets (KiB): exceeding one fails the job (exit 1)
    flash_kb: float | None = None
    min_top1: float | None = None  # int8 classifier outputs judged by top-1 agreement


def onnx_opset(text: str) -> int:
    """``--opset``: an integer in the range tf2onnx and ONNX Runtime support (exit 2 otherwise)."""
    from rewriter.export.onnx import OPSET_MAX, OPSET_MIN

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not OPSET_MIN <= value <= OPSET_MAX:
        raise argparse.ArgumentTypeError(f"{value} is outside the supported opsets "
                                         f"{OPSET_MIN}..{OPSET_MAX}")
    return value


IMAGES = "images (when data is a directory of images)"
RECOVER = "winning back accuracy"


@dataclass(frozen=True)
class Option:
    """One option of ``rewrite run``: its flag, the :class:`JobOptions` field it sets (None:
    an option of the command, not of the job), how (``flag``: a switch; ``append``:
    repeatable; ``value``: one value of ``type``), and its help, where ``{default}`` is the
    field's default."""

    flag: str
    field: str | None
    help: str
    kind: str = "value"  # "value" | "flag" | "append"
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    short: str | None = None  # e.g. "-t"; ``short_first`` lists it first ("-o, --out")
    short_first: bool = False
    dest: str | None = None
    group: str | None = None
    required: bool = False
    default: Any = None

    @property
    def name(self) -> str:
        """The argparse destination (and the manifest key, ``-`` or ``_`` alike)."""
        return self.dest or self.flag.lstrip("-").replace("-", "_")

    def field_default(self) -> Any:
        if self.field is None:
            return self.default
        f = next(f for f in fields(JobOptions) if f.name == self.field)
        return f.default


OPTIONS: tuple[Option, ...] = (
    Option("--target", None, "target name (see `rewrite targets`)", short="-t", required=True),
    Option("--out", None, "output directory (default: out)", short="-o", short_first=True,
           default="out"),
    Option("--quantize", "quantize", "TFLite quantization (default: the target's, int8 for "
           "edgetpu, ethos-u* and tflm); 16x8 = int16 activations, int8 weights, where the "
           "target runs it (ethos-u*, tflm, tflite)", choices=QUANTIZE_MODES),
    Option("--opset", "opset", f"ONNX opset for ONNX targets (default {DEFAULT_OPSET})",
           type=onnx_opset),
    Option("--exact-only", "exact_only",
           "refuse approximate rules (ops they would fix stay unsupported)", kind="flag"),
    Option("--calibration", "calibration",
           "int8 calibration data: .npy, .npz (keyed by input) or image dir", metavar="DATA"),
    Option("--data", "inputs", "verification inputs (default: the last quarter of the one set "
           "given, at most --samples, held back from calibration; else seeded synthetic "
           "inputs)", metavar="DATA", dest="verify_inputs"),
    Option("--input-range", "input_ranges", "range of synthetic inputs when no data is given "
           "(default: what the model's input Rescaling/Normalization layer or --pixel-range "
           "implies, else -1,1)", kind="append", metavar="[NAME:]LO,HI"),
    Option("--calibration-samples", "calibration_samples", "at most N samples calibrate int8 "
           f"(default: every one given, up to {CALIBRATION_CAP}; the samples held back for "
           "verification excluded)", type=int, metavar="N"),
    Option("--samples", "samples", f"verification samples (default: every sample of --data up "
           f"to {DATA_SAMPLES}; else {VERIFY_SAMPLES} held back or synthetic)", type=int,
           metavar="N"),
    Option("--min-top1", "min_top1", "int8: judge classifier outputs (one row of classes per "
           "sample) by top-1 agreement with the original >= F on the verification data, "
           "instead of cosine >= 0.99 (default: cosine)", type=float, metavar="F"),
    Option("--float-io", "int8_io", "keep float input/output in int8 models (default for int8 "
           "accelerators: int8 I/O, so no QUANTIZE/DEQUANTIZE runs on the CPU)", kind="flag"),
    Option("--check-each-rule", "check_each_rule", "compare outputs after every applied rule; "
           "a mismatch names the rule and the node", kind="flag"),
    Option("--no-vela", "run_vela", "do not run Vela for Ethos-U", kind="flag"),
    Option("--versus-plain", "versus_plain", "Ethos-U, Edge TPU: also export the original "
           "model with the plain converter and put its estimated latency beside the artifact's "
           "(report versus_plain; one more export and Vela run; rewrite check always shows it)",
           kind="flag"),
    Option("--deploy", "deploy", "tflm and ethos-u* targets: write OUT/deploy/, a TFLite "
           "Micro package (the model as a C array, its op resolver, the arena size measured "
           "in TFLite Micro)", kind="flag"),
    Option("--sram", "sram_kb", "tflm, ethos-u*: SRAM budget in KiB; a tensor arena "
           "(kTensorArenaSize, margin included) above it fails the job (exit 1)",
           type=float, metavar="KB"),
    Option("--flash", "flash_kb", "tflm, ethos-u*: flash budget in KiB; a model file (Vela's "
           "for Ethos-U) above it fails the job (exit 1)", type=float, metavar="KB"),
    Option("--json", None, "print report.json to stdout", kind="flag"),
    Option("--pixel-range", "pixels", "map pixels 0..255 linearly to LO..HI, the range the "
           "model was trained on (e.g. 0,1 or -1,1); not needed when the model has a Rescaling "
           "or Normalization layer at its input (it takes raw pixels)", metavar="LO,HI",
           group=IMAGES),
    Option("--pixel-norm", "pixels", "map pixels p to (p - MEAN) / STD, one value or one per "
           "channel in RGB order, pixel units (e.g. 123.7,116.3,103.5/58.4,57.1,57.4)",
           metavar="MEAN/STD", group=IMAGES),
    Option("--recover", "recover", "after export, fine-tune the rewritten graph's weights by "
           "distillation from the original on the calibration inputs (int8 simulated in the "
           "loop), export and verify again on held-back inputs", kind="flag", group=RECOVER),
    Option("--accuracy", "accuracy", "accuracy target per output on the verification data: "
           "cosine for float outputs, index agreement (share of equal indices) for integer ones "
           "(arg-max); when the int8 file misses it, the layers adding the most int8 error are "
           "promoted to 16x8 (where the target has the kernel) until it is met, measured in the "
           "target's runtime; exit 1 with the best plan when no plan reaches it. With --quantize "
           "16x8: when the layer adding the most error has an approximate rule built from ops the "
           "target runs in 16x8, that rule is tried on purpose and kept only when it meets it",
           type=float, metavar="COS", group=RECOVER),
    Option("--epochs", "epochs", "fine-tuning epochs of --recover (default {default})",
           type=int, group=RECOVER),
    Option("--qat", "qat", "like --recover, with tensorflow-model-optimization's "
           "quantization-aware training (tf_keras .h5 models only; otherwise --recover is "
           "used, and the report says why)", kind="flag", group=RECOVER),
    Option("--seed", "seed", "seed of the fine-tuning's shuffling (default {default})",
           type=int, group=RECOVER),
)


def _add(target: Any, opt: Option) -> None:
    flags = [opt.flag] if opt.short is None else (
        [opt.short, opt.flag] if opt.short_first else [opt.flag, opt.short])
    kw: dict[str, Any] = {"help": opt.help.format(default=opt.field_default())}
    if opt.dest:
        kw["dest"] = opt.dest
    if opt.kind == "flag":
        kw["action"] = "store_true"
    else:
        if opt.kind == "append":
            kw.update(action="append", default=[])
        else:
            kw["default"] = opt.field_default()
        for key in ("type", "choices", "metavar"):
            if getattr(opt, key) is not None:
                kw[key] = getattr(opt, key)
        if opt.required:
            kw["required"] = True
    target.add_argument(*flags, **kw)


def add_pixel_arguments(parser: argparse.ArgumentParser) -> None:
    """How images in a data directory become input values (:mod:`rewriter.verify.data`): the
    job's image options, for commands that read data too (``rewrite verify``)."""
    group = parser.add_argument_group(IMAGES)
    for opt in OPTIONS:
        if opt.group == IMAGES:
            _add(group, opt)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """``rewrite run``'s arguments: the model and its loading options, then :data:`OPTIONS`."""
    from rewriter.targets.vela import add_arguments as add_vela_arguments

    add_model_arguments(parser)
    groups: dict[str, Any] = {}
    for opt in OPTIONS:
        if opt.group is None:
            _add(parser, opt)
            if opt.flag == "--no-vela":  # the Vela options of the target (shared with check)
                add_vela_arguments(parser)
        else:
            if opt.group not in groups:
                groups[opt.group] = parser.add_argument_group(opt.group)
            _add(groups[opt.group], opt)


class _JobParser(argparse.ArgumentParser):
    """The main job's parser, raising instead of exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(message)


def run_parser() -> argparse.ArgumentParser:
    """``rewrite run``'s own argument parser, raising :class:`UserError` (what a manifest's
    every job is checked with)."""
    parser = _JobParser(prog="rewrite run", add_help=False)
    parser.add_argument("-q", "--quiet", action="store_true")
    add_run_arguments(parser)
    return parser


def job_options(args: argparse.Namespace, model: Model) -> JobOptions:
    """The :class:`JobOptions` of parsed ``rewrite run`` arguments (input ranges need the
    model's inputs; pixel options become one pixel map)."""
    from rewriter.verify.data import parse_ranges, pixel_map_from_args

    return JobOptions(
        quantize=args.quantize, opset=args.opset, exact_only=args.exact_only,
        calibration=args.calibration, inputs=args.verify_inputs,
        samples=max(1, args.samples) if args.samples is not None else None,
        calibration_samples=(max(1, args.calibration_samples) if args.calibration_samples
                             else None),
        int8_io=False if args.float_io else None,
        input_ranges=parse_ranges(args.input_range, model.inputs),
        pixels=pixel_map_from_args(args.pixel_range, args.pixel_norm),
        run_vela=not args.no_vela, versus_plain=args.versus_plain,
        check_each_rule=args.check_each_rule, accuracy=args.accuracy,
        recover=args.recover, qat=args.qat, epochs=args.epochs, seed=args.seed,
        deploy=args.deploy, sram_kb=args.sram, flash_kb=args.flash, min_top1=args.min_top1)
