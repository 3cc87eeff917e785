"""resize_bilinear_as_avg_pool: an integer-factor bilinear downscale (half_pixel_centers, TF2 and
Keras 3's default; or TF1's legacy corners) is a SLICE and AVERAGE_POOL_2Ds of stride <= 3, equal
to TF's ResizeBilinear up to float32 rounding; its int8 file runs on the Ethos-U55 NPU (Vela: 0 CPU
operators) where RESIZE_BILINEAR's downscale goes to the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.resize_bilinear_as_avg_pool import ResizeBilinearAsAvgPool
from rewriter.testing import assert_close_rel, model_from_function, op_types

RULE = ResizeBilinearAsAvgPool()


def _resize(shape, size, half=True, corners=False):
    return model_from_function(lambda x: tf.raw_ops.ResizeBilinear(
        images=x, size=size, half_pixel_centers=half, align_corners=corners), [shape])


@pytest.mark.parametrize("shape,size,half,pools", [
    ((1, 16, 16, 3), (8, 8), True, 1), ((1, 16, 16, 3), (4, 4), True, 2),
    ((1, 12, 18, 3), (4, 3), True, 2), ((1, 24, 24, 3), (3, 3), True, 3),
    ((1, 16, 16, 3), (16, 4), True, 2), ((1, 16, 16, 3), (4, 4), False, 2)])
def test_integer_downscales_are_slices_and_pools_equal_to_tf(shape, size, half, pools):
    model = _resize(shape, size, half)
    result = apply_rules(model, [RULE])
    assert [a.rule for a in result.applied] == ["resize_bilinear_as_avg_pool"]
    assert op_types(result.model) == {"Slice": 1, "AvgPool": pools}
    rng = np.random.default_rng(0)
    for x in (rng.normal(0, 1, shape), rng.uniform(-100, 100, shape)):
        x = x.astype("f4")
        assert_close_rel(result.model.run({"x0": x})["output_0"],
                         model.run({"x0": x})["output_0"], rtol=1e-6)


def test_refusals_say_why():
    cases = [(_resize((1, 10, 10, 3), (2, 2)), "factor 5 is not a product"),
             (_resize((1, 16, 16, 3), (4, 4), half=False, corners=True), "align_corners=True"),
             (_resize((1, 8, 8, 3), (16, 16)), "not an integer-factor downscale"),
             (_resize((1, 16, 16, 3), (6, 6)), "not an integer-factor downscale")]
    for model, reason in cases:
        result = apply_rules(model, [RULE])
        assert result.applied == [] and reason in result.rejected[0].reason, result.rejected


@pytest.mark.slow  # two conversions and two Vela runs: 40 s on the shared machine
def test_int8_file_runs_on_the_ethos_u55_npu(tmp_path):
    pytest.importorskip("ethosu.vela")
    from rewriter.export.tflite import export_tflite
    from rewriter.targets import load_target
    from rewriter.targets.artifact import read_tflite
    from rewriter.targets.vela import run_vela

    model = _resize((1, 16, 16, 8), (4, 4))
    rng = np.random.default_rng(1)
    data = [{"x0": rng.normal(0, 1, (1, 16, 16, 8)).astype("f4")} for _ in range(8)]
    target = load_target("ethos-u55-128")
    before = [v.op for v in target.check_graph(model, "int8").verdicts if not v.supported]
    assert before == ["ResizeBilinear"]  # check predicts Vela's CPU fallback, as measured:
    plain = tmp_path / "plain.tflite"
    export_tflite(model, plain, quantize="int8", calibration=data)
    edges = {"QUANTIZE", "DEQUANTIZE"}  # float I/O here; the job exports int8 I/O
    on_cpu = {c.op for c in run_vela(plain, "ethos-u55-128", tmp_path / "vela_plain").cpu_reasons}
    assert on_cpu - edges == {"RESIZE_BILINEAR"}, on_cpu
    path = tmp_path / "pooled.tflite"
    export_tflite(apply_rules(model, [RULE]).model, path, quantize="int8", calibration=data)
    assert "RESIZE_BILINEAR" not in {f.op for f in read_tflite(path).ops}
    on_cpu = {c.op for c in run_vela(path, "ethos-u55-128", tmp_path / "vela").cpu_reasons}
    assert on_cpu - edges == set(), on_cpu
