"""Small models of the recurrent and grouped-convolution families, built here, and their data.

Each builder writes one model file the way users ship it (Keras 3 ``.keras``, tf_keras ``.h5``,
a frozen ``.pb`` with a functional ``While``, a TF1 ``dynamic_rnn`` ``.pb``) into a directory and
returns its path; :func:`family_data` gives representative inputs for it (smooth multi-tone
sequences for the recurrent models, spectrogram-like time-frequency fields for the keyword
spotter, structured images for the convolutional ones), one seed for calibration and another
for verification. Weights are the layers' seeded initialisation; nothing is downloaded.
Used by ``tests/test_model_families.py`` and ``benchmarks/model_families.py``.

    from models.families import FAMILIES, build, family_data
    path = build("keras3_lstm", out_dir)
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Family:
    """One model: how to build it, what file it is, what its input looks like."""

    name: str
    title: str
    suffix: str
    shape: tuple[int, ...]  # input shape, batch 1
    data: str  # "sequence" | "spectrogram" | "image"
    value_range: tuple[float, float] = (-1.0, 1.0)
    slow: bool = False


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("keras3_lstm", "Keras 3 LSTM(16)", ".keras", (1, 12, 8), "sequence"),
    Family("keras3_gru_kws", "Keras 3 keyword spotter: conv + 2 stacked GRU(16)", ".keras",
           (1, 49, 10, 1), "spectrogram"),
    Family("keras3_bilstm", "Keras 3 Bidirectional(LSTM(8), return_sequences) + LSTM(8)",
           ".keras", (1, 12, 8), "sequence"),
    Family("tf_keras_lstm", "tf_keras stacked LSTM(16, return_sequences) + LSTM(16)", ".h5",
           (1, 12, 8), "sequence"),
    Family("tf_keras_bigru", "tf_keras Bidirectional(GRU(8), return_sequences) + Dense",
           ".h5", (1, 12, 8), "sequence"),
    Family("graph_while_gru", "frozen .pb, functional While (Keras 3 GRU(16))", ".pb",
           (1, 12, 8), "sequence"),
    Family("tf1_dynamic_rnn_lstm", "frozen TF1 .pb, dynamic_rnn LSTMCell(16) (TensorArray)",
           ".pb", (1, 12, 8), "sequence"),
    Family("tf_keras_grouped_conv", "tf_keras RegNet-like net, grouped 3x3 convs", ".h5",
           (1, 32, 32, 3), "image", (0.0, 255.0)),
    Family("tf_keras_regnetx002", "tf_keras keras.applications RegNetX002 (weights=None)",
           ".h5", (1, 224, 224, 3), "image", (0.0, 255.0), slow=True),
)}


def build(name: str, out_dir: str | os.PathLike) -> Path:
    """Write model ``name`` into ``out_dir`` (once; an existing file is reused)."""
    fam = FAMILIES[name]
    path = Path(out_dir) / f"{name}{fam.suffix}"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        _BUILDERS[name](path)
    return path


# ----------------------------------------------------------------------------- data
def family_data(name: str, n: int, seed: int) -> np.ndarray:
    """``n`` representative inputs for model ``name`` (float32, batch dim 1 each, stacked)."""
    fam = FAMILIES[name]
    rng = np.random.default_rng(seed)
    shape = fam.shape[1:]
    if fam.data == "sequence":
        out = np.stack([_tones(rng, *shape) for _ in range(n)])
    elif fam.data == "spectrogram":
        out = np.stack([_spectrogram(rng, *shape) for _ in range(n)])
    else:
        out = np.stack([_image(rng, *shape) for _ in range(n)])
    lo, hi = fam.value_range
    return (lo + out * (hi - lo)).astype(np.float32)


def _tones(rng: np.random.Generator, steps: int, features: int) -> np.ndarray:
    """A sequence in [0, 1]: per feature a few sinusoids of random frequency and phase."""
    t = np.arange(steps)[:, None]
    x = np.zeros((steps, features))
    for _ in range(3):
        f, ph, a = rng.uniform(0.02, 0.3, features), rng.uniform(0, 6.3, features), rng.uniform(
            0.2, 0.6, features)
        x += a * np.sin(2 * np.pi * f * t + ph)
    x += rng.normal(0, 0.05, x.shape)
    return (x - x.min()) / max(x.max() - x.min(), 1e-6)


def _spectrogram(rng: np.random.Generator, frames: int, bins: int, ch: int) -> np.ndarray:
    """A log-spectrogram-like field in [0, 1]: a few formant tracks drifting over time."""
    t, f = np.meshgrid(np.arange(frames), np.arange(bins), indexing="ij")
    x = rng.uniform(0.0, 0.15, (frames, bins))
    for _ in range(3):
        centre = rng.uniform(0, bins) + rng.uniform(-2, 2) * np.sin(t / rng.uniform(4, 12))
        onset, length = rng.integers(0, frames // 2), rng.integers(frames // 4, frames)
        on = (t >= onset) & (t < onset + length)
        x += on * rng.uniform(0.4, 0.8) * np.exp(-((f - centre) ** 2) / rng.uniform(0.5, 3))
    x = np.log1p(4 * x) / np.log1p(4 * x).max()
    return x[..., None].repeat(ch, axis=-1)


def _image(rng: np.random.Generator, h: int, w: int, c: int) -> np.ndarray:
    """A structured image in [0, 1]: low-frequency fields, blobs and an edge."""
    yy, xx = np.meshgrid(np.linspace(-1, 1, h), np.linspace(-1, 1, w), indexing="ij")
    img = np.zeros((h, w, c))
    for ch in range(c):
        for _ in range(3):
            fx, fy, ph = rng.uniform(0.5, 4), rng.uniform(0.5, 4), rng.uniform(0, 6.3)
            img[..., ch] += rng.uniform(0.1, 0.4) * np.sin(fx * np.pi * xx + fy * np.pi * yy + ph)
        for _ in range(3):
            cx, cy, s = rng.uniform(-1, 1), rng.uniform(-1, 1), rng.uniform(0.1, 0.5)
            img[..., ch] += rng.uniform(-0.8, 0.8) * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2)
                                                          / s**2)
        img[..., ch] += np.where(rng.uniform(-1, 1) * xx + yy > 0, 0.3, -0.3)
    img += rng.normal(0, 0.03, img.shape)
    return (img - img.min()) / max(img.max() - img.min(), 1e-6)


# ----------------------------------------------------------------------------- builders
def _keras3_lstm(path: Path) -> None:
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input(FAMILIES["keras3_lstm"].shape[1:], name="sequence")
    x = keras.layers.LSTM(16)(inp)
    keras.Model(inp, keras.layers.Dense(4)(x)).save(path)


def _keras3_gru_kws(path: Path) -> None:
    import keras

    keras.utils.set_random_seed(0)
    layers = keras.layers
    inp = keras.Input(FAMILIES["keras3_gru_kws"].shape[1:], name="spectrogram")
    x = layers.Conv2D(8, (5, 3), strides=(2, 1), padding="same", activation="relu")(inp)
    x = layers.Reshape((25, 80))(x)
    x = layers.GRU(16, return_sequences=True)(x)
    x = layers.GRU(16)(x)
    keras.Model(inp, layers.Dense(12)(x)).save(path)


def _keras3_bilstm(path: Path) -> None:
    import keras

    keras.utils.set_random_seed(0)
    layers = keras.layers
    inp = keras.Input(FAMILIES["keras3_bilstm"].shape[1:], name="sequence")
    x = layers.Bidirectional(layers.LSTM(8, return_sequences=True))(inp)
    x = layers.LSTM(8)(x)
    keras.Model(inp, layers.Dense(4)(x)).save(path)


def _tf_keras_lstm(path: Path) -> None:
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    layers = tf_keras.layers
    inp = tf_keras.Input(FAMILIES["tf_keras_lstm"].shape[1:], name="sequence")
    x = layers.LSTM(16, return_sequences=True)(inp)
    x = layers.LSTM(16)(x)
    tf_keras.Model(inp, layers.Dense(4)(x)).save(path)


def _tf_keras_bigru(path: Path) -> None:
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    layers = tf_keras.layers
    inp = tf_keras.Input(FAMILIES["tf_keras_bigru"].shape[1:], name="sequence")
    x = layers.Bidirectional(layers.GRU(8, return_sequences=True))(inp)
    x = layers.Flatten()(x)
    tf_keras.Model(inp, layers.Dense(4)(x)).save(path)


def _graph_while_gru(path: Path) -> None:
    import keras
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    keras.utils.set_random_seed(0)
    shape = FAMILIES["graph_while_gru"].shape
    inp = keras.Input(shape[1:], batch_size=1)
    model = keras.Model(inp, keras.layers.Dense(4)(keras.layers.GRU(16)(inp)))
    fn = tf.function(lambda x: model(x, training=False),
                     input_signature=[tf.TensorSpec(shape, tf.float32, name="sequence")])
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function(),
                                               lower_control_flow=False)
    path.write_bytes(frozen.graph.as_graph_def().SerializeToString())


_TF1_SCRIPT = """
import sys
import numpy as np, tensorflow as tf
tf.compat.v1.disable_eager_execution()
tf.compat.v1.disable_control_flow_v2()
tf.compat.v1.set_random_seed(0)
steps, features = int(sys.argv[2]), int(sys.argv[3])
x = tf.compat.v1.placeholder(tf.float32, [1, steps, features], name="sequence")
cell = tf.compat.v1.nn.rnn_cell.LSTMCell(16, initializer=tf.compat.v1.glorot_uniform_initializer(0))
outs, _ = tf.compat.v1.nn.dynamic_rnn(cell, x, dtype=tf.float32)
w = tf.compat.v1.get_variable("w", [16, 4], initializer=tf.compat.v1.glorot_uniform_initializer(1))
y = tf.identity(tf.matmul(outs[:, -1], w), name="logits")
with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    gd = tf.compat.v1.graph_util.convert_variables_to_constants(
        sess, sess.graph.as_graph_def(), ["logits"])
open(sys.argv[1], "wb").write(gd.SerializeToString())
"""


def _tf1_dynamic_rnn_lstm(path: Path) -> None:
    """A TF1 graph (control flow v1, TensorArrays), frozen as TF1 users froze them; built in a
    child process because TF1 RNN cells need tf_keras as Keras (TF_USE_LEGACY_KERAS=1)."""
    shape = FAMILIES["tf1_dynamic_rnn_lstm"].shape
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, "-c", _TF1_SCRIPT, str(path), str(shape[1]), str(shape[2])],
                   check=True, env=env, capture_output=True, timeout=600)


def _tf_keras_grouped_conv(path: Path) -> None:
    """Stem conv, two RegNet X blocks (1x1, grouped 3x3 with group width 8, 1x1, BN, ReLU,
    residual), global pooling, logits."""
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    layers = tf_keras.layers
    inp = tf_keras.Input(FAMILIES["tf_keras_grouped_conv"].shape[1:], name="image")
    x = layers.Rescaling(1 / 255.0)(inp)
    x = layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False)(x)
    x = layers.ReLU()(layers.BatchNormalization()(x))
    for width, stride in ((32, 2), (32, 1)):
        y = layers.Conv2D(width, 1, use_bias=False)(x)
        y = layers.ReLU()(layers.BatchNormalization()(y))
        y = layers.Conv2D(width, 3, strides=stride, padding="same", groups=width // 8,
                          use_bias=False)(y)
        y = layers.ReLU()(layers.BatchNormalization()(y))
        y = layers.BatchNormalization()(layers.Conv2D(width, 1, use_bias=False)(y))
        if stride != 1 or x.shape[-1] != width:
            x = layers.BatchNormalization()(layers.Conv2D(width, 1, strides=stride,
                                                          use_bias=False)(x))
        x = layers.ReLU()(layers.Add()([x, y]))
    x = layers.GlobalAveragePooling2D()(x)
    model = tf_keras.Model(inp, layers.Dense(10)(x))
    _learned_looking_bn(model)
    model.save(path)


def _tf_keras_regnetx002(path: Path) -> None:
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    model = tf_keras.applications.RegNetX002(weights=None, input_shape=(224, 224, 3),
                                             classifier_activation=None)
    _learned_looking_bn(model)
    model.save(path)


def _learned_looking_bn(model) -> None:
    """Seeded BN statistics and affine terms instead of the (0, 1) defaults, so that the
    normalisation does something (untrained BN is the identity and hides int8 behaviour)."""
    rng = np.random.default_rng(0)
    for layer in model.layers:
        if type(layer).__name__ == "BatchNormalization":
            gamma, beta, mean, var = layer.get_weights()
            n = gamma.shape[0]
            layer.set_weights([rng.uniform(0.6, 1.4, n).astype("f4"),
                               rng.normal(0, 0.1, n).astype("f4"),
                               rng.normal(0, 0.2, n).astype("f4"),
                               rng.uniform(0.5, 2.0, n).astype("f4")])


_BUILDERS: dict[str, Callable[[Path], None]] = {
    "keras3_lstm": _keras3_lstm, "keras3_gru_kws": _keras3_gru_kws,
    "keras3_bilstm": _keras3_bilstm, "tf_keras_lstm": _tf_keras_lstm,
    "tf_keras_bigru": _tf_keras_bigru, "graph_while_gru": _graph_while_gru,
    "tf1_dynamic_rnn_lstm": _tf1_dynamic_rnn_lstm,
    "tf_keras_grouped_conv": _tf_keras_grouped_conv,
    "tf_keras_regnetx002": _tf_keras_regnetx002,
}
