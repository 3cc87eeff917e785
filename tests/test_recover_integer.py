"""``--recover`` on a model with an integer output (an arg-max index map, ids): the distillation
pulls the float tensor the arg-max reads (the logits), matched in the original and the rewritten
graph, and the keep-or-drop decision judges the integer output by index agreement, never by
the cosine of its class numbers. Before: the distillation subtracted the float target from the
int32 output (TypeError, exit 3). The whole job on the fitted arg-max head is in
``tests/test_family_argmax.py`` (``-m slow``).
"""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.ir.model import Model, Source, TensorSpec

ROWS, FEATURES, CLASSES = 16, 4, 3


def _head(w: np.ndarray, b: np.ndarray, prologue: bool, end: str = "argmax") -> Model:
    """x [16, 4] -> MatMul -> BiasAdd (``logits``) -> [Keras 3's -0.0 select] -> ArgMax
    (``end="cast"``: Cast(Round(logits)), an integer output no arg-max makes)."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (ROWS, FEATURES), name="x")
        logits = tf.nn.bias_add(tf.matmul(x, tf.constant(w, name="w")), tf.constant(b, name="b"),
                                name="logits")
        v = logits
        if prologue:  # what keras.ops.argmax emits on the TensorFlow backend
            neg_zero = tf.logical_and(tf.equal(v, 0.0), tf.less(tf.bitwise.bitwise_and(
                tf.bitcast(v, tf.int32), tf.constant(-2 ** 31, tf.int32)), 0))
            v = tf.where(neg_zero, tf.constant(-np.finfo(np.float32).tiny, tf.float32), v)
        y = (tf.argmax(v, axis=-1, output_type=tf.int32) if end == "argmax"
             else tf.cast(tf.round(v), tf.int32))
        tf.identity(y, name="out")
    return Model(g.as_graph_def(), [TensorSpec("x", "x:0", (ROWS, FEATURES), "float32")],
                 [TensorSpec("argmax", "out:0", (ROWS,), "int32")], Source("<head>", "memory"))


@pytest.fixture(scope="module")
def heads() -> tuple[Model, Model, list[dict[str, np.ndarray]], list[dict[str, np.ndarray]]]:
    """The original (with the prologue) and a student without it whose weights are off by
    noise (as int8 or an approximation leaves them); 32 training and 32 held-back inputs."""
    rng = np.random.default_rng(0)
    w = rng.normal(0, 1, (FEATURES, CLASSES)).astype("f4")
    b = rng.normal(0, 0.2, CLASSES).astype("f4")
    teacher = _head(w, b, prologue=True)
    student = _head(w + rng.normal(0, 0.4, w.shape).astype("f4"), b, prologue=False)
    data = [{"x": rng.normal(0, 1, (ROWS, FEATURES)).astype("f4")} for _ in range(64)]
    return teacher, student, data[:32], data[32:]


def _agreement(a: Model, b: Model, data: list[dict[str, np.ndarray]]) -> float:
    return float(np.mean([np.mean(a.run(s)["argmax"] == b.run(s)["argmax"]) for s in data]))


def test_the_tensor_distilled_for_an_arg_max_is_its_logits_in_both_graphs(heads):
    """Found from the original's output back to its ArgMax, through the select the rule took
    away, to the first float tensor both graphs have: the BiasAdd."""
    from rewriter.tune.distil_targets import Target, cannot_distil, distil_targets

    teacher, student, _, _ = heads
    assert distil_targets(teacher, student) == ([Target("argmax", "logits:0", "logits:0")], None)
    assert cannot_distil(teacher, teacher) is None  # the prologue kept: its select is matched
    assert distil_targets(teacher, teacher)[0][0].teacher.startswith("SelectV2")
    cast = _head(np.eye(FEATURES, CLASSES, dtype="f4"), np.zeros(CLASSES, "f4"), False, "cast")
    why = cannot_distil(cast, cast)
    assert why is not None and why.startswith("the integer output argmax (int32) has no float "
                                              "tensor to distil: it is made by Cast "), why
    assert "not by an arg-max" in why


def test_recover_distils_an_integer_output_on_its_logits(heads):
    """Was a TypeError (float target minus int32 output). 10 epochs pull the student's logits
    towards the original's: the loss (on the logits, over their variance) falls and the indices
    on held-back inputs agree more (measured: loss 0.112 -> 2.6e-5, index agreement 0.758 ->
    1.0 on 512 held-back rows)."""
    from rewriter.tune.recover import recover

    teacher, student, train, held = heads
    before = _agreement(teacher, student, held)
    result = recover(teacher, student, train, epochs=10, seed=0, learning_rate=3e-2)
    after = _agreement(teacher, result.model, held)
    assert result.losses[-1] < result.losses[0] / 100, result.losses
    assert before < 0.8 and after >= 0.99, (before, after)
    assert ("the integer output argmax distilled on the tensor its arg-max reads, logits:0 (an "
            "index has no gradient)") in result.notes


def _decision_case() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray],
                              dict[str, np.ndarray]]:
    """12 samples of 64 indices in 0..3. ``few_far``: one index per sample off by 3 (63/64);
    ``many_near``: three off by 1 (61/64), which keeps the higher cosine of class numbers."""
    ref = (np.arange(12 * 64).reshape(12, 64) % 4).astype(np.int32)
    few_far, many_near = ref.copy(), ref.copy()
    few_far[:, 0] = 3  # 0 -> 3
    many_near[:, [1, 5, 9]] = 2  # 1 -> 2
    return {"m": ref}, {"m": few_far}, {"m": many_near}


def test_keep_or_drop_judges_an_integer_output_by_index_agreement():
    from rewriter.tune.recover import _per_sample_cosine, decide

    ref, few_far, many_near = _decision_case()
    # the cosine of the class numbers prefers many_near: judged by it, the worse file is kept
    assert (_per_sample_cosine(ref["m"], many_near["m"], 12) >
            _per_sample_cosine(ref["m"], few_far["m"], 12)).all()
    worse = decide(ref, few_far, many_near, 12, "d")
    assert not worse.kept and worse.measure == "index agreement"
    assert worse.before == 63 / 64 and worse.after == 61 / 64
    assert worse.why.startswith("not better on 12 inputs of d beyond the noise: mean index "
                                "agreement 0.98438 -> 0.95312"), worse.why
    better = decide(ref, many_near, few_far, 12, "d")
    assert better.kept and better.gain == pytest.approx(2 / 64) and better.improved == 12
    assert "mean per-sample index agreement gain > 2 x" in better.to_json()["rule"]
    # a float index (argmax_reduce_max's) is read as round(value), as the verdict reads it
    assert decide(ref, many_near, {"m": few_far["m"] + 0.3}, 12, "d").after == 63 / 64
    # beside a float output, each is scored by its own criterion, the worst output per input
    y = np.tile([1.0, 0.0], (12, 1))
    mixed = decide({**ref, "y": y}, {**many_near, "y": y}, {**few_far, "y": y}, 12, "d")
    assert mixed.kept and mixed.measure.startswith("worst-output score (cosine of a float")


def test_the_report_says_when_recover_was_not_run_and_why():
    from rewriter.report.build import render_markdown

    md = render_markdown({"ok": True, "target": "tflm", "recover": {
        "tried": False, "why": "the integer output ids (int32) has no float tensor to distil"}})
    assert ("- --recover not run: the integer output ids (int32) has no float tensor to "
            "distil") in md


def test_qat_leaves_an_integer_output_to_recover_s_distillation(heads):
    """TFMOT fits the outputs by mean squared error: on an arg-max output it has no gradient, so
    ``--qat`` says so and the job falls back to ``--recover`` (which distils the logits)."""
    from dataclasses import replace

    from rewriter.tune.qat import QatUnavailable, qat_finetune

    teacher, _, train, _ = heads
    h5 = teacher.with_graph(teacher.graph_def)
    h5.source = replace(h5.source, path="head.h5", format="h5", notes=["loaded with tf_keras"])
    with pytest.raises(QatUnavailable, match="the integer output"):
        qat_finetune(h5, train, 1)
