"""``--accuracy COS``: when the int8 artifact misses COS on some output, search the cheapest
int8/16x8 plan that reaches it on every output (:mod:`rewriter.tune.plan_search`, files made by
:mod:`rewriter.tune.mixed`) and deliver it in the artifact's place.

Every plan is run in the target's runtime (TFLite Micro for tflm, LiteRT elsewhere) on the job's
verification samples (held back from calibration by default) and compared with the *original*
model's outputs there; the per-layer error that ranks the promotions is measured on calibration
samples only. Cost: Vela's estimate (time, SRAM, CPU ops) on Ethos-U, the file size elsewhere.
A plan is delivered only when it is better than the int8 file and, on Ethos-U, Vela runs no more
of its ops on the CPU than of the int8 file's (none with integer input and output).
Every plan's input and output are what the job's int8 file's are (:func:`wants_int8_io`): integer
(an input or output next to a 16x8 op is int16, as the converter's 16x8 file has them,
:func:`rewriter.tune.mixed.io_recipe`) or float (``--float-io``). Not met: the job ends 1 with the best plan delivered and, in the report, what would
reach the target (the ops with no 16x8 kernel on the target, or none: the whole model in 16x8
was tried). Where the target has a 16x8 kernel for every op, the TFLite converter's whole-model
16x8 file is one more candidate, measured and costed like the others (:func:`rewriter.tune.plan_search.search`'s ``whole``).
Every candidate is also tried refined (the search's ``refine``, :func:`rewriter.tune.rounding.moves`):
its int16 activation ranges 2x, 4x and 8x wider (:func:`rewriter.tune.headroom.widen_int16`), and
each with its int8 weights rounded by GPTQ on the calibration samples (:class:`rewriter.tune.rounding.Rounder`);
the best is kept only when better on the verification samples.

Each output is judged by its own criterion (:func:`rewriter.verify.metrics.reached`): cosine
>= COS for a float output, index agreement (the share of indices equal to the original's) >= COS
for an integer one (an arg-max index map, ids), as the verdict judges it; the report and
``precision.outputs`` say per output which criterion and what the int8 file and the plan reached.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewriter.job.stages import ArtifactRun, artifact_runtime, run_artifact, wants_int8_io
from rewriter.verify.metrics import reached


@dataclass
class PrecisionPlan:
    """The search's outcome, as the report shows it."""

    target: float
    result: Any  # plan_search.SearchResult
    delivered: bool
    int8_file: dict[str, Any]
    plan_file: dict[str, Any]
    needs: list[str] = field(default_factory=list)
    #: The search's last move when promotions did not reach the target: ``--recover``'s
    #: distillation (``{kept, why, worst}``; None: not tried).
    recover: dict[str, Any] | None = None

    @property
    def met(self) -> bool:
        return bool(self.result.met) or bool(self.recover and self.recover["met"])

    def after_recover(self, recovery: Any, run: Any) -> None:
        """Record the ``--recover`` move; when kept, its file replaced the plan's."""
        worst = worst_reached(run.comparison) if run else 0.0
        kept = bool(recovery.kept)
        self.recover = {"kept": kept, "worst": float(worst) if kept else None,
                        "met": kept and worst >= self.target,
                        "why": recovery.decision.why if recovery.decision else
                        "the fine-tuned artifact did not run"}
        if kept:
            self.delivered = False

    def recover_not_tried(self, why: str) -> None:
        """Record that the ``--recover`` move could not be taken, and why."""
        self.recover = {"kept": False, "tried": False, "worst": None, "met": False, "why": why}

    def to_json(self) -> dict[str, Any]:
        out = self.result.to_json()
        out.update(delivered=self.delivered, int8_file=self.int8_file,
                   plan_file=self.plan_file, would_reach=self.needs, recover=self.recover,
                   met=self.met)
        return out

    def describe(self) -> str:
        r = self.result
        n = len(r.best.promoted)
        plan = r.best.label or f"{n} of {len(r.layers)} ops in 16x8"
        rounded = r.best.refined if r.best.refined and r.best.refined["kept"] else None
        plan += (f", {rounded.get('move', 'refined')} (worst output {rounded['before']:.4f} -> "
                 f"{rounded['after']:.4f})" if rounded else "")
        head = (f"--accuracy {self.target}: {'met' if r.met else 'not met'} with {plan} "
                f"({reached_text(r)})")
        cost = ", ".join(f"{k} {self.int8_file.get(k)} -> {v}" for k, v in self.plan_file.items()
                         if k in ("vela_ms", "sram_kib", "size_kib", "cpu_ops"))
        tail = "" if r.met else f"; would reach it: {'; '.join(self.needs) or 'nothing tried'}"
        if r.met and not self.delivered and self.recover is None:
            cpu = self.plan_file.get("cpu_ops") or 0
            cpu8 = self.int8_file.get("cpu_ops") or 0
            tail += ("; not delivered: " + (f"Vela runs {cpu} of its ops on the CPU (the int8 "
                                            f"file {cpu8})" if cpu > cpu8 else
                                            "no better than the int8 file"))
        if self.recover is not None:
            rec = self.recover
            tail += ("; then --recover, the search's last move: "
                     + (f"kept (worst output {rec['worst']:.4f}, "
                        f"{'met' if rec['met'] else 'not met'}): " if rec["kept"] else
                        "not tried: " if rec.get("tried") is False else
                        "dropped: ") + rec["why"])
        return f"{head}; cost {cost}{tail}"


def worst_reached(cmp: Any) -> float:
    """The lowest value an output of comparison ``cmp`` reached by its own criterion (cosine,
    or index agreement for an integer output; 0 with no output)."""
    return min((reached(o)[1] for o in cmp.outputs), default=0.0)


def reached_text(result: Any) -> str:
    """``logits cosine 0.9994 (int8 0.9712), argmax index agreement 0.9980 (int8 0.9961)``: per
    output of a :class:`~rewriter.tune.plan_search.SearchResult`, its criterion, what the plan
    reached and what the int8 file did."""
    parts = []
    for name, o in result.outputs().items():
        got, int8 = o["plan"], o["int8"]
        parts.append(f"{name} {o['criterion']} "
                     + (f"{got:.4f}" if got is not None else "not measured")
                     + (f" (int8 {int8:.4f})" if int8 is not None else ""))
    return ", ".join(parts) or "no output measured"


def _cost(target: Any, path: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"size_kib": round(path.stat().st_size / 1024, 1)}
    if target.vela_config:
        from rewriter.targets.vela import run_vela

        v = run_vela(str(path), target.vela_config, system_config=target.system_config,
                     memory_mode=target.memory_mode)
        t = v.inference_time
        out.update(vela_ms=round(t * 1e3, 3) if t is not None else None,
                   sram_kib=float(v.csv.get("sram_memory_used") or 0), cpu_ops=v.cpu_ops)
    return out


WHOLE_16X8 = "the whole model in 16x8 (TFLite converter)"


def whole_16x8(saved_model: str, calibration: list[dict[str, Any]],
               integer_io: bool = True) -> dict[str, bytes]:
    """The converter's whole-model 16x8 file, keyed by :data:`WHOLE_16X8` (int16 input and output,
    or float with ``integer_io`` False); {} when the converter refuses (it has no 16x8
    HARD_SWISH, for one)."""
    import tensorflow as tf

    conv = tf.lite.TFLiteConverter.from_saved_model(saved_model)
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: iter(calibration)
    conv.target_spec.supported_ops = [
        tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    if integer_io:
        conv.inference_input_type = conv.inference_output_type = tf.int16
    try:
        return {WHOLE_16X8: bytes(conv.convert())}
    except Exception:  # the converter raises many types; the search goes on without it
        return {}


def _ceiling(evaluate: Any, flt: bytes, target: float, ctx: Any,
             criteria: dict[str, str]) -> list[str]:
    """What bounds every plan with weights rounded to nearest: the float file with only its
    weights so rounded to int8 (per channel), run like the plans; one sentence, or none when it
    cannot be measured. (GPTQ rounding, a move of the search, can pass it.)"""
    from rewriter.tune.mixed import int8_weights_only

    with ctx.steps("precision_ceiling", "measuring the int8 weights alone"):
        data, count = int8_weights_only(flt)
        try:
            acc, _ = evaluate(data)
        except Exception:  # the runtime could not run it: no figure to give
            return []
    worst = min(acc.values(), default=0.0)
    each = ", ".join(f"{k} {criteria.get(k, 'cosine')} {v:.4f}" for k, v in acc.items())
    head = (f"the {count} conv/dense weight tensors alone in int8 (per channel, activations "
            f"float) give worst output {worst:.4f} ({each})")
    if worst < target:
        return [f"{head} < {target}: no plan with int8 weights rounded to nearest can reach "
                "it, and the search's GPTQ rounding of them did not either; only float weights "
                "(a CPU island, --quantize float16 on a target that runs it) or weights "
                "fine-tuned for int8 (--recover, --qat) would"]
    return [f"{head} >= {target}: the activations' precision is what is missing"]


def ready_for_16x8(ctx: Any, attempt: Any, again: Callable[[], Any]) -> Any:
    """Before the search: where the target runs an op in int8 but has no 16x8 kernel for it
    (TFLite Micro's MIRROR_PAD, Basic Pitch's CQT pads) and an exact rule replaces it by ops
    that have one (:func:`rewriter.rewrite.planner.no_16x8_kernel`), the job is planned again
    with those rules (``again``: the attempt with the planner's ``for_16x8``), so the ops it
    feeds can be promoted with their producer; its files replace the first attempt's. The
    first attempt is returned unchanged when no such rule applies; the int8 path of a job
    without ``--accuracy`` (or whose int8 file meets it) never comes here."""
    from rewriter.rewrite.planner import no_16x8_kernel

    fixes = no_16x8_kernel(attempt.rewrite.model, ctx.target)
    if not fixes:
        return attempt
    before = worst_reached(attempt.artifact.comparison)
    redone = again()
    n = sum(f.count for f in fixes)
    ops = ", ".join(f"{f.count} {f.op} ({f.rule})" for f in fixes)
    after = (f"{worst_reached(redone.artifact.comparison):.4f}" if redone.artifact is not None
             else "not run")
    redone.warnings.append(
        f"--accuracy: {n} node(s) {ctx.target.title} runs in int8 but has no 16x8 kernel for "
        f"were replaced by exact rules before the plan search ({ops}), so the ops they feed can "
        f"read int16; the int8 file was made again (worst output {before:.4f} -> {after})")
    return redone


def precision_plan(ctx: Any, artifact_path: Path, saved_model: str, applied: Any,
                   policy: Any) -> tuple[PrecisionPlan, ArtifactRun | None]:
    """Search (module docstring); the plan and, when it was delivered into ``artifact_path``,
    its run in the target's runtime."""
    import tensorflow as tf

    from rewriter.tune.mixed import MixedQuantizer
    from rewriter.tune.plan_search import criteria, search
    from rewriter.tune.rounding import Rounder, moves
    from rewriter.verify.runners import LiteRTRunner

    target, opts = ctx.target, ctx.opts
    runtime = artifact_runtime(target)
    with tempfile.TemporaryDirectory(prefix="rewriter-precision-") as tmp_name:
        tmp = Path(tmp_name)
        with ctx.steps("precision_float", "exporting the float file for mixed precision"):
            conv = tf.lite.TFLiteConverter.from_saved_model(saved_model)
            conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
            flt = bytes(conv.convert())
        (tmp / "float.tflite").write_bytes(flt)
        lite = LiteRTRunner(tmp / "float.tflite")
        cal = [lite.bind_feeds(s) for s in (ctx.data.calibration_samples or ctx.data.samples)]
        counter = iter(range(10**6))

        def evaluate(data: bytes) -> tuple[dict[str, float], dict[str, float]]:
            path = tmp / f"plan{next(counter)}.tflite"
            path.write_bytes(data)
            run = run_artifact(path, runtime, "int8", ctx.model, ctx.data.samples,
                               ctx.reference, applied, policy)
            outs = run.comparison.outputs  # each output by its own criterion
            return ({o.name: reached(o)[1] for o in outs},
                    {o.name: float(o.top1_agreement) for o in outs if o.top1_agreement is not None})

        def cost(data: bytes) -> dict[str, Any]:
            path = tmp / "cost.tflite"
            path.write_bytes(data)
            return _cost(target, path)

        integer_io = wants_int8_io(target, opts.int8_io, "int8")
        mq = MixedQuantizer(flt, cal, int16_reduce_max=target.int16_kernel("REDUCE_MAX"),
                            float_io=not integer_io)
        try:
            whole = {}
            if not target.no_16x8() and all(target.int16_kernel(op.op) for op in mq.ops):
                with ctx.steps("precision_whole", "converting the whole model to 16x8"):
                    whole = whole_16x8(saved_model, cal, integer_io)
            with ctx.steps("precision_search", f"searching a plan for accuracy {opts.accuracy}"):
                result = search(mq, evaluate, cost, opts.accuracy, cal[:8],
                                lambda op: op not in ("QUANTIZE", "DEQUANTIZE")
                                and target.int16_kernel(op), whole=whole,
                                criteria=criteria(ctx.reference),
                                refine=moves(Rounder(flt, cal)))
            plan_bytes = (result.best.data if result.best.data is not None else
                          mq.build({s: "16x8" for s in result.best.promoted}))
        finally:
            mq.close()
        int8_cost = _cost(target, artifact_path)
        plan_cost = result.best.cost
        needs = [f"{op.op} ({op.scope.split(';')[0]}) has no 16x8 kernel on {target.title}"
                 for op in mq.ops if op.op not in ("QUANTIZE", "DEQUANTIZE")
                 and not target.int16_kernel(op.op)][:6]
        if target.no_16x8():
            needs = [f"{target.title} runs no 16x8 ({target.no_16x8()}): no mixed plan; only "
                     "float ops on the host or a model change would"]
        if not result.met:
            needs = _ceiling(evaluate, flt, opts.accuracy, ctx, result.criteria) + needs
        better = result.best.worst > result.int8.worst and (result.best.promoted
                                                            or result.best.refined)
        on_chip = (plan_cost.get("cpu_ops") or 0) <= (int8_cost.get("cpu_ops") or 0)
        plan = PrecisionPlan(opts.accuracy, result, bool(better and on_chip), int8_cost,
                             plan_cost, needs)
        if not plan.delivered:
            return plan, None
        artifact_path.write_bytes(plan_bytes)
        run = run_artifact(artifact_path, runtime, "int8", ctx.model, ctx.data.samples,
                           ctx.reference, applied, policy)
        return plan, run
