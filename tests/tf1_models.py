"""TF1 training graphs saved as TF1 scripts save them (test helper; the library never imports it).

:func:`build_checkpoint` writes a small audio-style CNN trained a few steps with
``tf.compat.v1``: conv + batch norm behind an ``is_training`` tf.cond (fused batch norm in both
branches, moving-average updates in ``UPDATE_OPS``), dropout behind the same flag, labels and
learning-rate placeholders, a sigmoid cross-entropy loss, Adam (slots in the ``.meta``), a loss
summary, a global step and a Saver. :func:`build_estimator_export` writes an Estimator-style
SavedModel whose serving input is a serialized ``tf.Example`` (ParseExample), with the signature
key ``examples`` differing from its placeholder's name and a second Saver in the graph.
Each returns the reference: the graph run by TensorFlow with the flag False.

Run as a script (``python tests/tf1_models.py OUT``) it builds every layout into OUT in a fresh
process, with TF1 control flow (``Switch``/``Merge``, as TF1 wrote it; TF 2 would write ``If``),
so the test process keeps TensorFlow's defaults.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

SHAPE = (16, 16, 1)


def _net(v1, tf, x, training):
    """conv-BN-relu x2, pool, dense, dropout, dense, sigmoid; returns (logits, prediction)."""
    h = x
    for i, c in enumerate((8, 12)):
        with v1.variable_scope(f"block{i}", use_resource=False):
            w = v1.get_variable("kernel", [3, 3, h.shape[-1], c])
            y = tf.nn.conv2d(h, w, 1, "SAME")
            gamma = v1.get_variable("gamma", [c], initializer=v1.ones_initializer())
            beta = v1.get_variable("beta", [c], initializer=v1.zeros_initializer())
            mm = v1.get_variable("moving_mean", [c], initializer=v1.zeros_initializer(),
                                 trainable=False)
            mv = v1.get_variable("moving_variance", [c], initializer=v1.ones_initializer(),
                                 trainable=False)
            if isinstance(training, bool):
                out = v1.nn.fused_batch_norm(y, gamma, beta, mm, mv, is_training=False)[0]
            else:
                out, mean, var = v1.cond(
                    training,
                    lambda y=y, g=gamma, b=beta: v1.nn.fused_batch_norm(y, g, b)[:3],
                    lambda y=y, g=gamma, b=beta, m=mm, v=mv: v1.nn.fused_batch_norm(
                        y, g, b, m, v, is_training=False)[:3])
                momentum = v1.cond(training, lambda: tf.constant(0.1),
                                   lambda: tf.constant(0.0))
                for var_, new in ((mm, mean), (mv, var)):
                    v1.add_to_collection(v1.GraphKeys.UPDATE_OPS,
                                         v1.assign_sub(var_, (var_ - new) * momentum))
            h = tf.nn.relu(out)
    h = tf.reduce_mean(v1.nn.max_pool(h, 2, 2, "VALID"), axis=[1, 2])
    with v1.variable_scope("dense", use_resource=False):
        w = v1.get_variable("kernel", [12, 16])
        b = v1.get_variable("bias", [16], initializer=v1.zeros_initializer())
        h = tf.nn.relu(tf.matmul(h, w) + b)
    if not isinstance(training, bool):
        h = v1.cond(training, lambda: tf.nn.dropout(h, rate=0.5), lambda: tf.identity(h))
    with v1.variable_scope("logits", use_resource=False):
        w = v1.get_variable("kernel", [16, 1])
        b = v1.get_variable("bias", [1], initializer=v1.zeros_initializer())
        logits = tf.matmul(h, w) + b
    return logits, tf.sigmoid(logits, name="predictions")


def _data(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, *SHAPE)).astype(np.float32)
    y = (x.mean(axis=(1, 2, 3)) > 0).astype(np.float32)[:, None]
    return x, y


def build_checkpoint(folder: Path, prefix: str = "model.ckpt", author: str | None = None,
                     steps: int = 20, input_scope: str = "") -> tuple[Path, np.ndarray,
                                                                       np.ndarray]:
    """Train and save; returns (checkpoint directory, calibration inputs, reference outputs).

    ``prefix`` "" saves files named ``.meta``/``.index`` (the empty prefix). ``author`` set:
    the ``checkpoint`` file names that machine's absolute paths, as when a run is published.
    ``input_scope`` puts the input placeholder in a name scope (``model/x``, as TF1 code does).
    """
    import tensorflow as tf

    v1 = tf.compat.v1
    folder.mkdir(parents=True, exist_ok=True)
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        with v1.name_scope(input_scope or None):
            x = v1.placeholder(tf.float32, [None, *SHAPE], name="x")
        labels = v1.placeholder(tf.float32, [None, 1], name="labels")
        lr = v1.placeholder(tf.float32, [], name="learning_rate")
        is_training = v1.placeholder(tf.bool, name="is_training")  # unknown rank, as often
        logits, pred = _net(v1, tf, x, is_training)
        with tf.name_scope("loss"):
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels,
                                                                          logits=logits))
        v1.summary.scalar("loss", loss)
        step = v1.train.get_or_create_global_step()
        with v1.control_dependencies(v1.get_collection(v1.GraphKeys.UPDATE_OPS)):
            train_op = v1.train.AdamOptimizer(lr).minimize(loss, global_step=step)
        summaries = v1.summary.merge_all()
        saver = v1.train.Saver()
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            for i in range(steps):
                xb, yb = _data(i, 8)
                sess.run([train_op, summaries], {x: xb, labels: yb, lr: 0.01,
                                                 is_training: True})
            calib, _ = _data(100, 16)
            ref = sess.run(pred, {x: calib, is_training: False})
            saver.save(sess, str(folder / prefix) if prefix else f"{folder}/", global_step=None)
    if author is not None:
        name = prefix or ""
        (folder / "checkpoint").write_text(
            f'model_checkpoint_path: "{author}/{name}"\n'
            f'all_model_checkpoint_paths: "{author}/{name}"\n')
    return folder, calib, ref


def build_estimator_export(folder: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """An Estimator-style export: serialized tf.Example in, parsed features into the net.

    Trained as a checkpoint first (flag graph), exported from a PREDICT-mode graph (no flag,
    batch norm in inference form) restored from it, as ``Estimator.export_saved_model`` does.
    """
    import tensorflow as tf

    v1 = tf.compat.v1
    ckpt, calib, ref = build_checkpoint(folder / "train")
    graph = tf.Graph()
    with graph.as_default():
        serialized = v1.placeholder(tf.string, [None], name="input_example_tensor")
        features = v1.io.parse_example(serialized, {
            "x": v1.io.FixedLenFeature(list(SHAPE), tf.float32)})
        _, pred = _net(v1, tf, features["x"], False)
        v1.train.Saver(v1.global_variables()[:2], name="warm_start_saver")  # a second Saver
        with v1.Session(graph=graph) as sess:
            v1.train.Saver().restore(sess, str(ckpt / "model.ckpt"))
            sig = v1.saved_model.predict_signature_def({"examples": serialized},
                                                       {"probabilities": pred})
            export = folder / "export"
            if export.exists():
                shutil.rmtree(export)
            builder = v1.saved_model.Builder(str(export))
            builder.add_meta_graph_and_variables(sess, ["serve"],
                                                 signature_def_map={"serving_default": sig})
            builder.save()
    return export, calib, ref


LAYOUTS = ("dir_foreign", "empty_prefix", "plain")


def build_all(out: Path) -> None:
    """Every layout under ``out``, the calibration inputs and the references as .npy files."""
    import tensorflow as tf

    tf.compat.v1.disable_control_flow_v2()
    _, calib, ref = build_checkpoint(out / "plain")
    build_checkpoint(out / "dir_foreign", author="/home/author/experiments/run3",
                     input_scope="model")
    build_checkpoint(out / "empty_prefix", prefix="", author="/home/author/experiments/run4")
    _, _, ref_export = build_estimator_export(out / "estimator")
    np.save(out / "calibration.npy", calib)
    np.save(out / "reference.npy", ref)
    np.save(out / "reference_estimator.npy", ref_export)


if __name__ == "__main__":
    import os
    import sys

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    build_all(Path(sys.argv[1]))
