"""A MINIMUM the AI Edge Quantizer leaves float is made integer in every plan
(rewriter/tune/min_max.py ``integer_minimum``): the quantizer (0.10.0) has no MINIMUM, so its file
holds DEQUANTIZE -> float MINIMUM -> QUANTIZE, 3 CPU ops under Vela (MobileNetV3Large with its
hard swishes unfused: 63 CPU ops in every ``--accuracy`` plan, none delivered on Ethos-U). And the
int16 headroom move (rewriter/tune/headroom.py) requantises the MINIMUM's int16 constant with the
activations it meets.

The model: Dense(8), then the unfused hard swish ``x * min(max(x/6 + 1/2, 0), 1)`` (the rule
hard_swish_unfused's form), then Dense(3).
"""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.tune.mixed import float_ops
from tests.dense_quantizer import outputs, quantizer


@pytest.fixture(scope="module")
def swish_model(tmp_path_factory):
    import keras

    def hard_swish(x):
        return x * keras.ops.minimum(keras.ops.relu(x * (1.0 / 6.0) + 0.5), 1.0)

    yield from quantizer(tmp_path_factory.mktemp("minimum"), hard_swish, spread=3.0)


def _outputs(tmp, data, held, name):
    return np.stack([next(iter(o.values())) for o in outputs(tmp, data, held, name)]
                    ).astype(np.float64)


def _output_scale(data):
    from ai_edge_litert.interpreter import Interpreter

    return float(Interpreter(model_content=data).get_output_details()[0]["quantization"][0])


@pytest.mark.parametrize("precision", ["int8", "16x8"])
def test_the_quantizers_float_minimum_becomes_integer_with_the_same_outputs(swish_model,
                                                                            precision):
    from rewriter.tune.mixed import general_int16_add, inline_buffers

    mq, held, tmp = swish_model
    plan = {op.scope: precision for op in mq.ops}
    raw = general_int16_add(inline_buffers(mq.build(plan, inline=False)))
    built = mq.build(plan)
    assert "MINIMUM" in [op.op for op in mq.ops]
    assert float_ops(raw) == ["MINIMUM"]  # the quantizer's own file: the defect
    assert float_ops(built) == []
    a = _outputs(tmp, raw, held, f"raw_{precision}.tflite")
    b = _outputs(tmp, built, held, f"built_{precision}.tflite")
    # bound: the gate's producer now writes straight at the gate's range (one rounding instead of
    # two) and the head reads that; a few output steps at most. Measured: int8 and 16x8 max
    # 1 step (7 of 96 values moved in each).
    step = _output_scale(built)
    assert np.abs(a - b).max() <= 3 * step, (np.abs(a - b).max(), step)


@pytest.mark.parametrize("precision", ["int8", "16x8"])
def test_the_plan_compiles_for_ethos_u55_all_on_the_npu(swish_model, precision):
    from rewriter.targets.vela import run_vela

    mq, held, tmp = swish_model
    path = tmp / f"vela_{precision}.tflite"
    path.write_bytes(mq.build({op.scope: precision for op in mq.ops}))
    v = run_vela(path, "ethos-u55-128")
    assert v.cpu_ops == 0 and v.npu_ops >= 5, v.stdout[-800:]


def test_int16_headroom_requantises_the_minimums_constant(swish_model):
    """Every int16 activation 4x wider: the MINIMUM's constant 1 must move with its input's
    scale (MINIMUM compares raw integers), else it reads as 4 and the gate never closes."""
    from rewriter.tune.headroom import widen_int16

    mq, held, tmp = swish_model
    built = mq.build({op.scope: "16x8" for op in mq.ops})
    wide = widen_int16(built, 4.0)
    a = _outputs(tmp, built, held, "narrow16.tflite")
    b = _outputs(tmp, wide, held, "wide16.tflite")
    # bound: int16 steps 4x coarser through 3 layers, far below the gate's error at 1 -> 4;
    # measured max |a - b| 2.5e-4 of the output's largest value (the constant left alone: 0.56)
    assert np.abs(a - b).max() <= 1e-2 * np.abs(a).max(), np.abs(a - b).max()
