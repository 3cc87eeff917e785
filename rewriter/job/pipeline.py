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

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.defaults import INTEGER_MODES
from rewriter.ir.model import Model
from rewriter.job.delivery import JobContext, deliver, deploy_to, forget, run_all
from rewriter.job.options import JobOptions
from rewriter.job.recovery import recover_attempt
from rewriter.job.results import Attempt, Diagnostics, Job, Retry
from rewriter.job.stages import (
    Bar,
    JobData,
    Progress,
    Steps,
    deploy,
    job_data,
    no_progress,
    rejudge,
)
from rewriter.rewrite.passes import RewriteResult
from rewriter.rewrite.planner import Plan
from rewriter.rules.base import Applied
from rewriter.targets import Target
from rewriter.tune.distil_targets import cannot_distil
from rewriter.verify.bound_response import bound_response
from rewriter.verify.float_noise import noise_floor
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
            reference = run_all(model, data.samples)
            floor = (None if quantize in INTEGER_MODES else
                     noise_floor(model.run, data.samples, reference))
        forget(model)
    ctx = JobContext(model, target, quantize, opts, outdir, data, reference, steps, until, floor)
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
            attempt, recovery = recover_attempt(ctx, attempt, bar)
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
            attempt, recovery = recover_attempt(ctx, attempt, bar)
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


def _attempt(ctx: JobContext, exclude: frozenset[str] = frozenset(),
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
        return Attempt(the_plan, result, graph_after, deployment=deploy_to(ctx, rewritten,
                                                                         ctx.outdir))
    response = None
    if any(not a.exact for a in result.applied):
        with steps("bound_response", "measuring the model's response to its approximations"):
            response = bound_response(ctx.model, ctx.data.samples, ctx.reference,
                                      result.applied)
        forget(ctx.model)
    with steps("verify_tf", "verifying the rewritten graph in TF"):
        rewritten_out = run_all(rewritten, ctx.data.samples)
        tf_cmp = _compare_rewritten(ctx.reference, rewritten_out, result.applied,
                                    len(ctx.data.samples), response)
    warnings: list[str] = []
    if response is not None and not tf_cmp.ok:
        from rewriter.verify.tolerance import output_scale

        line = response.most_sensitive(output_scale(ctx.reference))
        if line:
            warnings.append(line)
    diagnostics = _diagnostics(ctx, the_plan, result, rewritten_out, warnings, response)
    forget(ctx.model, rewritten, keep=rewritten)
    out = deliver(ctx, rewritten, ctx.outdir, result.applied,
                   "writing the rewritten SavedModel", response=response)
    if out.histogram is not None:
        diagnostics.histograms["artifact"] = out.histogram
    return Attempt(the_plan, result, graph_after, tf_cmp, diagnostics, out.saved_model,
                   out.deployment, out.artifact, [*warnings, *out.warnings], out.layers,
                   rewrite_warnings=warnings)


def _diagnostics(ctx: JobContext, the_plan: Plan, result: RewriteResult,
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


def _compare_rewritten(ref: Mapping[str, np.ndarray], test: Mapping[str, np.ndarray],
                       applied: list[Applied], n: int, response: Any = None) -> Comparison:
    from rewriter.verify.metrics import compare_within
    from rewriter.verify.tolerance import DEFAULT_POLICY

    return compare_within(ref, test, DEFAULT_POLICY.for_rewrite(applied, ref, response), n)


def _wants_plan(ctx: JobContext, attempt: Attempt) -> bool:
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
