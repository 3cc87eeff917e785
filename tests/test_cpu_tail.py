"""Post-processing the target cannot run (NMS, top-k) is reported as a CPU tail.

The job still exits 1 (the file as exported does not run wholly on the accelerator, and the
tail's outputs are selections that int8 error upstream can change, so they cannot be verified
by closeness), but the report and the summary say that the accelerator part before the tail is
fully placed and give the ``--outputs`` that ends the model there; with it the job passes.
"""

from __future__ import annotations

import json

import pytest

from rewriter.frontends import load_model
from rewriter.targets import load_target
from rewriter.targets.tail import cpu_tail

from .families import detector_with_nms


@pytest.fixture(scope="module")
def nms_v5(tmp_path_factory):
    return detector_with_nms(tmp_path_factory.mktemp("v5") / "det", post="v5")


def test_the_tail_starts_at_nms_and_names_the_tensors_it_reads(nms_v5):
    model = load_model(nms_v5)
    tail = cpu_tail(model, load_target("ethos-u55-128").check_graph(model, "int8"))
    assert tail is not None and tail.ops["NonMaxSuppressionV5"] == 1
    assert tail.outputs == ["selected", "selected_scores"] and tail.kept == []
    assert tail.accelerator_part_ok is True
    # boxes[0] (a slice only NMS reads) belongs to the tail; the boxes themselves do not
    assert tail.ends_at[0] == "StatefulPartitionedCall/boxes_raw:0"
    assert tail.hint.startswith("--outputs StatefulPartitionedCall/boxes_raw,")


def test_a_model_without_post_processing_has_no_tail(tmp_path):
    from rewriter.testing import model_from_function

    model = model_from_function(lambda x: x * 2.0, [(1, 4)])
    assert cpu_tail(model, load_target("edgetpu").check_graph(model, "int8")) is None


def test_job_reports_the_tail_and_its_hint_then_passes_with_it(tmp_path, cli):
    saved = detector_with_nms(tmp_path / "det", post="combined")
    out = tmp_path / "whole"
    code, _, _ = cli("run", saved, "--target", "edgetpu", "-o", out, "-q")
    report = json.loads((out / "report.json").read_text())
    assert code == 1 and report["ok"] is False
    tail = report["cpu_tail"]
    assert tail["ops"]["CombinedNonMaxSuppression"] == 1 and tail["accelerator_part_ok"]
    assert "post-processing tail on the CPU" in report["summary"] and tail["hint"] in \
        report["summary"]
    [nms] = [u for u in report["unsupported_before"] if u["op"] == "CombinedNonMaxSuppression"]
    assert nms["fix"] is None and "CPU tail" in nms["why"]
    # the hint, as printed, ends the model before NMS: everything placed, verified, exit 0
    flag, value = tail["hint"].split(" ", 1)
    cut = tmp_path / "cut"
    code, _, err = cli("run", saved, "--target", "edgetpu", flag, value, "-o", cut, "-q")
    cut_report = json.loads((cut / "report.json").read_text())
    assert code == 0, (err, cut_report["summary"])
    assert "cpu_tail" not in cut_report and cut_report["placement_after"]["cut"] is None


def test_check_json_carries_the_tail(nms_v5, cli):
    code, out, _ = cli("check", nms_v5, "--target", "ethos-u55-128", "--json")
    result = json.loads(out)
    assert code == 1 and result["cpu_tail"]["ops"]["NonMaxSuppressionV5"] == 1
    assert result["cpu_tail"]["accelerator_part_ok"] is True


def test_nms_default_minus_inf_threshold_is_not_a_broken_weight(tmp_path):
    """``tf.image.combined_non_max_suppression`` defaults its score threshold to -inf: a
    parameter of post-processing, not a weight the int8 quantizer reads."""
    from rewriter.export.validate import check_weights

    model = load_model(detector_with_nms(tmp_path / "det", post="combined"))
    assert any(n.op == "CombinedNonMaxSuppression" for n in model.graph_def.node)
    check_weights(model)  # raises UserError for a non-finite weight


def test_no_tail_where_the_exported_file_runs_the_post_processing(nms_v5, tmp_path, cli):
    """ONNX Runtime runs NMS: the graph-level prediction is not reported as a tail."""
    code, _, _ = cli("run", nms_v5, "--target", "onnx", "-o", tmp_path, "-q")
    report = json.loads((tmp_path / "report.json").read_text())
    assert code == 0 and "cpu_tail" not in report


def test_a_keras3_argmax_head_tail_starts_above_its_signed_zero_prologue(tmp_path):
    """Keras 3 ``ops.argmax`` brings Bitcast/BitwiseAnd/Equal/Less/LogicalAnd/SelectV2 ahead of
    the ArgMax; the Edge TPU runs none, and only the arg-max reads them: the tail takes them, and
    ``--outputs`` ends the model at the logits (the convolution), all placed before it."""
    import keras

    from rewriter.testing import model_from_keras

    x = keras.Input((8, 8, 3), batch_size=1)
    logits = keras.layers.Conv2D(4, 1, name="logits")(x)
    model = model_from_keras(keras.Model(x, keras.ops.argmax(logits, axis=-1)))
    tail = cpu_tail(model, load_target("edgetpu").check_graph(model, "int8"))
    assert tail is not None and tail.accelerator_part_ok, tail and tail.to_json()
    assert {"ArgMax", "Bitcast", "SelectV2"} <= set(tail.ops), tail.ops
    [end] = tail.ends_at
    assert "logits" in end and tail.hint == f"--outputs {end.removesuffix(':0')}"
