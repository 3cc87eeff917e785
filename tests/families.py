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

Sizes are parameters: the default test run uses small ones, ``slow`` tests bigger ones.
"""

from __future__ import annotations

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
