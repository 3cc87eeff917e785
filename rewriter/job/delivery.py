"""A graph delivered: what every attempt of the job shares (:class:`JobContext`), and the one
path from a rewritten graph to a proven file (:func:`deliver`: SavedModel, export, the target's
verdict, the file run in its runtime against the original, int8 error per layer), used by the
first attempt (:mod:`rewriter.job.pipeline`) and by ``--recover``'s candidate
(:mod:`rewriter.job.recovery`) alike."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.defaults import INTEGER_MODES
from rewriter.ir.model import Model
from rewriter.job.options import JobOptions
from rewriter.job.stages import (
    ArtifactRun,
    Deployment,
    JobData,
    Steps,
    artifact_runtime,
    deploy,
    run_artifact,
)
from rewriter.targets import Target
from rewriter.tune.int8_range import lines as range_lines
from rewriter.verify.int8_layers import Int8Layers
from rewriter.verify.tolerance import policy


@dataclass
class JobContext:
    """What every attempt shares: the original, the target, the data and its outputs."""

    model: Model
    target: Target
    quantize: str
    opts: JobOptions
    outdir: Path
    data: JobData
    reference: dict[str, np.ndarray]
    steps: Steps
    until: str = "all"
    #: A float artifact's: the original's own output change per output for a one-float-step
    #: change of its input (:mod:`rewriter.verify.float_noise`); None for quantised artifacts.
    noise_floor: dict[str, float] | None = None


def deploy_to(ctx: JobContext, model: Model, outdir: Path, calibration: Any = None) -> Deployment:
    """Export ``model`` into ``outdir`` as the job's artifact and judge the file
    (:func:`rewriter.job.stages.deploy`)."""
    return deploy(model, ctx.target, ctx.quantize, outdir / f"model.{ctx.target.artifact}",
                  ctx.steps, ctx.data.calibration_samples if calibration is None else calibration,
                  ctx.opts.int8_io, ctx.opts.run_vela, outdir)


@dataclass
class Delivery:
    """A graph delivered: its SavedModel, the deployed file and its verdict, the file run on
    the job's samples (None: the export failed), its int8 error per layer, what to warn."""

    saved_model: str
    deployment: Deployment
    artifact: ArtifactRun | None
    layers: Int8Layers | None
    histogram: dict[str, Any] | None
    warnings: list[str]


def deliver(ctx: JobContext, model: Model, outdir: Path, applied: Any, message: str,
             calibration: Any = None, response: Any = None) -> Delivery:
    """The one path from a graph to a proven file: the SavedModel, export and verdict
    (:func:`deploy_to`), the file run in its runtime against the original's outputs (a float
    file's tolerance with the measured ``response`` to the approximations' bounds), and for an
    int8 ``.tflite`` the error of every layer."""
    from rewriter.export.saved_model import export_saved_model
    from rewriter.verify.histograms import error_histograms

    target = ctx.target
    with ctx.steps("saved_model", message):
        saved_model = export_saved_model(model, outdir / "saved_model").path
    forget(model)  # hold no TF function over a graph while the converter runs
    deployment = deploy_to(ctx, model, outdir, calibration)
    artifact = layers = histogram = None
    warnings: list[str] = []
    if deployment.exported.result is not None:
        warnings.extend(deployment.exported.result.warnings)
        with ctx.steps("verify_artifact", "running the artifact"):
            artifact = run_artifact(deployment.exported.path, artifact_runtime(target),
                                    ctx.quantize, ctx.model, ctx.data.samples, ctx.reference,
                                    applied, policy(ctx.opts.min_top1), ctx.noise_floor, response)
        if artifact.fallback:
            warnings.append(artifact.fallback)
        histogram = error_histograms(ctx.reference, artifact.outputs)
        if ctx.quantize in INTEGER_MODES and target.artifact == "tflite":
            layers = int8_layers(ctx, deployment.exported.path, model)
            forget(model)
            if not artifact.ok:
                warnings.append(layers.describe())
                warnings.extend(range_lines(layers.range_report))
    return Delivery(saved_model, deployment, artifact, layers, histogram, warnings)


def int8_layers(ctx: JobContext, path: Path, rewritten: Model) -> Int8Layers:
    """Every intermediate tensor of the int8 file against the rewritten float graph it was
    converted from (:mod:`rewriter.verify.int8_layers`)."""
    from rewriter.tune.int8_range import diagnose
    from rewriter.verify.int8_layers import int8_layer_errors

    samples = ctx.data.samples[: max(ctx.opts.divergence_samples, 4)]
    with ctx.steps("int8_layers", "measuring int8 error per layer"):
        layers = int8_layer_errors(str(path), rewritten, samples)
        layers.mode = ctx.quantize
        layers.range_report = diagnose(layers, ctx.target, ctx.model, ctx.quantize)
        return layers


def forget(*models: Model, keep: Model | None = None) -> None:
    """Drop the models' TF functions (each holds copies of the graph and its weights; ``keep``
    keeps the one for its outputs) and give the memory back, so a job holds one or two graphs
    at a time rather than every graph it ever ran."""
    from rewriter.host.procmem import release

    for m in models:
        m.forget_functions(keep_outputs=m is keep)
    release()


def run_all(model: Model, samples: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    from rewriter.verify.metrics import stack_samples

    return stack_samples([model.run(s) for s in samples])
