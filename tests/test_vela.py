"""Vela runs on a real .tflite; its placement is parsed and overrides the op table."""

from __future__ import annotations

import pytest

from rewriter.targets import OpVerdict, load_target
from rewriter.targets.vela import parse_stdout, reconcile, run_vela
from tests.test_artifact import conv_elu_int8  # noqa: F401  (module fixture)

SAMPLE = """Warning: No system configuration specified. Using a default.

Warning (supported operators) operator: DEQUANTIZE, ofm: 'Identity'
Reason: Unsupported opType

Warning (supported operators) operator: QUANTIZE, ofm: 'tfl.quantize'
Reason: Operation has tensor with unsupported DataType Float32 (x)
Feature-map dataTypes must be one of {"INT16", "INT8"}

CPU operators = 2 (1.5%)
NPU operators = 128 (98.5%)
"""


def test_parse_stdout_counts_and_multiline_reasons():
    npu, cpu, ops = parse_stdout(SAMPLE)
    assert (npu, cpu) == (128, 2)
    assert [(o.op, o.ofm) for o in ops] == [("DEQUANTIZE", "Identity"),
                                            ("QUANTIZE", "tfl.quantize")]
    assert ops[0].reasons == ["Unsupported opType"]
    assert ops[1].reasons == ['Operation has tensor with unsupported DataType Float32 (x) '
                              'Feature-map dataTypes must be one of {"INT16", "INT8"}']


def test_run_vela_on_int8_file_places_float_elu_on_cpu(conv_elu_int8, tmp_path):  # noqa: F811
    res = run_vela(conv_elu_int8, "ethos-u55-128", outdir=tmp_path)
    assert res.cpu_ops >= 3 and res.npu_ops >= 2
    assert "ELU" in res.cpu_op_counts()
    assert res.inference_time is not None and res.inference_time > 0
    assert res.output_tflite and res.output_tflite.endswith("_vela.tflite")
    check = load_target("ethos-u55-128").check_artifact(conv_elu_int8)
    assert reconcile(check, res) == []  # table and compiler agree on this model
    assert not check.ok


def test_reconcile_lets_vela_override_and_reports_disagreement(conv_elu_int8):  # noqa: F811
    res = run_vela(conv_elu_int8, "ethos-u55-128")
    check = load_target("ethos-u55-128").check_artifact(conv_elu_int8)
    conv = next(v for v in check.verdicts if v.target_op == "CONV_2D")
    conv.supported, conv.placement, conv.reason = False, "cpu", "forged"
    elu = next(v for v in check.verdicts if v.target_op == "ELU")
    elu.supported, elu.placement, elu.reason = True, "accelerator", None
    diffs = reconcile(check, res)
    assert {(d["op"], d["table"], d["vela"]) for d in diffs} == {
        ("CONV_2D", "unsupported", "npu"), ("ELU", "supported", "cpu")}
    assert conv.supported and not elu.supported and elu.reason.startswith("ELU: Vela: ")


def test_vela_failure_is_a_user_error(tmp_path):
    from rewriter.errors import UserError

    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"\0" * 64)
    with pytest.raises(UserError, match="vela failed"):
        run_vela(bad, "ethos-u55-128")


def test_verdict_json_roundtrip():
    v = OpVerdict("n", "Elu", "ELU", False, "r", "float32", "cpu")
    assert v.to_json()["placement"] == "cpu"


def test_ops_vela_names_none_are_matched_by_their_ofm():
    """Vela 5.2 prints ``operator: None`` for ops its enum lacks (RFFT2D, COMPLEX_ABS of an STFT
    front end); they are CPU ops, never "Mapped"."""
    from rewriter.targets import GraphCheck
    from rewriter.targets.vela import VelaResult

    text = ("Warning (supported operators) operator: None, ofm: 'stft/rfft4'\n"
            "Reason: Unsupported opType\n\nCPU operators = 1 (50%)\nNPU operators = 1 (50%)\n")
    npu, cpu, ops = parse_stdout(text)
    assert (npu, cpu) == (1, 1) and [(o.op, o.ofm) for o in ops] == [("None", "stft/rfft4")]
    check = GraphCheck("ethos-u55-128", "artifact", [
        OpVerdict("#3 stft/rfft4", "RFFT2D", "RFFT2D", True),
        OpVerdict("#4 conv", "CONV_2D", "CONV_2D", True)], True)
    disagreements = reconcile(check, VelaResult("ethos-u55-128", npu, cpu, ops, {}, 0.0))
    assert check.ok is False and check.verdicts[0].placement == "cpu"
    assert "Unsupported opType" in check.verdicts[0].reason
    assert disagreements[0]["op"] == "RFFT2D" and disagreements[0]["vela"] == "cpu"
