"""``--recover`` as a stage of the job: fine-tune the rewritten graph by distillation from the
original (or TFMOT's quantization-aware training with ``--qat``), deliver the result as any
attempt is (:func:`rewriter.job.delivery.deliver`) into a candidate directory, and keep it only
when it is better on inputs the fine-tuning never used (:func:`rewriter.tune.recover.decide`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.errors import UserError
from rewriter.job.delivery import JobContext, deliver, run_all
from rewriter.job.results import Attempt, Diagnostics
from rewriter.job.stages import Bar, artifact_runtime, promote
from rewriter.tune.recover import Recovery

#: Where ``--recover`` delivers the fine-tuned graph, inside the job's directory, before it
#: replaces the first artifact (only when it is better).
CANDIDATE_DIR = ".recover"


def recover_attempt(ctx: JobContext, attempt: Attempt, bar: Bar | None) -> tuple[Attempt, Recovery]:
    """One more stage: fine-tune the rewritten graph by distillation from the original (int8
    simulated for an int8 artifact, at the ranges the converter chose), then deliver it as any
    attempt is (:func:`rewriter.job.delivery.deliver`: SavedModel, export, verdict, run) into a candidate directory.
    The candidate's files replace the first attempt's only when it is better on inputs the
    fine-tuning never used (the verification samples), beyond the noise
    (:func:`rewriter.tune.recover.decide`); otherwise they are dropped
    and the first attempt stands as it was, files and results. Either way the attempt returned
    describes the files on disk; its rules' proof (``tf``) is the first's."""
    import contextlib
    import shutil

    from rewriter.tune.recover import decide, float_comparison, recover
    from rewriter.verify.int8_layers import tensor_ranges

    steps, target, opts = ctx.steps, ctx.target, ctx.opts
    assert attempt.deployment is not None and attempt.tf is not None
    rewritten = attempt.rewrite.model
    int8 = ctx.quantize == "int8" and target.artifact == "tflite"  # simulated in the loop
    ranges = tensor_ranges(attempt.deployment.exported.path, rewritten) if int8 else None
    train = ctx.data.calibration_samples or []
    teacher = run_all(ctx.model, train)
    # the runtime the first file ran in (LiteRT when TFLite Micro lacks one of its kernels)
    runtime = attempt.artifact.runtime if attempt.artifact else artifact_runtime(target)
    error_before = train_error(ctx, attempt.deployment.exported.path, train, teacher, runtime)
    shown = bar(f"fine-tuning ({opts.epochs} epochs)", opts.epochs) if bar else None
    qat_note = None
    with steps("recover", None if bar else f"fine-tuning ({opts.epochs} epochs)"), \
            (shown or contextlib.nullcontext()) as advance:
        on_epoch = (lambda e, loss: advance(1, f"loss {loss:.4g}")) if advance else None
        result = None
        if opts.qat:
            result, qat_note = qat(ctx, train, on_epoch)
        if result is None:
            result = recover(ctx.model, rewritten, train, epochs=opts.epochs, seed=opts.seed,
                             int8_ranges=ranges, on_epoch=on_epoch)
    if qat_note:
        result.notes.insert(0, qat_note)
    tuned = result.model
    with steps("verify_recovered", "running the fine-tuned graph"):
        float_after = float_comparison(ctx.reference, tuned, ctx.data.samples)
    candidate = ctx.outdir / CANDIDATE_DIR
    out = deliver(ctx, tuned, candidate, (), "writing the fine-tuned SavedModel", train)
    recovery = Recovery(result, attempt.artifact, out.artifact, float_after,
                        len(ctx.data.samples), split=ctx.data.basis)
    # a candidate the first file's runtime cannot run (TFLite Micro aborts on it) is dropped
    tuned_run = out.artifact
    ran = tuned_run is not None and (tuned_run.runtime == runtime or not tuned_run.fallback)
    error_after = math.inf
    if ran:
        try:
            error_after = train_error(ctx, out.deployment.exported.path, train, teacher, runtime)
        except UserError as exc:  # e.g. TFLite Micro killed by SIGABRT on the training inputs
            ran, tuned_run.fallback = False, f"it does not run: {exc}"  # type: ignore[union-attr]
    if tuned_run is not None and not ran:
        recovery.notes.append(f"the fine-tuned file: {tuned_run.fallback}")
    recovery.train_error = (error_before, error_after)
    recovery.decision = decide(ctx.reference, attempt.artifact.outputs if attempt.artifact
                               else None, tuned_run.outputs if ran and tuned_run else None,
                               len(ctx.data.samples), ctx.data.basis or "the verification inputs")
    if not recovery.decision.kept:
        recovery.kept = False
        recovery.notes.append(f"the first artifact was kept: {recovery.decision.why}")
        shutil.rmtree(candidate, ignore_errors=True)
        return attempt, recovery
    deployment = promote(candidate, ctx.outdir, out.deployment)
    warnings = [*attempt.rewrite_warnings, *out.warnings]
    histograms = dict(attempt.diagnostics.histograms) if attempt.diagnostics else {}
    if out.histogram is not None:
        histograms["artifact"] = out.histogram
    diagnostics = Diagnostics(histograms, attempt.diagnostics.divergence if attempt.diagnostics
                              else None,
                              attempt.diagnostics.per_rule if attempt.diagnostics else None)
    saved_model = str(ctx.outdir / Path(out.saved_model).relative_to(candidate))
    return Attempt(attempt.plan, attempt.rewrite, attempt.graph_after, attempt.tf, diagnostics,
                   saved_model, deployment, out.artifact, warnings, out.layers,
                   rewrite_warnings=attempt.rewrite_warnings), recovery


def qat(ctx: JobContext, train: list[dict[str, np.ndarray]],
         on_epoch: Any) -> tuple[Any, str | None]:
    """``--qat``: TFMOT's quantization-aware training (tf_keras models), then the rules again
    on the fine-tuned model; (None, why) when TFMOT cannot, and ``--recover`` takes over."""
    from rewriter.rewrite.planner import plan_and_apply
    from rewriter.tune.qat import QatUnavailable, qat_finetune
    from rewriter.tune.recover import RecoverResult

    try:
        q = qat_finetune(ctx.model, train, ctx.opts.epochs, ctx.opts.seed, on_epoch)
    except QatUnavailable as exc:
        return None, f"--qat: {exc}; fine-tuned by --recover's distillation instead"
    _, rewritten = plan_and_apply(q.model, ctx.target, ctx.quantize, ctx.opts.exact_only,
                                  data=ctx.data.calibration_samples or ctx.data.samples)
    return RecoverResult(rewritten.model, ctx.opts.epochs, ctx.opts.seed, len(train), q.layers,
                         0, 0, 0, q.losses, q.seconds,
                         ["TFMOT quantization-aware training of the tf_keras model (default "
                          "8-bit scheme), distilled from the original; the rules applied again "
                          "to the fine-tuned model"], method="tfmot"), None


def train_error(ctx: JobContext, path: Path, train: list[dict[str, np.ndarray]],
                 teacher: Mapping[str, np.ndarray], runtime: str) -> float:
    """The artifact's mean squared error on ``train`` over the variance of the original's
    outputs, averaged over outputs (what fine-tuning minimises, measured on the real file); an
    integer output counts the share of its indices that differ (its logits are not in the
    file's outputs)."""
    from rewriter.job.stages import run_samples
    from rewriter.verify.factory import artifact_runner

    runner = artifact_runner(path, runtime)
    outs = run_samples(runner, train, [o.name for o in ctx.model.outputs])
    return float(np.mean([
        np.mean(np.rint(outs[k]) != v) if np.issubdtype(v.dtype, np.integer) else
        np.mean((outs[k] - v) ** 2) / max(float(np.var(v)), 1e-12) for k, v in teacher.items()]))
