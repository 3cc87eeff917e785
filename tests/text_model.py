"""A small trained text classifier built the way its users build it (issues 28 and 30).

Keras 3, no TextVectorization: integer character ids ``[1, T]`` -> ``Embedding`` -> ``LSTM`` ->
``Dense`` softmax over :data:`CLASSES` classes. The text is synthetic but structured, generated
here (nothing downloaded): each class is a first-order Markov chain over :data:`VOCAB` characters
with its own sparse transition table, so the class is read from which character pairs occur; a
few steps of training reach high accuracy. :func:`build` writes ``text.keras`` with
``calibration.npy`` (training text) and ``data.npy`` (held-back text, other seeds) beside it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

VOCAB, CLASSES, LENGTH = 32, 4, 24


def _chains(seed: int = 0) -> np.ndarray:
    """[class, from, to] transition probabilities: each character has 3 likely successors."""
    rng = np.random.default_rng(seed)
    p = np.full((CLASSES, VOCAB, VOCAB), 0.02 / VOCAB)
    for c in range(CLASSES):
        for a in range(VOCAB):
            p[c, a, rng.choice(VOCAB, 3, replace=False)] += rng.dirichlet(np.ones(3)) * 0.98
    return p / p.sum(-1, keepdims=True)


def texts(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` sequences of ids [n, LENGTH] (int32) and their classes [n]."""
    p, rng = _chains(), np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, n)
    ids = np.empty((n, LENGTH), np.int32)
    ids[:, 0] = rng.integers(0, VOCAB, n)
    for t in range(1, LENGTH):
        for k in range(n):
            ids[k, t] = rng.choice(VOCAB, p=p[labels[k], ids[k, t - 1]])
    return ids, labels


def build(root: Path, train: int = 1024, epochs: int = 4, calibration: int = 64,
          held_back: int = 64) -> Path:
    """Train the classifier; write ``text.keras``, ``calibration.npy`` (training text) and
    ``data.npy`` (held-back text) in ``root``; return the model's path."""
    import keras

    keras.utils.set_random_seed(0)
    x, y = texts(train, seed=1)
    inp = keras.Input((LENGTH,), dtype="int32", name="ids")
    h = keras.layers.Embedding(VOCAB, 16, name="embedding")(inp)
    h = keras.layers.LSTM(32, name="lstm")(h)
    out = keras.layers.Dense(CLASSES, activation="softmax", name="classes")(h)
    model = keras.Model(inp, out)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(x, y, batch_size=64, epochs=epochs, verbose=0)
    root.mkdir(parents=True, exist_ok=True)
    path = root / "text.keras"
    model.save(path)
    np.save(root / "calibration.npy", x[:calibration])
    np.save(root / "data.npy", texts(held_back, seed=2)[0])
    return path
