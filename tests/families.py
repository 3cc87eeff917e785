"""Small models of the families beyond CNN classifiers, built the way their users build them.

* :func:`detector`: an SSD-like detector (Keras 3 or tf_keras): a strided conv backbone, one
  upsampled feature-fusion level (FPN-style ``UpSampling2D`` + add), box and class heads per
  level reshaped to ``[1, anchors, 4]`` / ``[1, anchors, classes]`` and concatenated, sigmoid
  scores.
* :func:`detector_with_nms`: that detector saved as a SavedModel whose serving function ends in
  ``tf.image.combined_non_max_suppression`` (or ``non_max_suppression_v5`` / top-k), as the TF
  detection exporters ship it.
* :func:`audio_saved_model`: a keyword-spotting-style audio model shipped as a SavedModel with
  its spectrogram front end inside (``tf.signal.stft``, magnitude, power, mel matrix, log),
  then a conv stack; the log-mel tensor is named ``logmel`` so ``--inputs`` can start there.

Recurrent and grouped-convolution models are named in :data:`FAMILIES`; :func:`build` writes
one the way users ship it (Keras 3 ``.keras``, tf_keras ``.h5``, a frozen ``.pb`` with a
functional ``While``, a TF1 ``dynamic_rnn`` ``.pb``) and :func:`family_data` gives
representative inputs for it (smooth multi-tone sequences, spectrogram-like fields for the
keyword spotter, structured images for the convolutional ones), one seed for calibration,
another for verification. Weights are the layers' seeded initialisation; nothing is downloaded.

Sizes are parameters: the default test run uses small ones, ``slow`` tests bigger ones.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: The log-mel node of :func:`audio_saved_model` (``--inputs`` starts the model there).
LOGMEL = "logmel"


def detector(size: int = 32, classes: int = 3, anchors: int = 2, width: int = 8,
             legacy: bool = False) -> Any:
    """An SSD-like detector, Keras 3 (or tf_keras when ``legacy``); outputs boxes, scores."""
    if legacy:
        import tf_keras as k
    else:
        import keras as k
    layers = k.layers
    inp = k.Input((size, size, 3), name="image")
    x = layers.Conv2D(width, 3, strides=2, padding="same", activation="relu")(inp)
    c1 = layers.Conv2D(2 * width, 3, strides=2, padding="same", activation="relu")(x)
    c2 = layers.Conv2D(4 * width, 3, strides=2, padding="same", activation="relu")(c1)
    up = layers.UpSampling2D(2)(c2)
    p1 = layers.Add()([layers.Conv2D(2 * width, 1)(up), c1])
    boxes, scores = [], []
    for i, feature in enumerate([p1, c2]):
        b = layers.Conv2D(anchors * 4, 3, padding="same", name=f"box_{i}")(feature)
        c = layers.Conv2D(anchors * classes, 3, padding="same", name=f"cls_{i}")(feature)
        boxes.append(layers.Reshape((-1, 4))(b))
        scores.append(layers.Reshape((-1, classes))(c))
    box = layers.Concatenate(axis=1, name="boxes")(boxes)
    score = layers.Activation("sigmoid", name="scores")(layers.Concatenate(axis=1)(scores))
    return k.Model(inp, [box, score])


def detector_with_nms(path: Path, size: int = 32, post: str = "combined") -> Path:
    """:func:`detector` exported as a SavedModel ending in NMS (``post``: ``combined``,
    ``v5`` or ``topk``); the raw head outputs are the nodes ``boxes_raw``/``scores_raw``."""
    import tensorflow as tf

    model = detector(size)

    class Exported(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        @tf.function(input_signature=[tf.TensorSpec([1, size, size, 3], tf.float32,
                                                    name="image")])
        def serve(self, image: Any) -> dict[str, Any]:
            boxes, scores = self.model(image, training=False)
            boxes = tf.identity(boxes, name="boxes_raw")
            scores = tf.identity(scores, name="scores_raw")
            if post == "topk":
                best, idx = tf.math.top_k(tf.reduce_max(scores, -1), k=10)
                return {"scores": best, "indices": idx}
            if post == "v5":
                sel, sel_scores, _ = tf.raw_ops.NonMaxSuppressionV5(
                    boxes=boxes[0], scores=tf.reduce_max(scores[0], -1), max_output_size=10,
                    iou_threshold=0.5, score_threshold=0.3, soft_nms_sigma=0.0,
                    pad_to_max_output_size=True)
                return {"selected": sel, "selected_scores": sel_scores}
            nms = tf.image.combined_non_max_suppression(
                tf.expand_dims(boxes, 2), scores, max_output_size_per_class=10,
                max_total_size=10)
            return {"detection_boxes": nms.nmsed_boxes, "detection_scores": nms.nmsed_scores}

    obj = Exported()
    tf.saved_model.save(obj, str(path), signatures={"serving_default": obj.serve})
    return path


def audio_saved_model(path: Path, samples: int = 2000, frame: int = 128, step: int = 64,
                      mels: int = 16, classes: int = 4, seed: int = 0) -> Path:
    """A SavedModel: waveform [1, samples] -> stft -> |.|^2 -> mel -> log -> conv stack.

    The conv stack is a Keras 3 model; the front end is ``tf.signal`` inside the serving
    function, as keyword-spotting tutorials write it.
    """
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    frames = (samples - frame) // step + 1
    conv = keras.Sequential([
        keras.Input((frames, mels, 1)),
        keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(classes),
    ])
    mel = tf.signal.linear_to_mel_weight_matrix(mels, frame // 2 + 1, 8000, 20.0, 4000.0)

    class Audio(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = conv
            self.mel = tf.constant(mel)

        @tf.function(input_signature=[tf.TensorSpec([1, samples], tf.float32,
                                                    name="waveform")])
        def serve(self, waveform: Any) -> dict[str, Any]:
            power = tf.math.square(tf.abs(tf.signal.stft(waveform, frame, step)))
            logmel = tf.math.log(tf.matmul(power, self.mel) + 1e-6, name=LOGMEL)
            return {"logits": self.conv(tf.expand_dims(logmel, -1))}

    obj = Audio()
    tf.saved_model.save(obj, str(path), signatures={"serving_default": obj.serve})
    return path


def waveforms(n: int, samples: int = 2000, seed: int = 0) -> np.ndarray:
    """``n`` keyword-like clips: a few tones with an envelope and noise, in [-1, 1]."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / 8000.0
    out = np.zeros((n, 1, samples), np.float32)
    for i in range(n):
        f = rng.uniform(200, 2500, 3)
        env = np.exp(-((t - rng.uniform(0.05, 0.2)) ** 2) / 0.005)
        sig = sum(np.sin(2 * np.pi * fi * t) for fi in f) * env / 3
        out[i, 0] = np.clip(sig + rng.normal(0, 0.02, samples), -1, 1)
    return out


def transformer_encoder(tokens: int = 16, dim: int = 32, heads: int = 2, mlp: int = 64,
                        classes: int = 4, legacy: bool = False, epsilon: float = 1e-6,
                        seed: int = 0) -> Any:
    """A small transformer encoder block (Keras 3, or tf_keras when ``legacy``):
    MultiHeadAttention + residual + LayerNormalization, a GELU MLP + residual +
    LayerNormalization, mean over tokens, a linear classifier. Batch 1, [tokens, dim] input."""
    if legacy:
        import tf_keras as k
    else:
        import keras as k
    layers = k.layers
    k.utils.set_random_seed(seed)
    inp = k.Input((tokens, dim), batch_size=1, name="embeddings")
    att = layers.MultiHeadAttention(num_heads=heads, key_dim=dim // heads)(inp, inp)
    x = layers.LayerNormalization(epsilon=epsilon)(layers.Add()([inp, att]))
    f = layers.Dense(mlp, activation="gelu")(x)
    x = layers.LayerNormalization(epsilon=epsilon)(layers.Add()([x, layers.Dense(dim)(f)]))
    out = layers.Dense(classes)(layers.GlobalAveragePooling1D()(x))
    return k.Model(inp, out)


def token_embeddings(n: int, tokens: int = 16, dim: int = 32, vocab: int = 64,
                     seed: int = 0) -> np.ndarray:
    """Representative encoder inputs: sequences of ``tokens`` ids drawn from a vocabulary,
    looked up in one fixed random embedding table (N(0, 1)) plus sinusoidal positions, as an
    embedding layer in front of the encoder gives them. ``seed`` picks the sequences only."""
    table = np.random.default_rng(1234).normal(0, 1, (vocab, dim))
    pos = np.arange(tokens)[:, None] / np.power(10000.0, np.arange(0, dim, 2) / dim)[None]
    positions = np.zeros((tokens, dim))
    positions[:, 0::2], positions[:, 1::2] = np.sin(pos), np.cos(pos)
    ids = np.random.default_rng(seed).integers(0, vocab, (n, tokens))
    return (table[ids] + positions[None]).astype(np.float32)

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
def _keras_layers(path: Path, name: str, stack: Callable[[Any], list], head: int = 4,
                  legacy: bool = False) -> None:
    """Input (named by the family's data), the ``stack(layers)`` layers in order, a Dense head;
    Keras 3 or tf_keras (``legacy``), seeded, saved to ``path``."""
    if legacy:
        import tf_keras as k
    else:
        import keras as k
    k.utils.set_random_seed(0)
    fam = FAMILIES[name]
    x = inp = k.Input(fam.shape[1:], name=fam.data)
    for layer in stack(k.layers):
        x = layer(x)
    k.Model(inp, k.layers.Dense(head)(x)).save(path)


def _keras3_lstm(path: Path) -> None:
    _keras_layers(path, "keras3_lstm", lambda L: [L.LSTM(16)])


def _keras3_gru_kws(path: Path) -> None:
    _keras_layers(path, "keras3_gru_kws", lambda L: [
        L.Conv2D(8, (5, 3), strides=(2, 1), padding="same", activation="relu"),
        L.Reshape((25, 80)), L.GRU(16, return_sequences=True), L.GRU(16)], head=12)


def _keras3_bilstm(path: Path) -> None:
    _keras_layers(path, "keras3_bilstm", lambda L: [
        L.Bidirectional(L.LSTM(8, return_sequences=True)), L.LSTM(8)])


def _tf_keras_lstm(path: Path) -> None:
    _keras_layers(path, "tf_keras_lstm", lambda L: [
        L.LSTM(16, return_sequences=True), L.LSTM(16)], legacy=True)


def _tf_keras_bigru(path: Path) -> None:
    _keras_layers(path, "tf_keras_bigru", lambda L: [
        L.Bidirectional(L.GRU(8, return_sequences=True)), L.Flatten()], legacy=True)


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
