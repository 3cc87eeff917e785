"""A REDUCE_MAX the AI Edge Quantizer leaves float is made integer in every plan
(rewriter/tune/mixed.py ``integer_reduce_max``): the quantizer (0.10.0) has no REDUCE_MAX, so its
file holds DEQUANTIZE -> float REDUCE_MAX -> QUANTIZE, 3 CPU ops under Vela (Basic Pitch's
``normalized_log/Max``: every ``--accuracy`` plan had ``cpu_ops 3`` and none was delivered).

The model: Dense(8), then its output less its max over the units (x - max(x)), then Dense(3).
"""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.tune.mixed import float_ops, integer_reduce_max
from tests.dense_quantizer import outputs, quantizer


@pytest.fixture(scope="module")
def max_model(tmp_path_factory):
    import keras

    yield from quantizer(tmp_path_factory.mktemp("reduce_max"),
                         lambda d: d - keras.ops.max(d, axis=-1, keepdims=True))


def test_the_quantizers_float_reduce_max_becomes_integer_with_the_sameoutputs(max_model):
    mq, held, tmp = max_model
    raw, built = mq.build({}, inline=False), mq.build({})
    assert float_ops(raw) == ["REDUCE_MAX"]  # the quantizer's own file: the defect
    assert float_ops(built) == []
    a = outputs(tmp, raw, held, "raw.tflite")
    b = outputs(tmp, built, held, "built.tflite")
    for x, y in zip(a, b):
        for k in x:
            # bound: the QUANTIZE after it requantises in integer arithmetic, at most one step
            # apart; measured: equal on all 32 x 3 outputs
            assert np.abs(x[k].astype(np.int32) - y[k].astype(np.int32)).max() <= 1
    assert sum(np.array_equal(x[k], y[k]) for x, y in zip(a, b) for k in x) == len(a)


def test_a_plan_that_puts_reduce_max_in_float_keeps_it_float(max_model):
    mq, *_ = max_model
    scope = next(op.scope for op in mq.ops if op.op == "REDUCE_MAX")
    assert float_ops(mq.build({scope: "float"})) == ["REDUCE_MAX"]


def test_an_int16_input_is_read_as_int16_only_where_the_target_runs_it(max_model):
    """TFLite Micro's REDUCE_MAX takes int8 only: it reads its int16 input requantised to int8
    (a QUANTIZE, no float island: before, it stayed float and the tflm table counted 3
    unsupported ops in Basic Pitch's delivered plan); Vela reads it as int16."""
    from rewriter.targets.registry import load_target
    from rewriter.tune.mixed import inline_buffers, tensor_dtypes

    mq, held, tmp = max_model
    wide = {op.scope: "16x8" for op in mq.ops if "wide" in op.scope}  # REDUCE_MAX reads int16
    raw = mq.build(wide, inline=False)
    assert float_ops(raw) == ["REDUCE_MAX"]
    narrow = inline_buffers(integer_reduce_max(raw))  # TFLite Micro
    assert float_ops(narrow) == [] and "float32" not in tensor_dtypes(narrow)
    assert float_ops(integer_reduce_max(raw, int16=True)) == []
    path = tmp / "narrow.tflite"
    path.write_bytes(narrow)
    assert load_target("tflm").check_artifact(str(path)).unsupported_summary() == []
    a = outputs(tmp, raw, held, "raw16.tflite")
    b = outputs(tmp, narrow, held, "narrow16.tflite")
    step = _output_scale(path)
    gap = max(float(np.abs(x[k] - y[k]).max()) for x, y in zip(a, b) for k in x)
    assert gap <= step, (gap, step)  # measured: 0.0 on all 32 x 3 outputs


def _output_scale(path):
    from ai_edge_litert.interpreter import Interpreter

    return float(Interpreter(model_path=str(path)).get_output_details()[0]["quantization"][0])


def test_the_int8_reduce_max_of_an_int16_input_runs_in_tflite_micro(max_model):
    from rewriter.verify.tflm import TflmRunner, tflm_available

    if not tflm_available():
        pytest.skip("tflite_micro is not installed")
    mq, held, tmp = max_model
    wide = {op.scope: "16x8" for op in mq.ops if "wide" in op.scope}
    path = tmp / "narrow_tflm.tflite"
    path.write_bytes(mq.build(wide))  # int16_reduce_max=False: TFLite Micro's
    lite = outputs(tmp, path.read_bytes(), held, "narrow_lite.tflite")
    micro = TflmRunner(path).run_many(held)
    gap = max(float(np.abs(x[k] - y[k]).max()) for x, y in zip(lite, micro) for k in x)
    assert gap <= _output_scale(path), gap  # measured: 0.0


def test_the_plan_compiles_for_ethos_u55_all_on_the_npu(max_model):
    from rewriter.targets.vela import run_vela

    mq, held, tmp = max_model
    path = tmp / "vela_in.tflite"
    path.write_bytes(mq.build({}))
    v = run_vela(path, "ethos-u55-128")
    assert v.cpu_ops == 0 and v.npu_ops >= 3, v.stdout[-500:]


def test_a_met_plan_not_delivered_says_why():
    """The Basic Pitch job's line said ``met`` and the job ended 1 with no reason given."""
    from rewriter.job.precision import PrecisionPlan
    from rewriter.tune.plan_search import SearchResult, Trial

    cost = {"size_kib": 223.0, "vela_ms": 217.515, "sram_kib": 12507.6, "cpu_ops": 3}
    int8 = Trial((), {"onset": 0.9898}, dict(cost, cpu_ops=3))
    best = Trial(("a;",) * 107, {"onset": 0.9921}, cost)
    result = SearchResult(0.99, True, best, int8, [int8, best], [])
    line = PrecisionPlan(0.99, result, False, {"cpu_ops": 0}, cost).describe()
    assert "met with 107" in line and "not delivered: Vela runs 3 of its ops on the CPU" in line
    delivered = PrecisionPlan(0.99, result, True, {"cpu_ops": 0}, dict(cost, cpu_ops=0))
    assert "not delivered" not in delivered.describe()
