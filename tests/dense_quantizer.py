"""A small Dense(8) -> middle -> Dense(3) model as the AI Edge Quantizer sees it, for the tests of
the fix-ups its files need (tests/test_mixed_minimum.py, tests/test_mixed_reduce_max.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np


def quantizer(tmp: Path, middle: Callable[[Any], Any], spread: float = 1.0
              ) -> Iterator[tuple[Any, list[dict[str, np.ndarray]], Path]]:
    """``(MixedQuantizer, held-back samples, tmp)`` for ``Input(16) -> Dense(8, "wide") ->
    middle -> Dense(3, "head")`` converted to a float ``.tflite`` (``tmp/float.tflite``); 64
    calibration and 32 held-back samples, normal with standard deviation ``spread`` (seed 0)."""
    import keras
    import tensorflow as tf

    from rewriter.tune.mixed import MixedQuantizer
    from rewriter.verify.runners import LiteRTRunner

    keras.utils.set_random_seed(0)
    inp = keras.Input((16,), batch_size=1)
    wide = keras.layers.Dense(8, name="wide")(inp)
    out = keras.layers.Dense(3, name="head")(middle(wide))
    data = bytes(tf.lite.TFLiteConverter.from_keras_model(keras.Model(inp, out)).convert())
    (tmp / "float.tflite").write_bytes(data)
    name = LiteRTRunner(tmp / "float.tflite").inputs[0].name
    rng = np.random.default_rng(0)
    cal = [{name: rng.normal(0, spread, size=(1, 16)).astype(np.float32)} for _ in range(64)]
    held = [{name: rng.normal(0, spread, size=(1, 16)).astype(np.float32)} for _ in range(32)]
    mq = MixedQuantizer(data, cal)
    yield mq, held, tmp
    mq.close()


def outputs(tmp: Path, data: bytes, held: list[dict[str, np.ndarray]], name: str
            ) -> list[dict[str, np.ndarray]]:
    """The outputs of ``data`` (written as ``tmp/name``) in LiteRT on each held-back sample."""
    from rewriter.verify.runners import LiteRTRunner

    path = tmp / name
    path.write_bytes(data)
    r = LiteRTRunner(path)
    return [r.run(s) for s in held]
