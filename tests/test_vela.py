"""Vela runs on a real .tflite; its placement is parsed and overrides the op table. Vela as the
user configures it (issue 31): ``--optimise``, ``--arena-cache-size`` and a user's own
``vela.ini`` reach Vela (its summary CSV and console say so), are recorded, and bad values exit 2
with one ``error:`` line; an Ethos-U package's SRAM figure is Vela's, with its source."""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.errors import UserError
from rewriter.targets import OpVerdict, load_target
from rewriter.targets.vela import VelaSettings, configure, parse_stdout, reconcile, run_vela
from tests.test_artifact import conv_elu_int8  # noqa: F401  (module fixture)

from .conftest import SAMPLES

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


#: A board of the user's own: names that exist in this file only, a 100 MHz clock.
USER_INI = """\
[System_Config.My_Board_100MHz]
core_clock=100e6
axi0_port=Sram
axi1_port=OffChipFlash
Sram_clock_scale=1.0
Sram_burst_length=32
Sram_read_latency=32
Sram_write_latency=32
OffChipFlash_clock_scale=0.125
OffChipFlash_burst_length=128
OffChipFlash_read_latency=64
OffChipFlash_write_latency=64

[Memory_Mode.My_Shared]
const_mem_area=Axi1
arena_mem_area=Axi0
cache_mem_area=Axi0
"""


@pytest.fixture
def user_ini(tmp_path):
    path = tmp_path / "board.ini"
    path.write_text(USER_INI)
    return path


def test_a_users_vela_ini_reaches_vela_and_is_recorded(conv_elu_int8, user_ini):  # noqa: F811
    target = load_target("ethos-u55-128")
    configure(target, None, None, config_file=str(user_ini))  # the file's only sections
    assert target.vela_settings == VelaSettings("My_Board_100MHz", "My_Shared",
                                                config_file=str(user_ini.resolve()))
    res = run_vela(conv_elu_int8, target.vela_config, settings=target.vela_settings)
    # Vela's own summary names the user's sections and the file's clock
    assert res.csv["system_config"] == "My_Board_100MHz"
    assert res.csv["memory_mode"] == "My_Shared"
    assert float(res.csv["core_clock"]) == 100e6
    record = res.to_json()
    assert record["settings"]["config_file"] == str(user_ini.resolve())
    assert record["command"].startswith("vela m.tflite --accelerator-config ethos-u55-128 "
                                        f"--config {user_ini.resolve()} --system-config "
                                        "My_Board_100MHz --memory-mode My_Shared")


def test_optimise_and_arena_cache_size_reach_vela(conv_elu_int8):  # noqa: F811
    res = run_vela(conv_elu_int8, "ethos-u55-128",
                   settings=VelaSettings(optimise="Size", arena_cache_size=16384))
    # Vela answers both: it warns that Size ignores the cache size in Shared_Sram, and its
    # summary states the cache size given (in KiB)
    assert ("For SRAM Only and Shared SRAM memory modes with --optimise=Size, "
            "--arena-cache-size is ignored") in res.stdout
    assert float(res.csv["arena_cache_size"]) * 1024 == 16384
    assert "--optimise Size --arena-cache-size 16384" in res.to_json()["command"]
    assert res.to_json()["settings"]["optimise"] == "Size"


def test_configure_checks_the_users_file(user_ini, tmp_path):
    target = load_target("ethos-u55-128")
    with pytest.raises(UserError, match=r"--system-config Ethos_U55_High_End_Embedded: not in "
                                        r"board.ini; choose one of My_Board_100MHz"):
        configure(target, "Ethos_U55_High_End_Embedded", None, config_file=str(user_ini))
    two = tmp_path / "two.ini"
    two.write_text(USER_INI + "\n[Memory_Mode.Other]\nconst_mem_area=Axi1\n")
    with pytest.raises(UserError, match=r"name one of its Memory_Mode sections with "
                                        r"--memory-mode \(it has: My_Shared, Other\)"):
        configure(target, None, None, config_file=str(two))
    configure(target, None, "Other", config_file=str(two))
    assert target.vela_settings.memory_mode == "Other"
    bad = tmp_path / "bad.ini"
    bad.write_text("no section header\n")
    with pytest.raises(UserError, match="not a Vela configuration file"):
        configure(target, None, None, config_file=str(bad))
    txt = tmp_path / "board.txt"
    txt.write_text(USER_INI)
    with pytest.raises(UserError, match=r"\*\.ini only"):
        configure(target, None, None, config_file=str(txt))


@pytest.mark.parametrize(("target", "flags", "message"), [
    ("ethos-u55-128", ["--optimise", "Fast"], "argument --optimise: invalid choice: 'Fast'"),
    ("ethos-u55-128", ["--arena-cache-size", "16k"], "'16k' is not a whole number of bytes"),
    ("ethos-u55-128", ["--arena-cache-size", "0"], "--arena-cache-size 0: give a positive"),
    ("ethos-u55-128", ["--vela-config", "nope.ini"], "--vela-config nope.ini: no such file"),
    ("ethos-u55-128", ["--system-config", "Nope"], "--system-config Nope: not in Vela's"),
    ("tflm", ["--optimise", "Size"], "--optimise apply to Ethos-U targets (Vela); tflm has no "
                                     "Vela: drop --optimise"),
])
def test_bad_vela_settings_exit_2_with_one_error_line(cli, tmp_path, target, flags, message):
    code, _, err = cli(SAMPLES["keras"], "--target", target, *flags, "-o", tmp_path / "o")
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert not (tmp_path / "o").exists()


def test_an_ethos_u_package_states_vela_s_sram_and_explains_an_overrun(
        conv_elu_int8, user_ini, tmp_path):  # noqa: F811
    """The package of a Vela file (no job: the module's small int8 file): the arena is Vela's
    sram_memory_used, its source names the user's system config; a budget below it explains
    itself with the tensors live at the peak and what would reduce them."""
    from rewriter.export.micro import measure, write_package

    target = load_target("ethos-u55-128")
    configure(target, None, None, config_file=str(user_ini))
    vela = run_vela(conv_elu_int8, target.vela_config, tmp_path / "vela",
                    settings=target.vela_settings)
    pkg = measure(target.name, conv_elu_int8, vela)
    assert pkg.arena_bytes == round(float(vela.csv["sram_memory_used"]) * 1024) > 0
    assert "Vela's summary: sram_memory_used" in pkg.arena_source
    assert "My_Board_100MHz" in pkg.arena_source and "My_Shared" in pkg.arena_source
    assert pkg.model_file == vela.output_tflite and pkg.ops[-1] == "AddEthosU"
    pkg.sram_budget, pkg.flash_budget = 1024, 64
    pkg.explain(conv_elu_int8, target.name, None)
    memory = pkg.memory_json()
    assert memory["vela"]["used"]["system_config"] == "My_Board_100MHz"
    assert memory["vela"]["settings"]["config_file"] == str(user_ini.resolve())
    sram, flash = memory["over_budget_lines"]
    assert sram.startswith(memory["over_budget"][0] + "; at op ")
    # the peak: CONV_2D's 1x8x8x8 int8 output (512 bytes) is the largest tensor live anywhere
    live = memory["advice"]["sram"]["largest"]
    assert live[0]["bytes"] == max(t["bytes"] for t in live) and live[0]["bytes"] >= 512
    assert "would reduce it: a smaller input ('serving_default_x:0' 1x16x16x3 float32" in sram
    assert "--optimise Size" in sram
    assert flash.startswith(memory["over_budget"][1] + "; largest weights: '")
    weights = memory["advice"]["flash"]["largest"]
    assert weights[0]["shape"] == [8, 3, 3, 3] and weights[0]["bytes"] == 216
    write_package(pkg, tmp_path)
    arena_h = (tmp_path / "deploy" / "arena.h").read_text()
    assert f"constexpr int kTensorArenaNeeded = {pkg.arena_bytes};" in arena_h
    assert "resolver.AddEthosU()" in (tmp_path / "deploy" / "op_resolver.h").read_text()
    assert "CO_PROCESSOR=ethos_u microlite" in (tmp_path / "deploy" / "README.md").read_text()


@pytest.mark.slow
def test_optimise_size_lowers_vela_s_sram_on_a_weight_heavy_model(tmp_path):
    """16x16x16 input, 3x3 convs of 64, 128, 128 channels (226 KiB of weights): Vela 5.2 plans
    173 KiB of SRAM with Performance (weights buffered), 54 KiB with Size."""
    import tensorflow as tf

    from rewriter.export.tflite import export_tflite
    from tests.test_targets import _w, build_model

    def fn(x):
        y = x
        for c in (64, 128, 128):
            y = tf.nn.relu(tf.nn.conv2d(y, _w(3, 3, y.shape[-1], c), 1, "SAME"))
        return tf.reduce_mean(y, axis=[1, 2])

    path = tmp_path / "heavy.tflite"
    cal = [{"x": np.random.default_rng(i).uniform(-1, 1, (1, 16, 16, 16)).astype("float32")}
           for i in range(2)]
    export_tflite(build_model(fn, (1, 16, 16, 16)), path, quantize="int8", calibration=cal)
    sram = {o: float(run_vela(path, "ethos-u55-128", settings=VelaSettings(optimise=o))
                     .csv["sram_memory_used"]) for o in ("Performance", "Size")}
    assert sram["Size"] < 0.5 * sram["Performance"], sram
