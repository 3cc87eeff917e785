"""`rewrite check`, `rewrite targets`, `rewrite docs` from the command line (in-process).

Exit codes of `check`: 0 when the target lacks nothing, 1 when unsupported ops remain, 2 for bad
usage or input. Real architectures: MobileNetV3Small at 96x96 runs by default; EfficientNetB0 and
ConvNeXtTiny are marked slow.
"""

from __future__ import annotations

import json

import pytest

from tests.test_artifact import conv_elu_int8  # noqa: F401  (module fixture)


def _json(out: str) -> dict:
    return json.loads(out)


def test_check_json_on_edgetpu_names_elu_with_reason_and_cut(cli, samples, tmp_path):
    code, out, _ = cli("check", samples["keras"], "--target", "edgetpu", "--json", "-q",
                       "-o", tmp_path / "ex")
    assert code == 1
    res = _json(out)
    assert res["target"] == "edgetpu" and res["ok"] is False and res["level"] == "artifact"
    elu = next(u for u in res["unsupported"] if u["op"] == "ELU")
    assert elu["count"] == 3 and elu["reason"] == "ELU is not supported by Coral Edge TPU"
    assert "fix" in elu
    assert res["cut"]["mapped_before"] >= 1 and res["cut"]["cpu_after"] > 0
    graph_elu = next(u for u in res["graph"]["unsupported"] if u["op"] == "Elu")
    assert graph_elu["target_op"] == "ELU"
    _check_explorer_files(tmp_path / "ex", res)


def _check_explorer_files(out, res: dict) -> None:
    """`check -o`: Model Explorer node data on the plain converter's file and the TF graph."""
    from tests.test_explore import check_overlays

    check_overlays(out, res)


def test_check_on_ethos_u_runs_vela_and_agrees_with_the_table(cli, samples):
    code, out, _ = cli("check", samples["keras"], "--target", "ethos-u55-128", "--json", "-q")
    res = _json(out)
    assert code == 1 and res["vela"]["config"] == "ethos-u55-128"
    # exported as `rewrite run` exports for an int8 accelerator: int8 I/O, so no QUANTIZE /
    # DEQUANTIZE at the edges runs on the CPU; every CPU op is an unsupported one
    assert res["vela"]["cpu_ops"] == sum(u["count"] for u in res["unsupported"])
    assert res["vela_disagreements"] == []
    assert float(res["vela"]["summary"]["inference_time"]) > 0


def test_check_onnx_graph_only_passes_and_prints_the_table(cli, samples):
    code, out, _ = cli("check", samples["keras"], "--target", "onnx", "--graph-only", "-q")
    assert code == 0
    assert "Operator" in out and "Status" in out and "Mapped" in out
    assert "OK: the target runs every op (decided on the graph)" in out


def test_check_a_tflite_file_directly(cli, conv_elu_int8):  # noqa: F811
    code, out, _ = cli("check", conv_elu_int8, "--target", "tflm", "--json", "-q")
    res = _json(out)  # TFLite Micro runs ELU, but not as a float island in an int8 model
    assert code == 1 and res["ok"] is False and res["level"] == "artifact"
    assert res["graph"] is None
    assert "ELU" in {u["op"] for u in res["unsupported"]}
    code, out, _ = cli("check", conv_elu_int8, "--target", "edgetpu", "--json", "-q")
    assert code == 1 and _json(out)["cut"]["op"] == "DEQUANTIZE"


def test_unknown_target_exits_2_with_one_line(cli, samples):
    code, out, err = cli("check", samples["keras"], "--target", "tpu9000")
    assert code == 2 and err.startswith("error: unknown target 'tpu9000'")
    assert "Traceback" not in err


def test_opset_on_tflite_target_exits_2(cli, samples):
    code, _, err = cli("check", samples["keras"], "--target", "edgetpu", "--opset", "13")
    assert code == 2 and "--opset applies to ONNX targets" in err


def test_targets_lists_every_target_with_sources(cli):
    code, out, _ = cli("targets", "--json")
    rows = {r["name"]: r for r in _json(out)}
    assert code == 0
    assert rows["ethos-u55-128"]["vela_config"] == "ethos-u55-128"
    assert rows["onnx"]["opset"] == 17
    assert all(r["sources"] and r["sources"][0].startswith("https://") for r in rows.values())


def test_docs_check_passes_on_the_committed_pages(cli):
    code, out, _ = cli("docs", "--check")
    assert code == 0 and "up to date" in out


# ----------------------------------------------------------------------------- real models
def _save_keras(tmp_path, name: str, size: int):
    import keras

    ctor = {"MobileNetV3Small": lambda: keras.applications.MobileNetV3Small(
                input_shape=(size, size, 3), weights=None, minimalistic=False),
            "EfficientNetB0": lambda: keras.applications.EfficientNetB0(
                input_shape=(size, size, 3), weights=None),
            "ConvNeXtTiny": lambda: keras.applications.ConvNeXtTiny(
                input_shape=(size, size, 3), weights=None)}[name]
    path = tmp_path / f"{name}.keras"
    ctor().save(path)
    return path


@pytest.mark.slow
def test_mobilenetv3small_edgetpu_cut_at_hard_swish(cli, tmp_path):
    path = _save_keras(tmp_path, "MobileNetV3Small", 96)
    code, out, _ = cli("check", path, "--target", "edgetpu", "--json", "-q")
    res = _json(out)
    assert code == 1 and res["cut"]["op"] == "HARD_SWISH"
    assert [u["op"] for u in res["unsupported"]] == ["HARD_SWISH"]
    assert res["graph"]["cut"]["op"] == "HARD_SWISH"  # the graph level predicted it


#: What `check` says on the real architectures (measured; see the issue report). For each
#: (model, target): ok, and ops that must be among the unsupported ones.
EXPECTED = {
    ("MobileNetV3Small", "edgetpu"): (False, {"HARD_SWISH"}),
    ("MobileNetV3Small", "ethos-u55-128"): (True, set()),
    ("MobileNetV3Small", "tflm"): (True, set()),
    ("MobileNetV3Small", "onnx"): (True, set()),
    ("EfficientNetB0", "edgetpu"): (True, set()),
    ("EfficientNetB0", "ethos-u55-128"): (True, set()),
    ("EfficientNetB0", "tflm"): (True, set()),
    ("EfficientNetB0", "onnx"): (True, set()),
    ("ConvNeXtTiny", "edgetpu"): (False, {"GELU", "NEG", "RSQRT", "SQUARED_DIFFERENCE"}),
    ("ConvNeXtTiny", "ethos-u55-128"): (False, {"MEAN", "NEG"}),
    ("ConvNeXtTiny", "tflm"): (False, {"GELU"}),
    ("ConvNeXtTiny", "onnx"): (False, {"Erfc"}),
}
SIZES = {"MobileNetV3Small": 96, "EfficientNetB0": 96, "ConvNeXtTiny": 64}


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    cache: dict[str, object] = {}

    def get(name: str):
        if name not in cache:
            cache[name] = _save_keras(tmp_path_factory.mktemp(name), name, SIZES[name])
        return cache[name]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("name,target", sorted(EXPECTED), ids=lambda v: str(v))
def test_real_architectures_get_the_measured_verdict(cli, saved_models, name, target):
    code, out, _ = cli("check", saved_models(name), "--target", target, "--json", "-q")
    res = _json(out)
    ok, must = EXPECTED[(name, target)]
    assert res["ok"] is ok and code == (0 if ok else 1)
    ops = {u.get("target_op") or u["op"] for u in res["unsupported"]}
    assert must <= ops
    assert all(u["reason"] for u in res["unsupported"])
    if res.get("vela"):
        assert res["vela_disagreements"] == []


def test_check_an_onnx_file_uses_its_opset(cli, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"])], "g", [x], [y])
    path = tmp_path / "gelu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(path))
    code, out, _ = cli("check", path, "--target", "onnx", "--json", "-q")
    assert code == 0 and _json(out)["opset"] == 20
    code, out, _ = cli("check", path, "--target", "onnx", "--opset", "17", "--json", "-q")
    res = _json(out)
    assert code == 1 and res["unsupported"][0]["reason"].startswith("ONNX op Gelu needs opset 20")


def test_check_rknn_refuses_an_op_its_document_does_not_support(cli, tmp_path):
    """tf.reduce_prod exports as ONNX ReduceProd: standard ONNX, "Not Supported" in RKNN's
    op-support document (op_tables/rknn.toml allowed it before it was an allowlist)."""
    import tensorflow as tf

    fn = tf.function(lambda x: tf.reduce_prod(x, axis=-1, keepdims=True) + 1.0)
    graph = fn.get_concrete_function(tf.TensorSpec((1, 8), tf.float32, name="x")).graph
    path = tmp_path / "prod.pb"
    path.write_bytes(graph.as_graph_def().SerializeToString())
    code, out, _ = cli("check", path, "--target", "onnx", "--json", "-q")
    assert code == 0 and _json(out)["ok"] is True
    code, out, _ = cli("check", path, "--target", "rknn", "--json", "-q")
    res = _json(out)
    assert code == 1 and res["ok"] is False
    (prod,) = [u for u in res["unsupported"] if u["op"] == "ReduceProd"]
    assert 'the op-support document lists it as "Not Supported"' in prod["reason"]


def test_a_refused_export_is_not_called_failed_and_the_plans_artifact_is_stated():
    """An LSTM's int8 export is refused before the converter runs (a WHILE crashes TF 2.21's
    calibration): check says the model as given was not exported, not "Export failed", and says
    what ``rewrite run``'s own artifact (unrolled, exported and checked) holds. Measured on a
    Keras 3 LSTM(32) keyword spotter (49x10 -> Dense 12) on edgetpu/ethos-u55-128/tflm."""
    from types import SimpleNamespace

    from tensorflow.core.framework.graph_pb2 import GraphDef

    from rewriter.commands.check import _decide, _print
    from rewriter.export.request import export_error_json, raise_export_error
    from rewriter.export.result import ExportError
    from rewriter.export.tflite import _refuse_loops

    gd = GraphDef()
    gd.node.add(name="lstm/while/LoopCond", op="LoopCond")
    with pytest.raises(ExportError) as refused:
        _refuse_loops(SimpleNamespace(graph_def=gd))
    with pytest.raises(ExportError) as back:  # through the converter worker's JSON
        raise_export_error(export_error_json(refused.value))
    assert refused.value.refused and back.value.refused
    assert not ExportError("TFLite conversion failed: x", format="tflite").to_json()["refused"]
    while_row = {"op": "WHILE", "count": 1, "supported": False, "status": "Operation not "
                 "supported", "reason": "WHILE is not supported"}
    graph = {"ok": False, "unsupported": [{"op": "WHILE", "count": 1, "reason": "WHILE is not "
                                           "supported", "fix": "while_unroll"}],
             "cut": None, "table": [while_row], "ops_on_accelerator": 0, "ops_total": 1,
             "percent_on_accelerator": 0.0}
    plan = {"rules": ["while_unroll"], "unfixable": [], "artifact_ok": True,
            "artifact_unsupported": [], "artifact_error": None}
    result = _decide({"title": "T", "target": "t", "quantize": "int8", "graph": graph,
                      "artifact": None, "plan": plan, "vela": None, "vela_disagreements": [],
                      "export_error": back.value.to_json()}, False)
    lines: list[str] = []
    _print(result, SimpleNamespace(out=lines.append))
    text = "\n".join(lines)
    assert not result["ok"] and "Export failed" not in text, text
    assert "The model as given was not exported (the converter was not run): int8" in text
    assert "its artifact (exported and checked here): the target runs every op" in text
    assert "(decided on the graph (the model as given was not exported))" in text
    plan["artifact_error"] = ExportError("TFLite conversion failed: x", format="tflite").to_json()
    lines.clear()
    _print(result, SimpleNamespace(out=lines.append))
    assert "its artifact's export failed: TFLite conversion failed: x" in "\n".join(lines)
