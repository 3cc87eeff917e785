"""Estimated latency on Ethos-U: Vela's per-layer cycles for the NPU part, a documented lower
bound for the ops Vela leaves on the host, Vela's --system-config/--memory-mode passed through."""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.errors import UserError
from rewriter.targets import load_target
from rewriter.targets.cost import (
    FLOAT_ELEMENTS_PER_CYCLE,
    INT8_MACS_PER_CYCLE,
    LayerCost,
    _host_cost,
    estimate,
    npu_breakdown,
)
from rewriter.targets.vela import configure, estimate_lines, run_vela
from tests.test_artifact import conv_elu_int8  # noqa: F401  (module fixture)

pytest.importorskip("ethosu.vela")


def _t(shape, dtype=np.int8, name="t"):
    return {"shape": np.array(shape), "dtype": dtype, "name": name}


def test_host_model_counts_macs_and_elements():
    conv = _host_cost("CONV_2D", [_t([1, 8, 8, 16]), _t([32, 3, 3, 16])], [_t([1, 8, 8, 32])])
    assert conv["macs"] == 8 * 8 * 32 * 3 * 3 * 16
    assert conv["cycles"] == conv["macs"] // INT8_MACS_PER_CYCLE
    dw = _host_cost("DEPTHWISE_CONV_2D", [_t([1, 8, 8, 16]), _t([1, 3, 3, 16])],
                    [_t([1, 8, 8, 16])])
    assert dw["macs"] == 8 * 8 * 16 * 9
    elu = _host_cost("ELU", [_t([1, 8, 8, 16], np.float32)], [_t([1, 8, 8, 16], np.float32)])
    assert elu["float"] and elu["macs"] == 0
    assert elu["cycles"] == 8 * 8 * 16 // FLOAT_ELEMENTS_PER_CYCLE
    mean = _host_cost("MEAN", [_t([1, 16, 16, 8]), _t([1], np.int32)], [_t([1, 16, 16, 1])])
    assert mean["elements"] == 16 * 16 * 8  # the input it reads, not the output it writes


def test_npu_breakdown_attributes_rows_to_rules_by_name():
    rows = [LayerCost("Conv2D", "Conv2D", "NPU", 1000, 10, "m/conv/BiasAdd"),
            LayerCost("Mul", "Mul", "NPU", 300, 0, "m/ln/layernorm_decompose/mul"),
            LayerCost("Add", "Add", "NPU", 200, 0, "m/ln/layernorm_decompose/add;m/x")]
    b = npu_breakdown(rows, 1e6, ["layernorm_decompose", "gelu_tanh"])
    assert b["cycles"] == 1500 and b["ms"] == 1.5
    assert b["by_rule"]["layernorm_decompose"]["cycles"] == 500
    assert b["by_rule"]["(no rule)"]["cycles"] == 1000
    assert list(b["by_op"]) == ["Conv2D", "Mul", "Add"]


def test_estimate_on_a_file_vela_splits_between_npu_and_host(conv_elu_int8):  # noqa: F811
    res = run_vela(conv_elu_int8, "ethos-u55-128")
    est = estimate(res, conv_elu_int8)
    assert est is not None and res.layers
    # the per-layer cycles add up to Vela's own total: the same estimate, broken down
    assert est["npu"]["cycles"] == int(float(res.csv["cycles_total"]))
    assert est["npu_ms"] == pytest.approx(res.inference_time * 1e3, rel=1e-3)
    assert est["host"]["ops"] == res.cpu_ops
    assert "ELU" in est["host"]["by_op"] and est["host_ms"] > 0
    assert est["total_ms"] == pytest.approx(est["npu_ms"] + est["host_ms"], abs=1e-3)
    assert est["system_config"] == "Ethos_U55_High_End_Embedded"  # Vela's default
    text = "\n".join(estimate_lines({"estimate": est}))
    assert "NPU" in text and "host" in text and "ELU" in text


def test_system_config_and_memory_mode_reach_vela(conv_elu_int8):  # noqa: F811
    target = load_target("ethos-u55-128")
    configure(target, "Ethos_U55_Deep_Embedded", "Sram_Only")
    res = run_vela(conv_elu_int8, target.vela_config, system_config=target.system_config,
                   memory_mode=target.memory_mode)
    est = estimate(res, conv_elu_int8)
    assert (est["system_config"], est["memory_mode"]) == ("Ethos_U55_Deep_Embedded", "Sram_Only")
    assert est["core_clock_hz"] == 200e6
    default = estimate(run_vela(conv_elu_int8, "ethos-u55-128"), conv_elu_int8)
    assert est["npu_ms"] > default["npu_ms"]  # 200 MHz against the default's 500 MHz


def test_configure_refuses_unknown_names_and_other_targets():
    with pytest.raises(UserError, match="choose one of .*Ethos_U55_Deep_Embedded"):
        configure(load_target("ethos-u55-128"), "Ethos_U55_Nope", None)
    with pytest.raises(UserError, match="Sram_Only"):
        configure(load_target("ethos-u55-128"), None, "Nope")
    with pytest.raises(UserError, match="Ethos-U targets"):
        configure(load_target("edgetpu"), "Ethos_U55_Deep_Embedded", None)


def test_edgetpu_model_counts_ops_before_the_cut_and_their_parameters(conv_elu_int8):  # noqa: F811
    from rewriter.job.stages import check_artifact
    from rewriter.targets.cost import EDGETPU_PARAMETER_CACHE

    verdict = check_artifact(load_target("edgetpu"), conv_elu_int8)
    est = verdict.estimate
    assert verdict.check.cut is not None  # the float ELU cuts the graph
    assert est["ops_on_edgetpu"] == verdict.check.cut["mapped_before"]
    assert est["ops_on_edgetpu"] + est["ops_on_cpu"] == sum(
        c["edgetpu"] + c["cpu"] for c in est["by_op"].values())
    assert est["ops_on_cpu"] >= 1 and est["by_op"]["ELU"]["edgetpu"] == 0
    assert 0 < est["parameter_bytes"] < EDGETPU_PARAMETER_CACHE
    assert est["streamed_bytes_per_inference"] == 0


@pytest.mark.slow  # a whole job and a second export + Vela (176 s on the loaded 2-core machine)
def test_the_job_report_puts_the_plain_converters_file_beside_the_artifact(tmp_path):
    """Ethos-U: the plain file leaves the int8 converter's float ELU to the CPU; the job's
    artifact has none, and the report gives both estimates and the rules' share."""
    from rewriter.job.options import JobOptions
    from rewriter.job.pipeline import run_job
    from rewriter.report.build import build_report, render_markdown
    from rewriter.testing import conv_bn_elu_chain

    job = run_job(conv_bn_elu_chain(1, size=16), load_target("ethos-u55-128"), tmp_path,
                  JobOptions(samples=8, versus_plain=True)).job
    cmp = build_report(job)["versus_plain"]
    mine, plain = cmp["job"], cmp["plain"]
    assert plain["cpu_ops"] >= 1 and plain["host_ms"] > 0
    assert mine["cpu_ops"] == 0 and mine["host_ms"] == 0
    assert mine["npu_ms"] > 0 and plain["npu_ms"] > 0
    assert cmp["total_ratio"] == pytest.approx(mine["total_ms"] / plain["total_ms"], rel=1e-3)
    assert "elu_exact" in mine["by_rule"]
    md = render_markdown(build_report(job))
    assert "beside the plain converter's file" in md and "plain converter's file:" in md


def test_versus_lines_for_the_edge_tpu_and_for_one_file():
    from rewriter.targets.cost import versus, versus_lines

    a = {"ops_on_edgetpu": 10, "ops_on_cpu": 0, "parameter_bytes": 9 * 2**20,
         "streamed_bytes_per_inference": 2**20}
    b = a | {"ops_on_edgetpu": 4, "ops_on_cpu": 6}
    lines = versus_lines(versus(a, b))
    assert lines[0].startswith("job's artifact: 10 ops on the Edge TPU / 0 on the CPU")
    assert "1.00 MiB streamed" in lines[0] and "4 ops on the Edge TPU / 6" in lines[1]
    one = {"npu_ops": 5, "cpu_ops": 0, "npu_ms": 2.0, "host_ms": 0.0, "total_ms": 2.0,
           "by_rule": {}}
    lines = versus_lines(versus(one, one) | {"same_file": True})
    assert "(the same file: no rule applied)" in lines[1] and "total 1.00x" in lines[2]
