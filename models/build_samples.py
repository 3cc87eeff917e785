"""Build the sample models in ``models/`` reproducibly (no downloads).

The network is the one seed 000 describes: conv / batch norm / ELU layers with a skip connection,
here with non-trivial ("learned-looking") batch-norm statistics, then global pooling and a dense
classifier. The same weights are written in every format the front ends read:

* ``convbn_elu.keras``          Keras 3 (unfused batch norm in the frozen graph)
* ``convbn_elu_tfkeras.h5``     tf_keras / Keras 2 HDF5 (``FusedBatchNormV3``)
* ``convbn_elu_savedmodel/``    SavedModel with a ``serving_default`` signature
* ``convbn_elu.pb``             frozen GraphDef (input ``image``, output ``Identity``)
* ``convbn_elu_tf1/model.ckpt`` TF1 checkpoint + ``.meta`` (``tf.nn.batch_normalization``,
  variables under ``model_vars/``, output node ``output``)
* ``calibration.npy``           16 images in [0, 1] for int8 calibration and checks

Run: ``python models/build_samples.py`` (rewrites the files in place; same bytes of weights).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
SHAPE = (32, 32, 3)
CHANNELS = 16
CLASSES = 10
BN_EPS = 1e-3


def make_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic weights with learned-looking batch-norm statistics."""
    rng = np.random.default_rng(seed)
    w: dict[str, np.ndarray] = {}
    cin = SHAPE[-1]
    for i in (1, 2, 3):
        fan_in = 9 * cin
        w[f"conv{i}/kernel"] = rng.normal(0, np.sqrt(2 / fan_in), (3, 3, cin, CHANNELS))
        w[f"conv{i}/bias"] = rng.normal(0, 0.05, CHANNELS)
        w[f"bn{i}/gamma"] = rng.uniform(0.6, 1.6, CHANNELS)
        w[f"bn{i}/beta"] = rng.normal(0.0, 0.3, CHANNELS)
        w[f"bn{i}/moving_mean"] = rng.normal(0.1, 0.4, CHANNELS)
        w[f"bn{i}/moving_variance"] = rng.uniform(0.2, 2.5, CHANNELS)
        cin = CHANNELS
    w["dense/kernel"] = rng.normal(0, np.sqrt(1 / CHANNELS), (CHANNELS, CLASSES))
    w["dense/bias"] = rng.normal(0, 0.05, CLASSES)
    return {k: v.astype(np.float32) for k, v in w.items()}


def build_keras(keras, w: dict[str, np.ndarray]):
    """The network in a Keras API (Keras 3 or tf_keras), weights set from ``w``."""
    L = keras.layers
    inp = keras.Input(SHAPE, name="image")
    x = inp
    feats = []
    for i in (1, 2, 3):
        if i == 3:
            x = L.Add(name="skip")(feats)  # skip connection: block1 + block2
        x = L.Conv2D(CHANNELS, 3, padding="same", name=f"conv{i}")(x)
        x = L.BatchNormalization(epsilon=BN_EPS, name=f"bn{i}")(x)
        x = L.ELU(name=f"elu{i}")(x)
        feats.append(x)
    x = L.GlobalAveragePooling2D(name="pool")(x)
    out = L.Dense(CLASSES, name="logits")(x)
    model = keras.Model(inp, out, name="convbn_elu")
    for i in (1, 2, 3):
        model.get_layer(f"conv{i}").set_weights([w[f"conv{i}/kernel"], w[f"conv{i}/bias"]])
        model.get_layer(f"bn{i}").set_weights([w[f"bn{i}/{k}"] for k in
                                               ("gamma", "beta", "moving_mean",
                                                "moving_variance")])
    model.get_layer("logits").set_weights([w["dense/kernel"], w["dense/bias"]])
    return model


def build_tf1_checkpoint(w: dict[str, np.ndarray], prefix: Path) -> None:
    """The same network as a TF1 graph (seed 000's style) saved as checkpoint + .meta."""
    import tensorflow as tf

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, (None, *SHAPE), name="image")
        feats = []
        with v1.variable_scope("model_vars"):
            for i in (1, 2, 3):
                if i == 3:
                    x = tf.add(feats[0], feats[1], name="skip")
                k = v1.get_variable(f"w{i}", initializer=w[f"conv{i}/kernel"])
                b = v1.get_variable(f"b{i}", initializer=w[f"conv{i}/bias"])
                g = v1.get_variable(f"gamma{i}", initializer=w[f"bn{i}/gamma"])
                be = v1.get_variable(f"beta{i}", initializer=w[f"bn{i}/beta"])
                mm = v1.get_variable(f"mean{i}", initializer=w[f"bn{i}/moving_mean"],
                                     trainable=False)
                mv = v1.get_variable(f"var{i}", initializer=w[f"bn{i}/moving_variance"],
                                     trainable=False)
                x = tf.nn.bias_add(tf.nn.conv2d(x, k, 1, "SAME"), b)
                x = tf.nn.batch_normalization(x, mm, mv, be, g, BN_EPS)
                x = tf.nn.elu(x)
                feats.append(x)
            x = tf.reduce_mean(x, axis=[1, 2])
            dk = v1.get_variable("w_dense", initializer=w["dense/kernel"])
            db = v1.get_variable("b_dense", initializer=w["dense/bias"])
        tf.identity(tf.matmul(x, dk) + db, name="output")
        saver = v1.train.Saver()
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            prefix.parent.mkdir(parents=True, exist_ok=True)
            saver.save(sess, str(prefix))
    # The state file must name the checkpoint relative to its directory, so clones can read it.
    (prefix.parent / "checkpoint").write_text(
        f'model_checkpoint_path: "{prefix.name}"\nall_model_checkpoint_paths: "{prefix.name}"\n')


def main() -> None:
    import keras
    import tensorflow as tf
    import tf_keras
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    w = make_weights()
    model = build_keras(keras, w)
    model.save(HERE / "convbn_elu.keras")
    build_keras(tf_keras, w).save(HERE / "convbn_elu_tfkeras.h5")

    sm = HERE / "convbn_elu_savedmodel"
    shutil.rmtree(sm, ignore_errors=True)
    model.export(str(sm), verbose=False)

    spec = tf.TensorSpec((1, *SHAPE), tf.float32, name="image")
    fn = tf.function(lambda x: model(x, training=False), input_signature=[spec])
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function())
    (HERE / "convbn_elu.pb").write_bytes(frozen.graph.as_graph_def().SerializeToString())

    ck = HERE / "convbn_elu_tf1"
    shutil.rmtree(ck, ignore_errors=True)
    build_tf1_checkpoint(w, ck / "model.ckpt")

    rng = np.random.default_rng(1)
    np.save(HERE / "calibration.npy", rng.uniform(0, 1, (16, *SHAPE)).astype(np.float32))
    print("wrote sample models to", HERE)


if __name__ == "__main__":
    main()
