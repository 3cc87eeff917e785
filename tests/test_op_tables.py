"""The op tables load, are validated, match Vela's own op lists, and their docs are current."""

from __future__ import annotations

import copy

import pytest

from rewriter.errors import UserError
from rewriter.targets import (
    TABLE_DIR,
    list_targets,
    load_target,
    read_table,
    target_from_table,
    target_names,
)


def _edgetpu_data() -> dict:
    return copy.deepcopy(read_table(TABLE_DIR / "edgetpu.toml"))


def test_every_table_loads_with_source_and_version():
    targets = list_targets()
    assert {"edgetpu", "ethos-u55-128", "tflm", "tflite", "gpu", "onnx", "rknn"} <= {
        t.name for t in targets}
    for t in targets:
        assert t.source.startswith("https://"), t.name
        assert t.version and t.artifact in ("tflite", "onnx")


def test_every_vela_accelerator_config_is_a_target():
    from ethosu.vela.architecture_features import Accelerator

    for acc in Accelerator:
        t = load_target(acc.value)
        assert t.vela_config == acc.value


def test_ethos_u_tables_match_vela_supported_ops_report():
    """`vela --supported-ops-report` is the truth; the tables cannot drift from the compiler."""
    from rewriter.targets.vela import supported_ops_report

    report = supported_ops_report()
    u55 = set(report["Ethos-U55 and Ethos-U65"])
    u85 = set(report["Ethos-U85"])
    assert len(u55) > 40 and len(u85) > len(u55)
    assert set(load_target("ethos-u55-128").ops) == u55
    assert set(load_target("ethos-u65-512").ops) == u55
    assert set(load_target("ethos-u85-256").ops) == u85


def test_unknown_constraint_kind_is_rejected_with_the_known_kinds():
    data = _edgetpu_data()
    data["ops"]["CONV_2D"]["stride_rnage"] = [1, 2]
    with pytest.raises(UserError, match=r"\[ops.CONV_2D\]: unknown constraint kind "
                                        r"'stride_rnage' \(known: .*stride_range"):
        target_from_table(data)


def test_unknown_top_level_key_is_rejected():
    data = _edgetpu_data()
    data["partitoning"] = "per-op"
    with pytest.raises(UserError, match="unknown keys \\['partitoning'\\]"):
        target_from_table(data)


def test_bad_constraint_value_type_is_rejected():
    data = _edgetpu_data()
    data["ops"]["SOFTMAX"]["elements_max"] = "16000"
    with pytest.raises(UserError, match="elements_max must be int"):
        target_from_table(data)


def test_bad_enum_value_is_rejected():
    data = _edgetpu_data()
    data["artifact"] = "tflite2"
    with pytest.raises(UserError, match="artifact = 'tflite2' is not one of"):
        target_from_table(data)


def test_onnx_op_availability_follows_the_opset():
    assert not load_target("onnx").has_op("Gelu")
    assert load_target("onnx", opset=20).has_op("Gelu")
    assert load_target("onnx", opset=17).has_op("LayerNormalization")
    assert not load_target("onnx", opset=16).has_op("LayerNormalization")
    assert load_target("onnx", opset=14).has_op("HardSwish")
    assert not load_target("onnx", opset=13).has_op("HardSwish")
    assert load_target("onnx").missing_reason("Gelu").startswith(
        "ONNX op Gelu needs opset 20: target opset is 17")


def test_rknn_is_the_allowlist_of_its_op_support_document():
    """op_tables/rknn.toml lists the 89 ONNX rows of RKNN-Toolkit2's op-support document (2.3.2)
    without "Not Supported", each citing it; the rest of ONNX is refused (it was: every ONNX op
    but 12, so ReduceProd, Range, Not, Sum, Ceil passed)."""
    rknn = load_target("rknn")
    assert len(rknn.ops) == 89 and len(rknn.unsupported) == 96
    assert all(e.source and "RKNNToolKit2_OP_Support-2.3.2.md" in e.source
               for e in rknn.ops.values())
    assert rknn.has_op("Conv") and not rknn.has_op("Neg") and not rknn.has_op("Einsum")
    for op in ("ReduceProd", "Range", "Not", "Sum", "Ceil", "Gelu", "Erfc"):
        assert not rknn.has_op(op), op
    assert load_target("onnx").has_op("Neg") and load_target("onnx").has_op("ReduceProd")
    assert rknn.missing_reason("ReduceProd").startswith(
        "ReduceProd is not supported by Rockchip RKNN-Toolkit2 (ONNX input) (the op-support "
        'document lists it as "Not Supported")')
    # "batchsize: 1" is the batch_one constraint
    for op in ("GRU", "LogSoftmax", "RoiAlign", "Slice", "Softmax", "Tile"):
        assert [c.kind for c in rknn.ops[op].constraints] == ["batch_one"], op
    assert rknn.ops["Softmax"].doc == "batchsize: 1"
    from rewriter.targets.opfacts import OpFacts

    assert rknn.judge(OpFacts("s", "Softmax", input_shape=(1, 10), output_shape=(1, 10))).supported
    bad = rknn.judge(OpFacts("s", "Softmax", input_shape=(2, 10), output_shape=(2, 10)))
    assert not bad.supported and bad.constraint == "batch_one"


def test_tflm_float_only_ops_and_missing_gelu():
    tflm = load_target("tflm")
    for op in ("EXP", "LOG", "SQRT", "SQUARE"):
        dtypes = [c.value for c in tflm.constraints_for(op) if c.kind == "dtypes"]
        assert dtypes == [["float32"]], op
    assert not tflm.has_op("GELU")


def test_tflite_target_has_every_schema_builtin_but_no_flex():
    t = load_target("tflite")
    assert t.has_op("GELU") and t.has_op("CONV_2D")
    assert not t.has_op("FlexErf")


def test_target_names_include_table_configs_once():
    names = target_names()
    assert len(names) == len(set(names))


def test_docs_are_generated_from_the_tables_and_current():
    from rewriter.commands.docs import docs_dir, stale_pages

    assert stale_pages(docs_dir()) == [], "run `rewrite docs` and commit docs/targets/"


def test_docs_check_reports_a_hand_edited_page(tmp_path, cli):
    code, _, _ = cli("docs", "--out", tmp_path)
    assert code == 0 and (tmp_path / "edgetpu.md").is_file()
    page = tmp_path / "edgetpu.md"
    page.write_text(page.read_text().replace("Coral Edge TPU", "Coral TPU"))
    code, out, _ = cli("docs", "--check", "--out", tmp_path)
    assert code == 1 and "stale:" in out and "edgetpu.md" in out


@pytest.mark.parametrize("name,quantize,runs", [("exp", "int8", False), ("exp", "none", True),
                                                ("gelu", "none", False), ("exp", "16x8", False),
                                                ("tanh", "16x8", True)])
def test_tflm_table_agrees_with_the_tflm_interpreter(tmp_path, name, quantize, runs):
    """EXP is float-only and GELU has no kernel in TFLite Micro: the interpreter says so too;
    in 16x8 (float I/O: QUANTIZE to int16, DEQUANTIZE from it) TANH runs and EXP does not."""
    import numpy as np
    import tensorflow as tf

    runtime = pytest.importorskip("tflite_micro.python.tflite_micro.runtime")
    from rewriter.export.tflite import export_tflite
    from tests.test_targets import build_model

    fn = {"exp": tf.exp, "tanh": tf.tanh,
          "gelu": lambda x: (0.5 * x) * tf.math.erfc(-x * 0.7071067811865476)}
    path = tmp_path / "m.tflite"
    cal = [{"x": np.linspace(-1, 1, 8, dtype="float32").reshape(1, 8)}] * 2
    export_tflite(build_model(fn[name], (1, 8)), path, quantize=quantize,
                  calibration=cal if quantize in ("int8", "16x8") else None)
    table_ok = load_target("tflm").check_artifact(str(path)).ok
    try:
        interp = runtime.Interpreter.from_file(str(path))
        interp.set_input(np.zeros((1, 8), np.float32), 0)
        interp.invoke()
        interp_ok = True
    except Exception:  # the TFLM runtime raises a plain RuntimeError on allocation
        interp_ok = False
    assert table_ok == interp_ok == runs


def test_16x8_kernels_are_a_column_of_each_table():
    """Each TFLite table says which ops have a 16x8 kernel (int16 activations): an int16 op
    without one is refused with that reason, the same op in int8 is not; the Edge TPU runs no
    16x8 at all, and says why before anything is loaded."""
    from rewriter.targets.opfacts import OpFacts

    tflm, ethos, lite = (load_target(n) for n in ("tflm", "ethos-u55-128", "tflite"))
    assert tflm.int16_kernel("CONV_2D") and not tflm.int16_kernel("REDUCE_MAX")
    assert ethos.int16_kernel("CONV_2D") and not ethos.int16_kernel("ELU")
    assert lite.int16_kernel("CONV_2D") and not lite.int16_kernel("SQUARED_DIFFERENCE")
    v = tflm.judge(OpFacts("r", "REDUCE_MAX", dtype="int16", out_dtype="int16"))
    assert not v.supported and v.constraint == "int16" and "no 16x8 kernel" in v.reason
    assert tflm.judge(OpFacts("r", "REDUCE_MAX", dtype="int8", out_dtype="int8")).supported
    for name in ("tflm", "ethos-u55-128", "ethos-u85-256", "tflite"):
        assert load_target(name).resolve_quantize("16x8") == "16x8"
    for name, why in (("edgetpu", "8-bit quantized models only"),
                      ("gpu", "lists no 16x8 kernels"), ("onnx", "exports ONNX")):
        with pytest.raises(UserError, match=why):
            load_target(name).resolve_quantize("16x8")


def test_16x8_on_the_edge_tpu_is_refused_before_loading(cli, tmp_path):
    code, _, err = cli(tmp_path / "missing.keras", "--target", "edgetpu", "--quantize", "16x8",
                       "-o", tmp_path / "out")
    assert code == 2 and err.strip().splitlines()[-1] == (
        "error: edgetpu does not run 16x8 (int16 activations, int8 weights): the Edge TPU runs "
        "8-bit quantized models only (every tensor int8/uint8); use --quantize int8, or a "
        "target that runs 16x8 (`rewrite targets` lists them)")
    assert not (tmp_path / "out").exists()


def test_an_int16_table_section_takes_one_of_ops_except_refused():
    data = _edgetpu_data()
    data["int16"] = {"ops": ["ADD"], "refused": "no"}
    with pytest.raises(UserError, match="takes exactly one of ops, except, refused"):
        target_from_table(data)


def test_rules_page_is_op_by_op_beside_the_peers_with_what_only_we_have():
    """docs/targets/rules.md, generated from the rule registry and rule_docs.PEERS: one row per
    TF op a rule removes, our rules (exact/bounded) beside the peers' passes for them; and the
    rules no peer has."""
    from rewriter.report.rule_docs import PEERS, render_rules
    from rewriter.rules import all_rules

    page = render_rules()
    by_op = page.split("## Op by op", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in by_op.splitlines() if line.startswith("| ResizeBilinear |"))
    assert "`resize_bilinear_as_avg_pool` (exact)" in row
    assert "decompose_unsupported_bilinear_resize_pass" in row
    ops = {op for r in all_rules() for op in r.fixes}
    assert len([ln for ln in by_op.splitlines() if ln.startswith("| ") and "---" not in ln]) \
        == len(ops) + 1  # + the header
    ours = page.split("## What we have that they do not", 1)[1].split("\n## ", 1)[0]
    only_ours = {r.name for r in all_rules() if PEERS.get(r.name, ("", "")) == ("", "")}
    assert only_ours and all(f"`{name}`" in ours for name in only_ours)
    assert "`softmax_mask_select`" not in ours  # it has an ExecuTorch counterpart
