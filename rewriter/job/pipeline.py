"""The whole job, as a library: load -> plan -> rewrite -> verify -> export -> check -> report.

:func:`run_job` takes a loaded :class:`~rewriter.ir.model.Model` and a target, runs the stages of
:mod:`rewriter.job.stages` in order and returns a :class:`JobResult` whose :class:`Job` holds every
stage's typed result; ``report.json`` is built once, at the end, from them
(:func:`rewriter.report.build.build_report`). It never prints; ``progress`` is a context-manager
factory (the CLI passes ``ui.step``). One direction, no back and forth, except one retry: when
the exported artifact still holds an op that a rule was meant to remove (the converter
re-fused it, or left it in float), the next rule for that op is tried and the report says so.

Tolerances come from :mod:`rewriter.verify.tolerance` (the ``equivalence`` section states the
ones used).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.defaults import INTEGER_MODES
from rewriter.errors import UserError
from rewriter.ir.model import Model
from rewriter.job.options import JobOptions
from rewriter.job.results import Attempt, Diagnostics, Job, Retry
from rewriter.job.stages import (
    ArtifactRun,
    Bar,
    Deployment,
    JobData,
    Progress,
    Steps,
    artifact_runtime,
    deploy,
    job_data,
    no_progress,
    promote,
    rejudge,
    run_artifact,
)
from rewriter.rewrite.passes import RewriteResult
from rewriter.rewrite.planner import Plan
from rewriter.rules.base import Applied
from rewriter.targets import Target
from rewriter.tune.distil_targets import cannot_distil
from rewriter.tune.int8_range import lines as range_lines
from rewriter.tune.recover import Recovery
from rewriter.verify.bound_response import bound_response
from rewriter.verify.float_noise import noise_floor
from rewriter.verify.int8_layers import Int8Layers
from rewriter.verify.metrics import Comparison, reached
from rewriter.verify.tolerance import policy


@dataclass
class JobResult:
    """A finished job: every stage's typed result (``job``), the exit code, and the files
    written (``saved_model``, ``artifact``). The reports are written by the caller, once,
    from ``job`` (:func:`rewriter.report.build.build_report`)."""

    job: Job
    exit_code: int
    files: dict[str, str] = field(default_factory=dict)


#: How far :func:`run_job` goes: ``plan`` (plan and rewrite, judge the rewritten graph),
#: ``deploy`` (also export and judge the file, and the second attempt that verdict asks for:
#: what ``rewrite check`` runs), ``all`` (the whole job).
UNTIL = ("plan", "deploy", "all")


@dataclass
class _Context:
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


def run_job(model: Model, target: Target, outdir: Path, options: JobOptions | None = None,
            progress: Progress = no_progress, bar: Bar | None = None,
            until: str = "all") -> JobResult:
    """Run the job for ``model`` on ``target``, writing artifacts into ``outdir``, as far as
    ``until`` (:data:`UNTIL`); ``bar(description, total)`` (a context giving
    ``advance(n, text)``) shows the epochs of ``--recover``."""
    assert until in UNTIL, until
    opts = options or JobOptions()
    quantize = target.resolve_quantize(opts.quantize)
    for flag, value in (("--deploy", opts.deploy), ("--sram", opts.sram_kb),
                        ("--flash", opts.flash_kb)):
        if value:
            from rewriter.export.micro import refuse_unless_deployable

            refuse_unless_deployable(target.name, flag)
    float_file = opts.accuracy is not None and not (quantize in INTEGER_MODES
                                                    and target.artifact == "tflite")
    steps = Steps(progress)
    with steps("check_before", "checking the model against the op table"):
        before = target.check_graph(model, quantize)
    data = job_data(model, quantize, opts.calibration, opts.inputs, opts.samples,
                    opts.calibration_samples, opts.input_ranges, opts.pixels,
                    hold_out=until == "all" and (opts.recover or opts.qat))
    reference: dict[str, np.ndarray] = {}
    floor: dict[str, float] | None = None
    if until == "all":
        with steps("run_original", "running the original model"):
            reference = _run_all(model, data.samples)
            floor = (None if quantize in INTEGER_MODES else
                     noise_floor(model.run, data.samples, reference))
        _forget(model)
    ctx = _Context(model, target, quantize, opts, outdir, data, reference, steps, until, floor)
    attempt = _attempt(ctx)
    retry = None
    if attempt.deployment is not None:
        retry = plan_retry(attempt.plan, target, quantize, opts.exact_only,
                           attempt.deployment.unsupported_ops())
    if retry is not None:
        # The second attempt's files replace the first's, so its results are the ones kept
        # (the first failed too); the retry says what was tried and why.
        attempt = _attempt(ctx, frozenset(retry.exclude))
        retry.ok = attempt.ok
    recovery = skipped = None
    if (until == "all" and (opts.recover or opts.qat) and attempt.deployment is not None
            and attempt.deployment.exported.ok):
        # an integer output with no float tensor before it: nothing to distil, said (not exit 3)
        skipped = cannot_distil(ctx.model, attempt.rewrite.model)
        if skipped is None:
            attempt, recovery = _recover(ctx, attempt, bar)
    precision = None
    if _wants_plan(ctx, attempt) and recovery is None and not target.no_16x8():
        from rewriter.job.precision import ready_for_16x8

        exclude = frozenset(retry.exclude) if retry is not None else frozenset()
        attempt = ready_for_16x8(ctx, attempt, lambda: _attempt(ctx, exclude, for_16x8=True))
    if _wants_plan(ctx, attempt):
        assert attempt.deployment is not None and attempt.saved_model is not None
        from rewriter.job.precision import precision_plan

        precision, run = precision_plan(ctx, Path(attempt.deployment.exported.path),
                                        attempt.saved_model, attempt.rewrite.applied,
                                        policy(opts.min_top1))
        if run is not None:
            attempt.artifact = run
            attempt.deployment = rejudge(target, attempt.deployment, steps, opts.run_vela,
                                         ctx.outdir)
        why = (None if precision.met or recovery is not None
               else cannot_distil(ctx.model, attempt.rewrite.model))
        if why is not None:
            precision.recover_not_tried(f"--recover cannot distil: {why}")
        elif (not precision.met and recovery is None and attempt.deployment is not None
                and attempt.deployment.exported.ok):
            # the search's last move: distillation, kept only when better beyond the noise on
            # the verification inputs (rewriter.tune.recover.decide)
            attempt, recovery = _recover(ctx, attempt, bar)
            precision.after_recover(recovery, attempt.artifact)
        attempt.warnings.append(precision.describe())
    approximation = None
    # every op in 16x8 (asked, or an int8 job whose plans missed --accuracy on a target with
    # 16x8): the move left is an approximate rule where the target's own kernel loses more than
    # the rule's bound (rewriter.job.approximate), its candidate converted in 16x8
    if (until == "all" and opts.accuracy is not None and attempt.artifact is not None
            and (quantize == "16x8" or (precision is not None and not precision.met
                                        and not target.no_16x8()))
            and attempt.deployment is not None and attempt.deployment.exported.ok):
        from dataclasses import replace

        from rewriter.job.approximate import approximation_move

        attempt, approximation = approximation_move(
            replace(ctx, quantize="16x8"), attempt, lambda c, nodes: _attempt(c, approximate=nodes))
        attempt.warnings.append(approximation.describe())
    elif (until == "all" and opts.accuracy is None and quantize == "16x8"
          and attempt.artifact is not None and not attempt.artifact.ok):
        from rewriter.job.approximate import approximation_hint

        hint = approximation_hint(ctx, attempt)
        if hint:
            attempt.warnings.append(hint)
    if float_file:  # one command line for every target: a float file has no plan to search
        attempt.warnings.append(f"--accuracy {opts.accuracy:g}: {target.name} gets a float file "
                                "(no int8/16x8 plan to search); it is judged element-wise "
                                "against the original instead (the tolerance line)")
    package = None
    if ((opts.deploy or opts.sram_kb or opts.flash_kb) and until == "all"
            and attempt.deployment is not None and attempt.deployment.exported.ok):
        from rewriter.export.micro import measure, write_package

        verdict = attempt.deployment.verdict
        with steps("memory", "measuring the TFLite Micro arena"):
            package = measure(target.name, Path(attempt.deployment.exported.path),
                              verdict.vela if verdict else None)
        package.sram_budget = round(opts.sram_kb * 1024) if opts.sram_kb else None
        package.flash_budget = round(opts.flash_kb * 1024) if opts.flash_kb else None
        settings = getattr(target, "vela_settings", None)
        package.explain(attempt.deployment.exported.path, target.name,
                        settings.optimise if settings is not None else None)
        if opts.deploy:
            with steps("deploy", "writing the TFLite Micro package"):
                write_package(package, outdir)
                from rewriter.export.micro_lookup import write_lookups

                package.lookups = write_lookups(model, attempt.deployment.exported.path,
                                                outdir / "deploy")
    job = Job(model, target, quantize, before, data, attempt, retry, steps.timings, recovery,
              package, precision=precision, recover_skipped=skipped,
              approximation=approximation)
    if until == "all" and opts.versus_plain:
        job.versus_plain = versus_plain(model, target, quantize, attempt, data, opts, steps)
    files = {}
    if attempt.saved_model is not None:
        files["saved_model"] = attempt.saved_model
    if until == "all" and attempt.deployment is not None and attempt.deployment.exported.ok:
        files["artifact"] = str(attempt.deployment.exported.path)
    return JobResult(job, 0 if job.ok else 1, files)


def versus_plain(model: Model, target: Target, quantize: str, attempt: Attempt, data: JobData,
                 opts: JobOptions, steps: Steps) -> dict[str, Any] | None:
    """The job's artifact beside the plain converter's file (the original model exported the
    same way, judged the same way) on the target's cost model; None without one. When no rule
    was applied the artifact is that file and is not exported again."""
    import tempfile

    from rewriter.targets.cost import versus

    dep = attempt.deployment
    mine = dep.verdict.latency() if dep is not None and dep.verdict is not None else None
    if mine is None:
        return None
    if not attempt.rewrite.applied:
        return versus(mine, mine) | {"same_file": True}
    with (steps("plain", "estimating the plain converter's file for comparison"),
          tempfile.TemporaryDirectory(prefix="rewrite_plain_") as tmp):
        plain = deploy(model, target, quantize, Path(tmp) / f"model.{target.artifact}",
                       Steps(), data.calibration_samples, opts.int8_io, opts.run_vela,
                       Path(tmp) / "vela")
    theirs = plain.verdict.latency() if plain.verdict is not None else None
    if theirs is None:
        error = plain.exported.error
        return {"job": mine, "plain": None,
                "error": f"the plain converter failed: {error}" if error else "no estimate"}
    return versus(mine, theirs)


def _attempt(ctx: _Context, exclude: frozenset[str] = frozenset(),
             approximate: frozenset[str] = frozenset(), for_16x8: bool = False) -> Attempt:
    """Plan and rewrite (rules in ``exclude`` not used; the nodes in ``approximate`` replaced
    on purpose; ``for_16x8``: the planner's, :func:`rewriter.rewrite.planner.plan`) and judge the
    rewritten graph; then, as far as ``ctx.until`` asks, verify it in TF, export, check and run
    the artifact."""
    from rewriter.rewrite.planner import plan_and_apply

    steps, target = ctx.steps, ctx.target
    with steps("rewrite", "planning and rewriting"):
        the_plan, result = plan_and_apply(ctx.model, target, ctx.quantize, ctx.opts.exact_only,
                                          exclude, data=ctx.data.calibration_samples
                                          or ctx.data.samples, approximate=approximate,
                                          for_16x8=for_16x8)
    rewritten = result.model
    with steps("check_rewritten"):
        graph_after = target.check_graph(rewritten, ctx.quantize)
    if ctx.until == "plan":
        return Attempt(the_plan, result, graph_after)
    if ctx.until == "deploy":
        return Attempt(the_plan, result, graph_after, deployment=_deploy(ctx, rewritten,
                                                                         ctx.outdir))
    response = None
    if any(not a.exact for a in result.applied):
        with steps("bound_response", "measuring the model's response to its approximations"):
            response = bound_response(ctx.model, ctx.data.samples, ctx.reference,
                                      result.applied)
        _forget(ctx.model)
    with steps("verify_tf", "verifying the rewritten graph in TF"):
        rewritten_out = _run_all(rewritten, ctx.data.samples)
        tf_cmp = _compare_rewritten(ctx.reference, rewritten_out, result.applied,
                                    len(ctx.data.samples), response)
    warnings: list[str] = []
    if response is not None and not tf_cmp.ok:
        from rewriter.verify.tolerance import output_scale

        line = response.most_sensitive(output_scale(ctx.reference))
        if line:
            warnings.append(line)
    diagnostics = _diagnostics(ctx, the_plan, result, rewritten_out, warnings, response)
    _forget(ctx.model, rewritten, keep=rewritten)
    out = _deliver(ctx, rewritten, ctx.outdir, result.applied,
                   "writing the rewritten SavedModel", response=response)
    if out.histogram is not None:
        diagnostics.histograms["artifact"] = out.histogram
    return Attempt(the_plan, result, graph_after, tf_cmp, diagnostics, out.saved_model,
                   out.deployment, out.artifact, [*warnings, *out.warnings], out.layers,
                   rewrite_warnings=warnings)


def _deploy(ctx: _Context, model: Model, outdir: Path, calibration: Any = None) -> Deployment:
    """Export ``model`` into ``outdir`` as the job's artifact and judge the file
    (:func:`rewriter.job.stages.deploy`)."""
    return deploy(model, ctx.target, ctx.quantize, outdir / f"model.{ctx.target.artifact}",
                  ctx.steps, ctx.data.calibration_samples if calibration is None else calibration,
                  ctx.opts.int8_io, ctx.opts.run_vela, outdir)


@dataclass
class _Delivery:
    """A graph delivered: its SavedModel, the deployed file and its verdict, the file run on
    the job's samples (None: the export failed), its int8 error per layer, what to warn."""

    saved_model: str
    deployment: Deployment
    artifact: ArtifactRun | None
    layers: Int8Layers | None
    histogram: dict[str, Any] | None
    warnings: list[str]


def _deliver(ctx: _Context, model: Model, outdir: Path, applied: Any, message: str,
             calibration: Any = None, response: Any = None) -> _Delivery:
    """The one path from a graph to a proven file: the SavedModel, export and verdict
    (:func:`_deploy`), the file run in its runtime against the original's outputs (a float
    file's tolerance with the measured ``response`` to the approximations' bounds), and for an
    int8 ``.tflite`` the error of every layer."""
    from rewriter.export.saved_model import export_saved_model
    from rewriter.verify.histograms import error_histograms

    target = ctx.target
    with ctx.steps("saved_model", message):
        saved_model = export_saved_model(model, outdir / "saved_model").path
    _forget(model)  # hold no TF function over a graph while the converter runs
    deployment = _deploy(ctx, model, outdir, calibration)
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
            layers = _int8_layers(ctx, deployment.exported.path, model)
            _forget(model)
            if not artifact.ok:
                warnings.append(layers.describe())
                warnings.extend(range_lines(layers.range_report))
    return _Delivery(saved_model, deployment, artifact, layers, histogram, warnings)


#: Where ``--recover`` delivers the fine-tuned graph, inside the job's directory, before it
#: replaces the first artifact (only when it is better).
CANDIDATE_DIR = ".recover"


def _recover(ctx: _Context, attempt: Attempt, bar: Bar | None) -> tuple[Attempt, Recovery]:
    """One more stage: fine-tune the rewritten graph by distillation from the original (int8
    simulated for an int8 artifact, at the ranges the converter chose), then deliver it as any
    attempt is (:func:`_deliver`: SavedModel, export, verdict, run) into a candidate directory.
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
    teacher = _run_all(ctx.model, train)
    # the runtime the first file ran in (LiteRT when TFLite Micro lacks one of its kernels)
    runtime = attempt.artifact.runtime if attempt.artifact else artifact_runtime(target)
    error_before = _train_error(ctx, attempt.deployment.exported.path, train, teacher, runtime)
    shown = bar(f"fine-tuning ({opts.epochs} epochs)", opts.epochs) if bar else None
    qat_note = None
    with steps("recover", None if bar else f"fine-tuning ({opts.epochs} epochs)"), \
            (shown or contextlib.nullcontext()) as advance:
        on_epoch = (lambda e, loss: advance(1, f"loss {loss:.4g}")) if advance else None
        result = None
        if opts.qat:
            result, qat_note = _qat(ctx, train, on_epoch)
        if result is None:
            result = recover(ctx.model, rewritten, train, epochs=opts.epochs, seed=opts.seed,
                             int8_ranges=ranges, on_epoch=on_epoch)
    if qat_note:
        result.notes.insert(0, qat_note)
    tuned = result.model
    with steps("verify_recovered", "running the fine-tuned graph"):
        float_after = float_comparison(ctx.reference, tuned, ctx.data.samples)
    candidate = ctx.outdir / CANDIDATE_DIR
    out = _deliver(ctx, tuned, candidate, (), "writing the fine-tuned SavedModel", train)
    recovery = Recovery(result, attempt.artifact, out.artifact, float_after,
                        len(ctx.data.samples), split=ctx.data.basis)
    # a candidate the first file's runtime cannot run (TFLite Micro aborts on it) is dropped
    ran = out.artifact is not None and (out.artifact.runtime == runtime or not out.artifact.fallback)
    error_after = math.inf
    try:
        error_after = (_train_error(ctx, out.deployment.exported.path, train, teacher, runtime)
                       if ran else math.inf)
    except UserError as exc:  # e.g. TFLite Micro killed by SIGABRT on the training inputs
        ran, out.artifact.fallback = False, f"it does not run: {exc}"  # type: ignore[union-attr]
    if out.artifact is not None and not ran:
        recovery.notes.append(f"the fine-tuned file: {out.artifact.fallback}")
    recovery.train_error = (error_before, error_after)
    recovery.decision = decide(ctx.reference, attempt.artifact.outputs if attempt.artifact
                               else None, out.artifact.outputs if ran and out.artifact else None,
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


def _qat(ctx: _Context, train: list[dict[str, np.ndarray]],
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


def _train_error(ctx: _Context, path: Path, train: list[dict[str, np.ndarray]],
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


def _int8_layers(ctx: _Context, path: Path, rewritten: Model) -> Int8Layers:
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


def _diagnostics(ctx: _Context, the_plan: Plan, result: RewriteResult,
                 rewritten_out: dict[str, np.ndarray], warnings: list[str],
                 response: Any = None) -> Diagnostics:
    """Error histograms, the first diverging node, and (opt-in) a check after every rule."""
    from rewriter.verify.divergence import first_divergence
    from rewriter.verify.histograms import error_histograms

    diag = Diagnostics({"rewritten_tf": error_histograms(ctx.reference, rewritten_out)},
                       bound_response=response)
    samples = ctx.data.samples
    if result.applied:
        with ctx.steps("first_divergence", "comparing intermediate tensors"):
            diag.divergence = first_divergence(ctx.model, result.model, samples, result.applied,
                                               max_samples=ctx.opts.divergence_samples)
        if not diag.divergence.ok:
            warnings.append(diag.divergence.describe())
    if ctx.opts.check_each_rule and the_plan.rules:
        from rewriter.verify.per_rule import check_each_rule, first_failure

        with ctx.steps("check_each_rule", "checking after each rule"):
            diag.per_rule = check_each_rule(ctx.model, the_plan.rules,
                                            samples[: ctx.opts.divergence_samples],
                                            response=response)
        bad = first_failure(diag.per_rule)
        if bad is not None:
            warnings.append(bad.describe())
    return diag


def plan_retry(the_plan: Plan, target: Target, quantize: str, exact_only: bool,
               unsupported_after: Collection[str]) -> Retry | None:
    """Rules to leave out of a second attempt when the artifact still holds an op they were
    meant to remove (the converter re-fused their output, or left it in float).

    ``unsupported_after`` is the artifact verdict's unsupported ops
    (:meth:`rewriter.job.stages.Deployment.unsupported_ops`). Each is traced back through the
    target's lowering table to the TF ops that become it; the rules planned for those ops are
    excluded when another rule the target can run exists for the op. None when there is
    nothing to retry.
    """
    from rewriter.rewrite.planner import choose_rules
    from rewriter.targets import lowering

    bad = set(unsupported_after)
    if not bad:
        return None
    section = lowering()["onnx" if target.artifact == "onnx" else "tflite"]
    sources = {t for t in section if set(target.lower(t) or ()) & bad}
    exclude: set[str] = set()
    for fix in the_plan.fixes:
        if fix.op not in sources:
            continue
        suspects = {fix.rule, *fix.also}
        alternatives, _ = choose_rules(fix.op, target, quantize, exact_only, {},
                                       exclude | suspects)
        if alternatives:
            exclude |= suspects
    if not exclude:
        return None
    return Retry(sorted(exclude), sorted(bad),
                 "the exported artifact still held " + ", ".join(sorted(bad))
                 + "; planned again without the rules for the ops that become it")


def _forget(*models: Model, keep: Model | None = None) -> None:
    """Drop the models' TF functions (each holds copies of the graph and its weights; ``keep``
    keeps the one for its outputs) and give the memory back, so a job holds one or two graphs
    at a time rather than every graph it ever ran."""
    from rewriter.host.procmem import release

    for m in models:
        m.forget_functions(keep_outputs=m is keep)
    release()


def _run_all(model: Model, samples: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    from rewriter.verify.metrics import stack_samples

    return stack_samples([model.run(s) for s in samples])


def _compare_rewritten(ref: Mapping[str, np.ndarray], test: Mapping[str, np.ndarray],
                       applied: list[Applied], n: int, response: Any = None) -> Comparison:
    from rewriter.verify.metrics import compare_within
    from rewriter.verify.tolerance import DEFAULT_POLICY

    return compare_within(ref, test, DEFAULT_POLICY.for_rewrite(applied, ref, response), n)


def _wants_plan(ctx: _Context, attempt: Attempt) -> bool:
    """``--accuracy`` on an int8 ``.tflite`` whose artifact was made and misses it."""
    return (ctx.until == "all" and ctx.opts.accuracy is not None and ctx.quantize == "int8"
            and ctx.target.artifact == "tflite" and attempt.artifact is not None
            and attempt.saved_model is not None and attempt.deployment is not None
            and attempt.deployment.exported.ok
            and _misses(attempt.artifact.comparison, ctx.opts.accuracy))


def _misses(cmp: Comparison, target: float) -> bool:
    """``--accuracy``: some output of the artifact's comparison is below ``target`` by its own
    criterion (cosine; index agreement for an integer output: :func:`reached`)."""
    return any(reached(o)[1] < target for o in cmp.outputs)
