"""The activation catalogue: every ``keras.activations`` function and what tf_keras emits.

One entry per activation a Keras user can put in a model (Keras 3.15 ``keras.activations``, the
tf_keras 2.x activations whose frozen form differs, and the activation *layers* whose frozen
form differs from the function's): how to build it on a tensor, and a float64 numpy reference.
The catalogue is what the activation docs table (``docs/activations.md``, :mod:`rewriter.
activation_docs`), the activation tests and ``benchmarks/activation_matrix.py`` iterate over,
so none of them keeps its own list.

:func:`activation_net` builds the network the issue's acceptance is measured on: conv ->
activation -> conv -> global average pool -> dense, seeded, and :func:`structured_images`
representative input data (smooth fields with edges, in [-1, 1]).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Activation:
    """One activation: ``build(k, x)`` applies it to tensor ``x`` with Keras module ``k``
    (``keras`` or ``tf_keras``); ``reference`` is the function in float64 numpy (along the last
    axis for the channel-wise ones); ``channelwise`` marks softmax-like functions."""

    name: str
    framework: str  # "keras" | "tf_keras"
    build: Callable[[Any, Any], Any]
    reference: Callable[[np.ndarray], np.ndarray]
    channelwise: bool = False
    note: str = ""

    @property
    def key(self) -> str:
        return self.name if self.framework == "keras" else f"tf_keras.{self.name}"


# ----------------------------------------------------------------------- references (float64)
def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0) + np.log1p(np.exp(-np.abs(x)))


def _elu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0)))


_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _erf(x: np.ndarray) -> np.ndarray:
    return _ERF(np.asarray(x, np.float64))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _sparsemax(x: np.ndarray) -> np.ndarray:
    z = np.sort(x, axis=-1)[..., ::-1]
    k = np.arange(1, x.shape[-1] + 1)
    cums = np.cumsum(z, axis=-1)
    support = 1 + k * z > cums
    kz = support.sum(axis=-1, keepdims=True)
    tau = (np.take_along_axis(cums, kz - 1, axis=-1) - 1) / kz
    return np.maximum(x - tau, 0.0)


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
SHRINK = 0.5  # Keras 3's default threshold of hard_shrink and soft_shrink
THRESHOLD, THRESHOLD_DEFAULT = 0.5, 0.0  # keras.activations.threshold has no defaults

_REF: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "celu": lambda x: np.maximum(x, 0.0) + np.minimum(np.expm1(x), 0.0),
    "elu": _elu,
    "exponential": np.exp,
    "gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
    "gelu_tanh": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2 / math.pi)
                                                    * (x + 0.044715 * x ** 3))),
    "hard_shrink": lambda x: np.where(np.abs(x) > SHRINK, x, 0.0),
    "hard_sigmoid": lambda x: np.clip(x / 6.0 + 0.5, 0.0, 1.0),
    "hard_silu": lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0),
    "hard_tanh": lambda x: np.clip(x, -1.0, 1.0),
    "leaky_relu": lambda x: np.where(x > 0, x, 0.2 * x),
    "linear": lambda x: x,
    "log_sigmoid": lambda x: -_softplus(-x),
    "log_softmax": lambda x: np.log(_softmax(x)),
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "relu": lambda x: np.maximum(x, 0.0),
    "relu6": lambda x: np.clip(x, 0.0, 6.0),
    "selu": lambda x: SELU_SCALE * _elu(x, SELU_ALPHA),
    "sigmoid": _sigmoid,
    "silu": lambda x: x * _sigmoid(x),
    "soft_shrink": lambda x: np.sign(x) * np.maximum(np.abs(x) - SHRINK, 0.0),
    "softmax": _softmax,
    "softplus": _softplus,
    "softsign": lambda x: x / (1.0 + np.abs(x)),
    "sparse_plus": lambda x: np.where(x <= -1, 0.0, np.where(x >= 1, x, (x + 1) ** 2 / 4)),
    "sparse_sigmoid": lambda x: np.clip(0.5 * (x + 1.0), 0.0, 1.0),
    "sparsemax": _sparsemax,
    "squareplus": lambda x: 0.5 * (x + np.sqrt(x * x + 4.0)),
    "tanh": np.tanh,
    "tanh_shrink": lambda x: x - np.tanh(x),
    "threshold": lambda x: np.where(x > THRESHOLD, x, THRESHOLD_DEFAULT),
    "glu": lambda x: x[..., : x.shape[-1] // 2] * _sigmoid(x[..., x.shape[-1] // 2:]),
}


def _fn(name: str, **kwargs: Any) -> Callable[[Any, Any], Any]:
    """The activation function as an ``Activation`` layer (functional models need a layer)."""
    def build(k: Any, x: Any) -> Any:
        fn = getattr(k.activations, name)
        return k.layers.Activation(lambda t: fn(t, **kwargs) if kwargs else fn(t))(x)
    return build


def _halving(name: str) -> Callable[[Any, Any], Any]:
    """A function that halves the last axis (glu), as a Lambda layer that says so."""
    def build(k: Any, x: Any) -> Any:
        fn = getattr(k.activations, name)
        shape = tuple(x.shape[1:-1]) + (x.shape[-1] // 2,)
        return k.layers.Lambda(fn, output_shape=shape)(x)
    return build


def _layer(cls: str, **kwargs: Any) -> Callable[[Any, Any], Any]:
    def build(k: Any, x: Any) -> Any:
        return getattr(k.layers, cls)(**kwargs)(x)
    return build


def _keras3() -> list[Activation]:
    out = []
    for name in ("celu", "elu", "exponential", "glu", "hard_shrink", "hard_sigmoid",
                 "hard_silu", "hard_tanh", "leaky_relu", "linear", "log_sigmoid",
                 "log_softmax", "mish", "relu", "relu6", "selu", "sigmoid", "silu",
                 "soft_shrink", "softmax", "softplus", "softsign", "sparse_plus",
                 "sparse_sigmoid", "sparsemax", "squareplus", "tanh", "tanh_shrink"):
        cw = name in ("glu", "log_softmax", "softmax", "sparsemax")
        build = _fn(name) if name != "glu" else _halving("glu")
        out.append(Activation(name, "keras", build, _REF[name], cw))
    out += [
        Activation("gelu", "keras", _fn("gelu"), _REF["gelu"], note="erf form (erfc in TF)"),
        Activation("gelu_tanh", "keras", _fn("gelu", approximate=True), _REF["gelu_tanh"],
                   note="gelu(approximate=True)"),
        Activation("hard_swish", "keras", _fn("hard_swish"), _REF["hard_silu"],
                   note="alias of hard_silu"),
        Activation("swish", "keras", _fn("swish"), _REF["silu"], note="alias of silu"),
        Activation("threshold", "keras",
                   _fn("threshold", threshold=THRESHOLD, default_value=THRESHOLD_DEFAULT),
                   _REF["threshold"], note=f"threshold={THRESHOLD}, default_value=0"),
        Activation("ELU(alpha=0.5)", "keras", _layer("ELU", alpha=0.5),
                   lambda x: _elu(x, 0.5), note="layer: Select around Elu"),
        Activation("PReLU", "keras",
                   lambda k, x: k.layers.PReLU(alpha_initializer=k.initializers.Constant(0.25))(x),
                   lambda x: np.where(x > 0, x, 0.25 * x), note="layer, alpha 0.25"),
    ]
    return out


def _tf_keras() -> list[Activation]:
    out = []
    for name in ("elu", "exponential", "gelu", "mish", "selu", "softplus", "softsign",
                 "swish"):
        ref = _REF["silu" if name == "swish" else name]
        out.append(Activation(name, "tf_keras", _fn(name), ref))
    out += [
        Activation("hard_sigmoid", "tf_keras", _fn("hard_sigmoid"),
                   lambda x: np.clip(0.2 * x + 0.5, 0.0, 1.0),
                   note="Keras 2 form clip(0.2x + 0.5, 0, 1)"),
        Activation("gelu_tanh", "tf_keras", _fn("gelu", approximate=True), _REF["gelu_tanh"]),
        Activation("ReLU_capped_leaky", "tf_keras",
                   _layer("ReLU", max_value=6.0, negative_slope=0.1, threshold=0.5),
                   lambda x: np.where(x >= 6.0, 6.0, np.where(x > 0.5, x, 0.1 * (x - 0.5))),
                   note="layer ReLU(max_value=6, negative_slope=0.1, threshold=0.5)"),
        Activation("ThresholdedReLU", "tf_keras", _layer("ThresholdedReLU", theta=0.5),
                   lambda x: np.where(x > 0.5, x, 0.0), note="layer, theta=0.5"),
        Activation("ELU(alpha=0.5)", "tf_keras", _layer("ELU", alpha=0.5),
                   lambda x: _elu(x, 0.5)),
    ]
    return out


def catalogue() -> list[Activation]:
    """Every activation, Keras 3 first, in name order within each framework."""
    return (sorted(_keras3(), key=lambda a: a.name.lower())
            + sorted(_tf_keras(), key=lambda a: a.name.lower()))


def get(key: str) -> Activation:
    """The activation named ``key`` (``"selu"`` or ``"tf_keras.hard_sigmoid"``)."""
    for act in catalogue():
        if act.key == key:
            return act
    raise KeyError(f"unknown activation {key!r}; known: {', '.join(a.key for a in catalogue())}")


# ----------------------------------------------------------------------- the test network
NET_INPUT = (16, 16, 3)
NET_CHANNELS = 8


def activation_net(act: Activation, seed: int = 0) -> Any:
    """conv(3x3, 8) -> activation -> conv(3x3, 8) -> global average pool -> dense(10), seeded.

    The first conv's weights are scaled so its outputs span about [-4, 4] on
    :func:`structured_images` (the range where the activations differ from one another).
    """
    k = _keras_module(act.framework)
    rng = np.random.default_rng(seed)
    inp = k.Input(NET_INPUT, batch_size=1)
    conv1 = k.layers.Conv2D(NET_CHANNELS, 3, padding="same")
    y = act.build(k, conv1(inp))
    conv2 = k.layers.Conv2D(NET_CHANNELS, 3, padding="same")
    z = conv2(y)
    z = k.layers.GlobalAveragePooling2D()(z)
    dense = k.layers.Dense(10)
    model = k.Model(inp, dense(z))
    fan_in = 9 * NET_INPUT[2]
    conv1.set_weights([rng.normal(0, 2.0 / math.sqrt(fan_in),
                                  conv1.get_weights()[0].shape).astype("f4"),
                       rng.uniform(-0.5, 0.5, NET_CHANNELS).astype("f4")])
    w2 = conv2.get_weights()
    conv2.set_weights([rng.normal(0, 1.0 / math.sqrt(9 * w2[0].shape[2]),
                                  w2[0].shape).astype("f4"),
                       rng.uniform(-0.2, 0.2, NET_CHANNELS).astype("f4")])
    wd = dense.get_weights()
    dense.set_weights([rng.normal(0, 1.0 / math.sqrt(wd[0].shape[0]), wd[0].shape).astype("f4"),
                       np.zeros(10, "f4")])
    return model


def _keras_module(framework: str) -> Any:
    if framework == "tf_keras":
        import tf_keras

        return tf_keras
    import keras

    return keras


def structured_images(n: int, seed: int, shape: tuple[int, ...] = NET_INPUT) -> np.ndarray:
    """``n`` smooth images with edges in [-1, 1]: a few random low-frequency waves per channel
    plus a bright or dark rectangle, as float32 ``(n, *shape)``."""
    rng = np.random.default_rng(seed)
    h, w, c = shape
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    out = np.zeros((n, h, w, c), np.float64)
    for i in range(n):
        for ch in range(c):
            img = np.zeros((h, w))
            for _ in range(3):
                fx, fy, ph = rng.uniform(0.5, 3.0), rng.uniform(0.5, 3.0), rng.uniform(0, 6.3)
                img += rng.uniform(0.2, 1.0) * np.sin(2 * np.pi * (fx * xx + fy * yy) + ph)
            out[i, ..., ch] = img
        y0, x0 = rng.integers(0, h // 2), rng.integers(0, w // 2)
        out[i, y0:y0 + h // 3, x0:x0 + w // 3, :] += rng.choice([-1.5, 1.5])
    peak = np.max(np.abs(out), axis=(1, 2, 3), keepdims=True)
    return (out / peak).astype(np.float32)
