"""``--accuracy``'s approximation move: an approximate rule applied on purpose where the target
runs the op, but loses more there than the rule's stated bound.

The planner applies a rule only to ops the target lacks, and an exact one where it can
(:mod:`rewriter.rewrite.planner`). A target's own quantised kernel can still be the largest error
of the file: on ethos-u55-128 in 16x8 the audio model's LOG (its input, the mel power, is
range-starved even in int16) loses 0.976 cosine, while ``elementwise_ramps`` fitted on the
calibration range states a bound of about 0.01 and is built from CONV_2D, RELU6, MUL and ADD,
which Vela runs in 16x8. When the job's ``--quantize 16x8`` artifact misses ``--accuracy COS``
(or an int8 job's plans miss it on a target that runs 16x8: the candidate is then converted in
16x8, every op), this move:

1. ranks the file's layers by the error each adds (:func:`rewriter.verify.int8_layers.int8_layer_errors`)
   on *calibration* samples only;
2. takes the layer that adds the most; its TF node's op (e.g. ``Log``) must have a rule
   (:func:`rewriter.rewrite.planner.choose_rules`: exact first, else the best approximate one,
   never under ``--exact-only``) whose ops the target runs in the job's precision;
3. runs the whole job's attempt again with that node planned on purpose (``approximate``), into
   a candidate directory: rewrite, SavedModel, export, Vela, the file run in the target's
   runtime on the verification samples (held back from calibration, or ``--data``);
4. keeps the candidate (its files replace the first attempt's) only when it meets COS on every
   output there and, on Ethos-U, Vela runs every op on the NPU; otherwise drops it.

The report (``approximation``) names the layer, the rule and the bound each application stated,
and the cost of both files (Vela time, SRAM, CPU ops; file size), kept or not.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

#: Where the candidate is delivered, inside the job's directory, before it replaces the first.
CANDIDATE_DIR = ".approximate"
#: Calibration samples the layers are ranked on.
RANK_SAMPLES = 4


@dataclass
class ApproximationMove:
    """What the move found, tried and decided (module docstring)."""

    target: float
    worst_before: float
    met: bool
    why: str
    layer: dict[str, Any] | None = None  # the layer that adds the most error: name, ops, node
    rule: str | None = None
    exact: bool | None = None  # the rule applied is exact (no bound to state)
    bounds: list[dict[str, Any]] = field(default_factory=list)  # each application's bound
    worst_after: float | None = None
    cost_before: dict[str, Any] = field(default_factory=dict)
    cost_after: dict[str, Any] | None = None
    kept: bool = False

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def describe(self) -> str:
        head = f"--accuracy {self.target}: {'met' if self.met else 'not met'}"
        if self.rule is None:
            return f"{head} (worst output cosine {self.worst_before:.4f}); {self.why}"
        layer = self.layer or {}
        bound = "; ".join(f"max abs error {b['max_abs_error']:.3g} on [{b['input_range'][0]:.3g}"
                          f", {b['input_range'][1]:.3g}]" for b in self.bounds
                          if b.get("max_abs_error") is not None and b.get("input_range"))
        after = "did not run" if self.worst_after is None else f"{self.worst_after:.4f}"
        keys = ("vela_ms", "sram_kib", "cpu_ops", "size_kib")
        cost = ", ".join(f"{k} {self.cost_before.get(k)} -> {(self.cost_after or {}).get(k)}"
                         for k in keys if k in self.cost_before)
        return (f"{head}; approximation move: layer {layer.get('name')} "
                f"({', '.join(layer.get('ops', []))}, TF {layer.get('tf_op')}) adds the most "
                f"error, replaced on purpose by {self.rule} ("
                f"{'exact' if self.exact else 'stated bound: ' + (bound or 'none')}): "
                f"worst output cosine {self.worst_before:.4f} -> {after}, cost {cost}; "
                f"{'kept' if self.kept else 'dropped'}: {self.why}")


def file_cost(deployment: Any) -> dict[str, Any]:
    """The file's size and, on Ethos-U, Vela's estimate (time, SRAM, CPU ops) from its
    verdict."""
    path = Path(deployment.exported.path)
    out: dict[str, Any] = {"size_kib": round(path.stat().st_size / 1024, 1)
                           if path.exists() else None}
    vela = deployment.verdict.vela if deployment.verdict is not None else None
    if vela is not None:
        t = vela.inference_time
        out = {"vela_ms": round(t * 1e3, 3) if t is not None else None,
               "sram_kib": float(vela.csv.get("sram_memory_used") or 0),
               "cpu_ops": vela.cpu_ops} | out
    return out


def _worst(run: Any) -> float:
    return min((float(o.cosine) for o in run.comparison.outputs), default=0.0) if run else 0.0


def approximation_move(ctx: Any, attempt: Any, redo: Callable[[Any, frozenset[str]], Any]
                       ) -> tuple[Any, ApproximationMove]:
    """The move (module docstring) on ``attempt``; ``redo(ctx, approximate)`` runs an attempt
    with those nodes planned on purpose. Returns the attempt whose files are on disk (the
    candidate's when kept) and the record."""
    from rewriter.rewrite.planner import choose_rules
    from rewriter.verify.int8_layers import int8_layer_errors

    target = ctx.opts.accuracy
    worst = _worst(attempt.artifact)
    before = file_cost(attempt.deployment)
    move = ApproximationMove(target, worst, worst >= target, "", cost_before=before)
    if move.met:
        move.why = f"the {ctx.quantize} artifact meets it: no move needed"
        return attempt, move
    rewritten = attempt.rewrite.model
    cal = (ctx.data.calibration_samples or ctx.data.samples)[:RANK_SAMPLES]
    with ctx.steps("approx_rank", "ranking layers by added error (calibration samples)"):
        layers = int8_layer_errors(str(attempt.deployment.exported.path), rewritten, cal)
    top = layers.worst(1)
    if not top:
        move.why = "no layer of the file matched a float tensor: nothing to rank"
        return attempt, move
    w = top[0]
    ops = {n.name: n.op for n in rewritten.graph_def.node}
    tf_op = ops.get(w.node)
    move.layer = {"name": w.layer, "ops": list(w.ops), "node": w.node, "tf_op": tf_op,
                  "added": float(w.added)}
    if tf_op is None:
        move.why = f"layer {w.layer} matched no TF node ({w.node}): no rule to try"
        return attempt, move
    rules, why = choose_rules(tf_op, ctx.target, ctx.quantize, ctx.opts.exact_only)
    if not rules:
        move.why = (f"layer {w.layer} ({tf_op}) adds the most error and no rule replaces it with "
                    f"ops {ctx.target.title} runs in {ctx.quantize}: {why}")
        return attempt, move
    move.rule = rules[0].name
    candidate_dir = ctx.outdir / CANDIDATE_DIR
    cand = redo(replace(ctx, outdir=candidate_dir), frozenset({w.node}))
    applied = [a for a in cand.rewrite.applied if w.node in a.matched]
    if applied:
        move.rule, move.exact = applied[0].rule, applied[0].exact
    move.bounds = [a.bound.to_json() for a in applied if a.bound is not None]
    move.worst_after = _worst(cand.artifact) if cand.artifact is not None else None
    if cand.deployment is not None and cand.deployment.exported.ok:
        move.cost_after = file_cost(cand.deployment)
    on_chip = (move.cost_after or {}).get("cpu_ops", 0) == 0
    data = ctx.data.basis or "the verification samples"
    if not applied:
        move.why = f"{move.rule} did not match {w.node}"
    elif move.worst_after is None:
        move.why = "the candidate file did not export or run"
    elif move.worst_after < target:
        move.why = f"worst output cosine {move.worst_after:.4f} < {target} on {data}"
    elif not on_chip:
        move.why = f"Vela leaves {move.cost_after['cpu_ops']} op(s) to the CPU"  # type: ignore[index]
    else:
        move.kept = move.met = True
        move.why = f"worst output cosine {move.worst_after:.4f} >= {target} on {data}"
    if not move.kept:
        shutil.rmtree(candidate_dir, ignore_errors=True)
        return attempt, move
    from rewriter.job.stages import promote

    deployment = promote(candidate_dir, ctx.outdir, cand.deployment)
    saved_model = (str(ctx.outdir / Path(cand.saved_model).relative_to(candidate_dir))
                   if cand.saved_model else None)
    return replace(cand, deployment=deployment, saved_model=saved_model), move


def approximation_hint(ctx: Any, attempt: Any) -> str | None:
    """Without ``--accuracy``: when a 16x8 file misses and its layer adding the most error has
    a rule the target runs, say that ``--accuracy`` would try it; None otherwise. Never applied
    by default: the rule's bound holds on the calibration range only (README, "The audio
    family"), and it costs time and SRAM on the target."""
    from rewriter.rewrite.planner import choose_rules

    top = attempt.int8_layers.worst(1) if attempt.int8_layers is not None else []
    if not top:
        return None
    w = top[0]
    tf_op = next((n.op for n in attempt.rewrite.model.graph_def.node if n.name == w.node), None)
    if tf_op is None:
        return None
    rules, _ = choose_rules(tf_op, ctx.target, ctx.quantize, ctx.opts.exact_only)
    if not rules or rules[0].exact:
        return None
    return (f"layer {w.layer} ({', '.join(w.ops)}) adds the most {ctx.quantize} error; "
            f"{rules[0].name} (approximate, fitted on the calibration range) replaces {tf_op} "
            f"with ops {ctx.target.title} runs in {ctx.quantize}: --accuracy COS tries it on "
            "purpose and keeps it only when it meets COS on the verification data (not applied "
            "by default: the target runs the op, and the fit's bound holds only on the "
            "calibration range)")
