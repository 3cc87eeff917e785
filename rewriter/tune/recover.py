"""``--recover``: win back what approximate rules and int8 cost, by distillation from the original.

The rewritten graph is frozen: its weights are ``Const`` nodes. They are lifted into variables
the way ``rewrite unfreeze`` does (:func:`rewriter.surgery.unfreeze.find_weights`: the consts
feeding conv / matmul / bias / normalisation ops; batch-norm statistics stay fixed), and the graph
is imported with each of them read from its variable. The *original* model is the teacher: on
the calibration inputs (no labels), the student's outputs are pulled towards the teacher's by
minimising the mean squared error of each output over the variance of the teacher's (Adam). An
integer output (an arg-max index map, ids) has no gradient: the float tensor its arg-max reads
(the logits) is pulled instead, matched in both graphs by :mod:`rewriter.tune.distil_targets`.

When the artifact is int8, quantisation is simulated in the loop (fake quantisation, the
straight-through estimator passes gradients): every conv / depthwise / matmul kernel is rounded
to symmetric int8 per output channel (as the converter does; a batch norm folded into the kernel
later scales each channel, which commutes with per-channel rounding), and every tensor the int8
file quantises is rounded to the very range the converter gave it (read from the exported
``.tflite``: :func:`rewriter.verify.int8_layers.tensor_ranges`), then, after each epoch, to the
min/max the tensor took over every training input, as the converter's min/max calibration on
the same inputs gives (widened during an epoch when a batch exceeds it, never narrowed; a
moving average of batch ranges narrows them and the student learns to rely on a precision the
exported file does not have). A Log or Sqrt reading a rounded 0 keeps its forward value and gets
a finite gradient (:mod:`rewriter.tune.grad_safe`: 0 x inf was NaN). After fine-tuning the variables
are frozen back into the consts (the fake quantisation is not kept) and the job exports and
verifies the new graph as usual; the report compares the artifact before and after on held-back
inputs the fine-tuning never saw.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewriter.defaults import RECOVER_EPOCHS
from rewriter.ir.graph import GraphIndex, make_node, parse_input
from rewriter.ir.model import Model
from rewriter.tune.grad_safe import gradient_safe

LEARNING_RATE = 3e-4
#: Samples whose gradients are averaged per update.
BATCH = 4
#: Kernel inputs and their per-channel axis handling, by op.
_KERNEL_OPS = {"Conv2D": 1, "DepthwiseConv2dNative": 1, "MatMul": 1}


@dataclass
class RecoverResult:
    """The fine-tuned graph and how it was obtained."""

    model: Model
    epochs: int
    seed: int
    train_samples: int
    variables: int
    parameters: int
    fake_quant_weights: int
    fake_quant_tensors: int
    losses: list[float]  # mean loss per epoch
    seconds: float
    notes: list[str] = field(default_factory=list)
    method: str = "distillation"  # or "tfmot" (--qat)

    def to_json(self) -> dict[str, Any]:
        return {"method": self.method, "epochs": self.epochs, "seed": self.seed,
                "train_samples": self.train_samples,
                "variables": self.variables, "parameters": self.parameters,
                "fake_quant": {"weights": self.fake_quant_weights,
                               "tensors": self.fake_quant_tensors},
                "loss": [round(v, 6) for v in self.losses],
                "seconds": round(self.seconds, 3), "notes": list(self.notes)}


def recover(teacher: Model, student: Model, train: Sequence[Mapping[str, np.ndarray]], *,
            epochs: int = RECOVER_EPOCHS, seed: int = 0,
            int8_ranges: Mapping[str, tuple[float, float]] | None = None,
            learning_rate: float = LEARNING_RATE,
            on_epoch: Callable[[int, float], None] | None = None) -> RecoverResult:
    """Fine-tune ``student``'s weights so its outputs (int8-simulated when ``int8_ranges`` is
    given) match ``teacher``'s on ``train``; returns the graph with the new weights."""
    import tensorflow as tf

    from rewriter.tune.distil_targets import distil_targets

    start = time.perf_counter()
    tf.random.set_seed(seed)
    rng = np.random.default_rng(seed)
    pulled, why = distil_targets(teacher, student)
    if why:
        raise NotDistillable(why)
    net = _Student(student, int8_ranges, [p for p in pulled if p.student != _out(student, p)])
    names = [p.teacher for p in pulled]
    targets = [teacher.run(s, fetches=names) for s in train]
    spread = [max(float(np.var(np.stack([t[n] for t in targets]))), 1e-12) for n in names]

    @tf.function
    def grads(xs: list[Any], ys: list[Any]) -> tuple[Any, list[Any], list[Any], list[Any]]:
        outs, reads, seen = net.forward(*xs)
        loss = tf.add_n([tf.reduce_mean(tf.square(o - y)) / v
                         for o, y, v in zip(outs, ys, spread, strict=True)])
        g = tf.gradients(loss, [reads[k] for k in net.train_index])
        g = [tf.zeros_like(reads[k]) if gi is None else gi
             for k, gi in zip(net.train_index, g, strict=True)]
        return (loss, g, [tf.reduce_min(t) for t in seen], [tf.reduce_max(t) for t in seen])

    adam = _Adam(net.trainable, learning_rate)
    losses: list[float] = []
    order = np.arange(len(train))
    for epoch in range(epochs):
        rng.shuffle(order)
        total = 0.0
        lo = np.full(len(net.ranges), np.inf)
        hi = np.full(len(net.ranges), -np.inf)
        for first in range(0, len(order), BATCH):
            batch = order[first:first + BATCH]
            acc = [tf.zeros_like(v) for v in net.trainable]
            for k in batch:
                xs = [tf.constant(np.asarray(train[k][s.name], s.dtype)) for s in student.inputs]
                ys = [tf.constant(np.asarray(targets[k][n], np.float32)) for n in names]
                loss, g, mins, maxs = grads(xs, ys)
                total += float(loss)
                acc = [a + gi for a, gi in zip(acc, g, strict=True)]
                if net.ranges:
                    lo = np.minimum(lo, [float(v) for v in mins])
                    hi = np.maximum(hi, [float(v) for v in maxs])
            adam.apply([a / len(batch) for a in acc])
            net.widen(lo, hi)  # never clip what the converter's min/max would hold
        net.calibrate(lo, hi)  # the epoch's min/max over every input, as the converter's
        losses.append(total / max(len(train), 1))
        if on_epoch is not None:
            on_epoch(epoch + 1, losses[-1])
        if not (math.isfinite(losses[-1]) and all(bool(np.isfinite(v.numpy()).all())
                                                  for v in net.variables)):
            diverged = epoch + 1
            break
    else:
        diverged = 0
    notes = [] if int8_ranges is not None else ["float fine-tuning (the artifact is not int8)"]
    notes += [f"the integer output {p.output} distilled on the tensor its arg-max reads, "
              f"{p.teacher} (an index has no gradient)" for p in net.feeds]
    if diverged:  # NaN/Inf weights would fail the export as a bad model: keep the weights
        notes.append(f"the fine-tuning diverged at epoch {diverged} (loss {losses[-1]:.4g}, "
                     "non-finite loss or weights): the weights are left as they were")
    return RecoverResult(
        student if diverged else
        student.with_graph(net.frozen(), note=f"--recover: fine-tuned {len(net.trainable)} "
                                              f"weight tensors for {epochs} epoch(s) by "
                                              "distillation"),
        epochs, seed, len(train), len(net.trainable),
        int(sum(int(np.prod(v.shape)) for v in net.trainable)),
        sum(w.name in net.axes for w in net.weights),
        len(net.ranges), losses, time.perf_counter() - start, notes)


class _Student:
    """The rewritten graph with its weights in variables and, for int8, fake quantisation of
    its kernels (per channel) and of the tensors the int8 file quantises (per tensor, with
    ranges in variables that :meth:`calibrate` moves to what the converter would choose)."""

    def __init__(self, model: Model, int8_ranges: Mapping[str, tuple[float, float]] | None,
                 feeds: Sequence[Any] = ()) -> None:
        import tensorflow as tf

        from rewriter.surgery.unfreeze import find_weights, lift_graph

        self.model = model
        #: distil_targets.Target of the integer outputs: the float tensors their arg-max reads,
        #: fetched instead of the output (as the int8 file has them: after their fake quant)
        self.feeds = list(feeds)
        self.graph_def = _pruned(model)
        self.weights = [w for w in find_weights(self.graph_def)
                        if not _made_by_rule(self.graph_def, w.name)]
        self.axes = _kernel_axes(self.graph_def) if int8_ranges is not None else {}
        g = GraphIndex(self.graph_def)
        self.observed = [n for n in (int8_ranges or {}) if n in g and
                         (int8_ranges or {})[n][1] > (int8_ranges or {})[n][0]]
        quantised, self.range_inputs = _with_fake_quant(self.graph_def, self.observed)
        self.lifted = lift_graph(quantised, self.weights)
        values = {n.name: np.asarray(tf.make_ndarray(n.attr["value"].tensor))
                  for n in self.graph_def.node if n.op == "Const"}
        self.variables = [tf.Variable(values[w.name], trainable=w.trainable, name=f"w{k}")
                          for k, w in enumerate(self.weights)]
        self.train_index = [k for k, v in enumerate(self.variables) if v.trainable]
        self.trainable = [self.variables[k] for k in self.train_index]
        self.ranges = [(tf.Variable(float((int8_ranges or {})[n][0]), trainable=False),
                        tf.Variable(float((int8_ranges or {})[n][1]), trainable=False))
                       for n in self.observed]

    def forward(self, *xs: Any) -> tuple[list[Any], list[Any], list[Any]]:
        """(outputs, weight reads, observed tensors before their fake quantisation); ``reads``
        are the tensors to differentiate by (a tape does not see the ops ``import_graph_def``
        creates; ``tf.gradients`` follows the graph)."""
        import tensorflow as tf

        input_map = dict(zip((s.tensor for s in self.model.inputs), xs, strict=True))
        reads = []
        for w, v in zip(self.weights, self.variables, strict=True):
            read = tf.identity(v)
            reads.append(read)
            input_map[f"{w.name}:0"] = (_fake_quant_kernel(read, self.axes[w.name])
                                        if w.name in self.axes else read)
        for (lo_name, hi_name), (lo, hi) in zip(self.range_inputs, self.ranges, strict=True):
            input_map[f"{lo_name}:0"] = tf.identity(lo)
            input_map[f"{hi_name}:0"] = tf.identity(hi)
        sim = {f"{n}:0": f"{lo[:-len('/min')]}:0"
               for n, (lo, _) in zip(self.observed, self.range_inputs, strict=True)}
        pulled = []
        for o in self.model.outputs:
            feeds = [sim.get(p.student, p.student) for p in self.feeds if p.output == o.name]
            pulled += feeds or [o.tensor]
        wanted = pulled + [f"{n}:0" for n in self.observed]
        got = tf.compat.v1.import_graph_def(self.lifted, input_map=input_map,
                                            return_elements=wanted, name="")
        k = len(pulled)
        return list(got[:k]), reads, list(got[k:])

    def widen(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Widen each range to hold ``[lo, hi]`` (the values seen so far in this epoch)."""
        for (vlo, vhi), a, b in zip(self.ranges, lo, hi, strict=True):
            if np.isfinite(a) and np.isfinite(b):
                vlo.assign(min(float(vlo.numpy()), float(a), 0.0))
                vhi.assign(max(float(vhi.numpy()), float(b), 0.0))

    def calibrate(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Set each range to ``[lo, hi]`` widened to contain 0: what the converter's min/max
        calibration over the same inputs gives (the weights moved during the epoch, so this
        is close to, not exactly, the next export's range)."""
        for (vlo, vhi), a, b in zip(self.ranges, lo, hi, strict=True):
            if np.isfinite(a) and np.isfinite(b) and b > a:
                vlo.assign(min(float(a), 0.0))
                vhi.assign(max(float(b), 0.0))

    def frozen(self) -> Any:
        return _frozen(self.graph_def, self.weights, self.variables)


class NotDistillable(ValueError):
    """An output the distillation cannot pull (an integer output with no float tensor before
    it: :func:`rewriter.tune.distil_targets.distil_targets` says why)."""


def _out(model: Model, target: Any) -> str:
    return next(o.tensor for o in model.outputs if o.name == target.output)


def _made_by_rule(graph_def: Any, name: str) -> bool:
    """Whether a const belongs to a rewrite rule's construction (its provenance attribute, on
    it or on the node reading it): those are the rule's math, not learned weights."""
    from rewriter.rules.base import RULE_ATTR

    g = GraphIndex(graph_def)
    return RULE_ATTR in g[name].attr or any(RULE_ATTR in c.attr for c in g.consumers(name))


def _pruned(model: Model) -> Any:
    index = GraphIndex(model.graph_def)
    index.prune([o.tensor for o in model.outputs] + [i.tensor for i in model.inputs])
    return index.to_graph_def()


def _kernel_axes(graph_def: Any) -> dict[str, str]:
    """Const name -> how it is quantised per channel: ``conv`` (last axis), ``depthwise``
    (the last two axes together), ``matmul`` (last axis, or the first when transposed)."""
    index = GraphIndex(graph_def)
    out: dict[str, str] = {}
    for node in index:
        pos = _KERNEL_OPS.get(node.op)
        if pos is None or pos >= len(node.input):
            continue
        src = index.skip_identity(node.input[pos])
        if src is None or src.op != "Const":
            continue
        if node.op == "MatMul":
            out[src.name] = "matmul_t" if node.attr["transpose_b"].b else "matmul"
        else:
            out[src.name] = "depthwise" if node.op == "DepthwiseConv2dNative" else "conv"
    return out


def _with_fake_quant(graph_def: Any, nodes: Sequence[str]) -> tuple[Any, list[tuple[str, str]]]:
    """``graph_def`` with a FakeQuantWithMinMaxVars after each of ``nodes``, its range read
    from two new scalar placeholders (returned, per node, as (min name, max name)); a Log or
    Sqrt reading it gets a finite gradient (:mod:`rewriter.tune.grad_safe`)."""
    g = GraphIndex(graph_def)
    names = []
    for node in nodes:
        base = g.unique_name(f"{node}/int8_sim")
        lo = g.add(make_node("Placeholder", f"{base}/min", [], {"shape": _scalar()},
                             dtype="float32", dtype_attr="dtype"))
        hi = g.add(make_node("Placeholder", f"{base}/max", [], {"shape": _scalar()},
                             dtype="float32", dtype_attr="dtype"))
        users = [c for c in g.consumers(node)]
        fq = g.add(make_node("FakeQuantWithMinMaxVars", base, [node, lo.name, hi.name],
                             {"num_bits": 8, "narrow_range": False}, dtype=None))
        for consumer in users:
            refs = [fq.name if parse_input(r)[:2] == (node, 0) and not r.startswith("^") else r
                    for r in consumer.input]
            g.set_inputs(consumer, refs)
        names.append((lo.name, hi.name))
    for lo_name, _ in names:  # after every fake quant is in: a Log's own one then reads it
        gradient_safe(g, lo_name[:-len("/min")])
    return g.to_graph_def(), names


def _scalar() -> Any:
    from tensorflow.core.framework import attr_value_pb2, tensor_shape_pb2

    return attr_value_pb2.AttrValue(shape=tensor_shape_pb2.TensorShapeProto())


def _fake_quant_kernel(v: Any, how: str) -> Any:
    """Symmetric int8 per output channel ([-127, 127], scale max|w| / 127), as TFLite does."""
    import tensorflow as tf

    shape = tf.shape(v)
    if how == "depthwise":
        flat = tf.reshape(v, tf.concat([shape[:2], [-1]], 0))
    elif how == "matmul_t":
        flat = tf.transpose(v)
    else:
        flat = v
    bound = tf.stop_gradient(tf.reduce_max(tf.abs(tf.reshape(flat, [-1, tf.shape(flat)[-1]])),
                                           axis=0))
    bound = tf.maximum(bound, 1e-8)
    q = tf.quantization.fake_quant_with_min_max_vars_per_channel(
        flat, -bound, bound, num_bits=8, narrow_range=True)
    if how == "depthwise":
        return tf.reshape(q, shape)
    return tf.transpose(q) if how == "matmul_t" else q


class _Adam:
    """Adam (Kingma and Ba) over a list of variables, each step scaled by the variable's own
    RMS at the start (so a learning rate of 3e-4 moves a kernel and a bias by the same
    fraction of their size, never a small tensor by more than it holds)."""

    def __init__(self, variables: Sequence[Any], lr: float, b1: float = 0.9,
                 b2: float = 0.999, eps: float = 1e-8) -> None:
        import tensorflow as tf

        self.vars, self.lr, self.b1, self.b2, self.eps = list(variables), lr, b1, b2, eps
        self.m = [tf.zeros_like(v) for v in self.vars]
        self.v = [tf.zeros_like(v) for v in self.vars]
        self.size = [max(float(np.sqrt(np.mean(np.square(v.numpy())))), 1e-3)
                     for v in self.vars]
        self.t = 0

    def apply(self, grads: Sequence[Any]) -> None:
        import tensorflow as tf

        self.t += 1
        scale = self.lr * math.sqrt(1 - self.b2 ** self.t) / (1 - self.b1 ** self.t)
        for k, (var, g) in enumerate(zip(self.vars, grads, strict=True)):
            self.m[k] = self.b1 * self.m[k] + (1 - self.b1) * g
            self.v[k] = self.b2 * self.v[k] + (1 - self.b2) * tf.square(g)
            var.assign_sub(scale * self.size[k] * self.m[k] / (tf.sqrt(self.v[k]) + self.eps))


def _frozen(graph_def: Any, weights: Sequence[Any], variables: Sequence[Any]) -> Any:
    """``graph_def`` with each lifted const holding its variable's value."""
    import tensorflow as tf

    from rewriter.ir.graph import GraphDef

    values = {w.name: v.numpy() for w, v in zip(weights, variables, strict=True)}
    out = GraphDef()
    out.CopyFrom(graph_def)
    for node in out.node:
        if node.name in values:
            node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(
                values[node.name].astype(np.dtype(tf.dtypes.as_dtype(
                    node.attr["dtype"].type).as_numpy_dtype))))
    return out


# ----------------------------------------------------------------------------- the job's stage
#: The fewest inputs the distillation never used that the keep/drop decision rests on: with
#: fewer the job cannot tell a gain from noise, and the first artifact stays.
MIN_DECISION_SAMPLES = 8
#: Keep only when the mean per-sample cosine gain exceeds this many standard errors of it
#: (paired: each input run through both artifacts; about a one-sided 98% test).
DECISION_SE = 2.0


@dataclass
class Decision:
    """Keep or drop the fine-tuned artifact, decided on inputs the distillation never used
    (the job's verification samples: the user's --data, or the split held back from the one
    set given, or seeded synthetic inputs disjoint from the training ones). Per input, the
    worst output's score against the original, before and after; kept only when ``n`` >=
    :data:`MIN_DECISION_SAMPLES` and the mean gain exceeds :data:`DECISION_SE` standard
    errors of it (the margin) and is positive. Each output is scored by its own criterion:
    cosine for a float output, the share of equal indices (index agreement) for an integer
    one (``measure`` names which)."""

    source: str
    n: int
    before: float  # mean over the inputs of the worst output's score, first artifact
    after: float  # the same, fine-tuned artifact
    gain: float  # mean per-input gain (after - before)
    standard_error: float
    margin: float  # DECISION_SE x standard_error: what the gain must exceed
    improved: int  # inputs whose score rose
    kept: bool
    why: str
    measure: str = "cosine"

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "samples": self.n, "min_samples": MIN_DECISION_SAMPLES,
                "rule": f"keep when samples >= {MIN_DECISION_SAMPLES} and the mean per-sample "
                        f"{self.measure} gain > {DECISION_SE:g} x its standard error (paired)",
                "measure": self.measure,
                "before": self.before, "after": self.after, "gain": self.gain,
                "standard_error": self.standard_error, "margin": self.margin,
                "improved": self.improved, "kept": self.kept, "why": self.why}


def _per_sample_cosine(ref: np.ndarray, out: np.ndarray, n: int) -> np.ndarray:
    a = np.asarray(ref, np.float64).reshape(n, -1)
    b = np.asarray(out, np.float64).reshape(n, -1)
    dot = np.sum(a * b, axis=1)
    norm = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    exact = np.all(a == b, axis=1)
    cos = np.where(norm > 0, dot / np.where(norm > 0, norm, 1.0), 0.0)
    return np.where(exact, 1.0, np.nan_to_num(cos, nan=-1.0))


def _per_sample_agreement(ref: np.ndarray, out: np.ndarray, n: int) -> np.ndarray:
    """Per sample, the share of indices equal to the reference's (a float index read as
    round(value), as :func:`rewriter.verify.metrics.compare_arrays` reads it)."""
    b = np.asarray(out)
    b = np.rint(b) if np.issubdtype(b.dtype, np.floating) else b
    a = np.asarray(ref, np.float64).reshape(n, -1)
    return np.mean(a == np.asarray(b, np.float64).reshape(n, -1), axis=1)


def _integer(v: np.ndarray) -> bool:
    return bool(np.issubdtype(np.asarray(v).dtype, np.integer))


def _per_sample(ref: np.ndarray, out: np.ndarray, n: int) -> np.ndarray:
    """The output's own criterion per sample: index agreement for an integer output, cosine
    for a float one."""
    return (_per_sample_agreement if _integer(ref) else _per_sample_cosine)(ref, out, n)


def decide(reference: Mapping[str, np.ndarray], before: Mapping[str, np.ndarray] | None,
           after: Mapping[str, np.ndarray] | None, n: int, source: str) -> Decision:
    """:class:`Decision` from the original's, the first artifact's and the fine-tuned
    artifact's outputs on the same ``n`` inputs (stacked on a leading axis)."""
    ints = [_integer(v) for v in reference.values()]
    measure = ("index agreement" if ints and all(ints) else
               "worst-output score (cosine of a float output, index agreement of an integer "
               "one)" if any(ints) else "cosine")
    if after is None or before is None:
        return Decision(source, n, math.nan, math.nan, math.nan, math.nan, math.nan, 0, False,
                        "the fine-tuned artifact did not run", measure)
    cb = np.min([_per_sample(v, before[k], n) for k, v in reference.items()], axis=0)
    ca = np.min([_per_sample(v, after[k], n) for k, v in reference.items()], axis=0)
    d = ca - cb
    gain = float(np.mean(d)) if n else math.nan
    se = float(np.std(d, ddof=1) / math.sqrt(n)) if n > 1 else math.inf
    margin = DECISION_SE * se
    short = "score" if any(ints) and not all(ints) else measure
    fig = (f"mean {short} {float(np.mean(cb)):.5f} -> {float(np.mean(ca)):.5f}, gain "
           f"{gain:+.3g} vs margin {margin:.3g} ({DECISION_SE:g} standard errors), improved on "
           f"{int(np.sum(d > 0))} of {n}")
    if n < MIN_DECISION_SAMPLES:
        kept, why = False, (f"too few inputs to tell: {n} on {source}, at least "
                            f"{MIN_DECISION_SAMPLES} needed ({fig}); give --data with at least "
                            f"{MIN_DECISION_SAMPLES} samples, or at least "
                            f"{4 * MIN_DECISION_SAMPLES} calibration samples and --samples >= "
                            f"{MIN_DECISION_SAMPLES} (a quarter is held back, at most --samples)")
    elif gain > 0 and gain > margin:
        kept, why = True, f"better on {n} inputs of {source} beyond the noise: {fig}"
    else:
        kept, why = False, (f"not better on {n} inputs of {source} beyond the noise: {fig}")
    return Decision(source, n, float(np.mean(cb)), float(np.mean(ca)), gain, se, margin,
                    int(np.sum(d > 0)), kept, why, measure)


@dataclass
class Recovery:
    """``--recover`` in a job: the fine-tuning, and the artifact before and after it on the
    held-back verification samples."""

    result: RecoverResult
    before: Any  # stages.ArtifactRun of the artifact without fine-tuning
    after: Any  # stages.ArtifactRun of the artifact exported from the fine-tuned graph
    float_after: Any  # metrics.Comparison: the fine-tuned float graph vs the original
    held_back: int
    notes: list[str] = field(default_factory=list)
    kept: bool = True  # False: dropped by the decision (not better beyond the noise)
    train_error: tuple[float, float] | None = None  # on the fine-tuning inputs, before/after
    decision: Decision | None = None  # keep or drop, on inputs the distillation never used

    #: how the inputs the decision rests on were chosen (the job's ``basis``)
    split: str = ""

    def to_json(self) -> dict[str, Any]:
        return {**self.result.to_json(), "held_back": self.held_back, "split": self.split,
                "kept": self.kept,
                "decision": self.decision.to_json() if self.decision else None,
                "train_error": list(self.train_error) if self.train_error else None,
                "before": _brief(self.before), "after": _brief(self.after),
                "float_after": _brief_cmp(self.float_after),
                "notes": [*self.result.notes, *self.notes]}

    def describe(self) -> str:
        b, a = _brief(self.before), _brief(self.after)
        flag = "--qat" if self.result.method == "tfmot" else "--recover"
        parts = [f"{flag} ({self.result.epochs} epochs on {self.result.train_samples} "
                 f"samples): on {self.held_back} held-back input(s)"]
        if not self.kept:
            parts[0] += " the fine-tuned artifact was dropped, the first one is kept"
        if self.decision is not None:
            parts.append(("kept: " if self.kept else "dropped: ") + self.decision.why)
        for name in a:
            if a[name].get("index_agreement") is not None and name in b:
                parts.append(f"{name}: index agreement {b[name]['index_agreement']:.5f} -> "
                             f"{a[name]['index_agreement']:.5f}")
                continue
            parts.append(f"{name}: cosine {b[name]['cosine']:.5f} -> {a[name]['cosine']:.5f}, "
                         f"max abs error {b[name]['max_abs_error']:.3g} -> "
                         f"{a[name]['max_abs_error']:.3g}")
        return "; ".join(parts)


def _brief(run: Any) -> dict[str, dict[str, float]]:
    return _brief_cmp(run.comparison) if run is not None else {}


def _brief_cmp(cmp: Any) -> dict[str, dict[str, float]]:
    if cmp is None:
        return {}
    return {o.name: {"cosine": o.cosine, "max_abs_error": o.max_abs_error, "rmse": o.rmse,
                     "max_rel_error": o.max_rel_error,
                     **({"index_agreement": o.index_agreement} if o.integer else {})}
            for o in cmp.outputs}


def float_comparison(reference: Mapping[str, np.ndarray], model: Model,
                     samples: Sequence[Mapping[str, np.ndarray]]) -> Any:
    """The fine-tuned float graph against the original: informative (it is tuned for int8, so
    it no longer equals the original within the rules' bounds)."""
    from rewriter.verify.metrics import compare, stack_samples

    outs = stack_samples([model.run(s) for s in samples])
    cmp = compare(reference, outs, atol=float("inf"), rtol=0.0, samples=len(samples))
    cmp.notes.append("fine-tuned float graph vs original: informative, no pass criterion (it "
                     "is tuned for the quantised artifact)")
    return cmp


def markdown_lines(rec: Mapping[str, Any] | None) -> list[str]:
    """``report["recover"]`` in words for report.md and report.html: what was fine-tuned on, the
    inputs the keep-or-drop decision rests on (how many, how chosen), its rule and margin."""
    if not rec:
        return []
    if rec.get("tried") is False:
        return [f"--recover not run: {rec.get('why')}"]
    flag = "--qat" if rec.get("method") == "tfmot" else "--recover"
    out = [f"{flag}: {rec.get('epochs')} epochs on {rec.get('train_samples')} sample(s); "
           f"decided on {rec.get('held_back')} input(s) it never trained on"
           + (f" ({rec['split']})" if rec.get("split") else "")]
    dec = rec.get("decision") or {}
    if dec:
        out.append(f"rule: {dec.get('rule')}")
        fig = [f"{k} {_fmt(dec.get(k))}" for k in ("before", "after", "gain",
                                                      "standard_error", "margin")]
        measure = dec.get("measure") or "cosine"
        out.append(f"mean {'' if measure.startswith('worst') else 'worst-output '}{measure}: "
                   + ", ".join(fig)
                   + f"; improved on {dec.get('improved')} of {dec.get('samples')}")
        out.append(("kept: " if rec.get("kept") else "dropped: ") + str(dec.get("why")))
    return out


def _fmt(v: Any) -> str:
    return f"{v:.5g}" if isinstance(v, float) else str(v)
