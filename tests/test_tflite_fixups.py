"""Exact post-conversion repairs of int8 ``.tflite`` files, on the model that needs them.

The trained Basic Pitch model (``models/third_party/basic_pitch_nmp``, from its log-CQT on): TF
2.21's converter leaves the ``note`` output's RESHAPE in float behind a DEQUANTIZE (float32
output despite int8 I/O), which cuts the Edge TPU graph there. The repair makes that output int8
with the scale of the tensor it moves; the dequantised outputs equal the unrepaired file's float
outputs bit for bit, and the repaired file is fully placed on the Edge TPU table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
BASIC_PITCH = ROOT / "models" / "third_party" / "basic_pitch_nmp"
CUT = "StatefulPartitionedCall/model_1/normalized_log_1/Reshape_2"


@pytest.fixture(scope="module")
def basic_pitch_int8(tmp_path_factory):
    """(raw converter output, repaired file, export result, samples)."""
    import rewriter.export.tflite_fixups as fixups
    from rewriter.export.tflite import export_tflite
    from rewriter.frontends import load_model
    from rewriter.frontends.options import LoadOptions

    model = load_model(BASIC_PITCH, LoadOptions(inputs=[CUT]))
    name = model.inputs[0].name
    rng = np.random.default_rng(0)
    # a normalised log-CQT is in [0, 1]; smooth fields like the real one
    base = rng.uniform(0, 1, (12, 1, 1, 309)).astype("f4")
    time = np.linspace(0, 1, 172, dtype="f4")[None, None, :, None]
    samples = [{name: np.clip(b * (0.6 + 0.4 * np.sin(6 * time + k)), 0, 1)[0]}
               for k, b in enumerate(base)]
    tmp = tmp_path_factory.mktemp("bp")
    raw_path = tmp / "raw.tflite"
    original = fixups.int8_output_moves
    fixups.int8_output_moves = lambda data: (data, [])  # the converter's own file
    try:
        export_tflite(model, raw_path, quantize="int8", calibration=samples[:8], int8_io=True)
    finally:
        fixups.int8_output_moves = original
    result = export_tflite(model, tmp / "fixed.tflite", quantize="int8",
                           calibration=samples[:8], int8_io=True)
    return raw_path, Path(result.path), result, samples[8:]


def _run(path: Path, feeds: dict) -> dict[str, tuple[np.ndarray, str]]:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(str(path))
    it.allocate_tensors()
    d = it.get_input_details()[0]
    s, z = d["quantization"]
    x = next(iter(feeds.values()))
    it.set_tensor(d["index"], np.clip(np.round(x / s + z), -128, 127).astype(np.int8))
    it.invoke()
    out = {}
    for o in it.get_output_details():
        v = it.get_tensor(o["index"])
        if o["dtype"] != np.float32:
            s2, z2 = o["quantization"]
            v = (v.astype(np.float32) - z2) * np.float32(s2)
        out[o["name"]] = (v, np.dtype(o["dtype"]).name)
    return out


def test_the_converter_leaves_the_note_reshape_in_float(basic_pitch_int8):
    from rewriter.export.tflite import tflite_ops
    from rewriter.targets import load_target

    raw, _, _, samples = basic_pitch_int8
    _, float_ops, _ = tflite_ops(raw.read_bytes())
    assert float_ops == ["RESHAPE"]
    assert sorted(t for _, t in _run(raw, samples[0]).values()) == ["float32", "int8", "int8"]
    cut = load_target("edgetpu").check_artifact(str(raw)).cut
    assert cut is not None and cut["op"] == "DEQUANTIZE"


def test_the_repair_is_exact_and_the_file_fully_placed(basic_pitch_int8):
    from rewriter.export.tflite import tflite_ops
    from rewriter.export.tflite_fixups import int8_output_moves
    from rewriter.targets import load_target

    raw, fixed, result, samples = basic_pitch_int8
    assert len(result.repairs) == 1 and "RESHAPE in float" in result.repairs[0]
    assert result.float_ops == [] and all(i["dtype"] == "int8" for i in result.io)
    assert int8_output_moves(fixed.read_bytes())[1] == []  # nothing left to repair
    ops, float_ops, _ = tflite_ops(fixed.read_bytes())
    assert float_ops == [] and "DEQUANTIZE" not in ops
    for feeds in samples:
        before, after = _run(raw, feeds), _run(fixed, feeds)
        assert before.keys() == after.keys()
        for k in before:
            assert after[k][1] == "int8"
            np.testing.assert_array_equal(after[k][0], before[k][0])
    check = load_target("edgetpu").check_artifact(str(fixed))
    assert check.ok and check.cut is None


def test_a_file_without_the_pattern_is_returned_unchanged(tmp_path):
    """An int8 output RESHAPE the converter did quantise: nothing to repair."""
    import tensorflow as tf

    from rewriter.export.tflite import export_tflite
    from rewriter.export.tflite_fixups import int8_output_moves
    from rewriter.testing import model_from_function

    model = model_from_function(lambda x: tf.reshape(tf.nn.relu(x), [1, 8]), [(1, 2, 4)])
    result = export_tflite(model, tmp_path / "m.tflite", quantize="int8", int8_io=True)
    data = Path(result.path).read_bytes()
    assert result.repairs == [] and int8_output_moves(data) == (data, [])
