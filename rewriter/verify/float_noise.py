"""How far a model's own float32 outputs move when its input is rounded differently.

A float file (``--quantize none``: ONNX, float TFLite) computes the same function as the original
in float32, but with other kernels, other summation orders and other fusions. How far two such
evaluations may honestly differ depends on the model: most classifiers agree to 1e-6 of their
output's scale, while a model that takes the log of a long sum (Basic Pitch's CQT front end: a
40,000-tap convolution, then ``log``) moves by 3e-5 of its scale when its input moves by one
float32 step, and TensorFlow itself, run with and without its oneDNN kernels, differs by up to
9.5e-5 there (measured on two of the benchmark's clips: ``TF_ENABLE_ONEDNN_OPTS=0`` against 1).

:func:`noise_floor` measures that sensitivity on the job's own verification samples: each float
input moved by one float32 step (``nextafter``, up or down at random, seeded), the original run
again, and the largest output change kept per output. The float artifact's tolerance is then
at least :data:`NOISE_FACTOR` times it (:meth:`TolerancePolicy.for_artifact`): the one-step
response is a floor, not the whole float32 error of an evaluation (every layer rounds, not only
the input), and TensorFlow against itself measured 2.8x it on Basic Pitch; 8 leaves room for a
second implementation. A model whose outputs do not move stays at the fixed relative tolerance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["NOISE_FACTOR", "noise_floor", "perturbed"]

#: A float artifact may differ from the original by this many times the original's own response
#: to a one-step change of its input.
NOISE_FACTOR = 8.0


def perturbed(sample: Mapping[str, np.ndarray], seed: int = 0) -> dict[str, np.ndarray]:
    """``sample`` with every float element moved one float step (of its own dtype) up or down at
    random; other dtypes (ids, masks) unchanged."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, value in sample.items():
        v = np.asarray(value)
        if np.issubdtype(v.dtype, np.floating):
            direction = np.where(rng.random(v.shape) < 0.5, np.inf, -np.inf).astype(v.dtype)
            v = np.nextafter(v, direction)
        out[name] = v
    return out


def noise_floor(run: Any, samples: Sequence[Mapping[str, np.ndarray]],
                reference: Mapping[str, np.ndarray]) -> dict[str, float]:
    """{output: max |f(x') - f(x)|} over ``samples`` (``x'`` = :func:`perturbed` ``x``), with
    ``reference`` the stacked outputs f(x) and ``run(sample) -> {output: array}`` the original
    model. Non-finite values are left out (a NaN is a mismatch, judged elsewhere); 0 when no
    input is float."""
    floor = dict.fromkeys(reference, 0.0)
    for i, sample in enumerate(samples):
        moved = perturbed(sample, seed=i)
        if all(np.array_equal(moved[k], np.asarray(sample[k])) for k in sample):
            continue
        outs = run(moved)
        for name, ref in reference.items():
            if name not in outs:
                continue
            d = np.abs(np.asarray(outs[name], np.float64).reshape(np.shape(ref[i]))
                       - np.asarray(ref[i], np.float64))
            d = d[np.isfinite(d)]
            floor[name] = max(floor[name], float(d.max(initial=0.0)))
    return floor
