"""``rewrite MODEL --target tflm --deploy``: OUT/deploy/ is a TFLite Micro package whose every
figure is checked against the file: the C array decodes to the artifact's bytes, the resolver
registers exactly the file's ops, and the arena it states is the one TFLite Micro needs (the file
runs in it, and not in 20% less). The job is held to ``--sram 1`` (1 KiB, far below the arena)
and ``--flash 1024``: it ends with exit 1 naming the SRAM overrun, and writes the package all
the same."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from rewriter.verify.tflm import tflm_available

from .conftest import MODELS, SAMPLES

pytestmark = pytest.mark.skipif(not tflm_available(), reason="pip install 'rewriter[tflm]'")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """One tflm job with --deploy --sram 1 --flash 1024 on the sample model: (exit code, OUT,
    report.json)."""
    from rewriter.cli import main

    out = tmp_path_factory.mktemp("deploy") / "out"
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main([str(SAMPLES["keras"]), "--target", "tflm", "--deploy", "-o", str(out),
                     "-q", "--calibration", str(MODELS / "calibration.npy"), "--sram", "1",
                     "--flash", "1024"])
    report = json.loads((out / "report.json").read_text())
    report["_stderr"] = err.getvalue()
    return code, out, report


def _define(text: str, name: str) -> int:
    return int(re.search(rf"constexpr int {name} = (\d+);", text).group(1))


def test_an_sram_budget_below_the_arena_fails_the_job_naming_the_overrun(deployed):
    code, _, report = deployed
    assert code == 1 and not report["ok"]
    assert report["equivalence"]["artifact"]["ok"] and report["unsupported_after"] == []
    memory = report["memory"]
    (over,) = memory["over_budget"]  # SRAM only: the file is far below --flash 1024
    arena = memory["sram"]["bytes"]
    assert over == (f"SRAM: tensor arena {arena} bytes ({memory['sram']['needed_bytes']} + 1024 "
                    f"margin) > --sram 1 KiB (1024 bytes), {arena - 1024} bytes over")
    assert report["summary"].startswith("OVER BUDGET: " + over + "; ")
    assert memory["sram"]["budget_bytes"] == 1024
    assert memory["flash"]["budget_bytes"] == 1024 * 1024 > memory["flash"]["bytes"]


def test_the_overrun_names_the_tensors_at_the_peak_and_what_would_reduce_it(deployed):
    """One line in stderr, report.json, report.md and report.html: the overrun, the tensors live
    at the peak, and the remedies. On tflm the peak is elementwise_ramps' second ELU: its
    1x32x512x12 int8 ramps (192 KiB, most of the arena) beside 1x32x32x16 feature maps (16 KiB
    each)."""
    _, out, report = deployed
    memory = report["memory"]
    (line,) = memory["over_budget_lines"]
    assert line.startswith(memory["over_budget"][0] + "; at op ")
    live = memory["advice"]["sram"]["largest"]
    assert live[0]["name"] == "convbn_elu_1/elu2_1/Elu/elementwise_ramps/ramps"
    assert (live[0]["shape"], live[0]["bytes"]) == ([1, 32, 512, 12], 196608)
    assert [t["bytes"] for t in live[1:]] == [16384, 16384]
    assert live[0]["bytes"] < memory["sram"]["needed_bytes"]
    assert ("would reduce it: a smaller input ('serving_default_image:0' 1x32x32x3 int8 = "
            "3.0 KiB)") in line
    assert "--optimise" not in line  # a Vela setting: not for tflm
    assert "flash" not in memory["advice"]  # within --flash 1024
    assert [x for x in report["_stderr"].splitlines() if x.startswith("over budget:")] == [
        "over budget: " + line]
    md = (out / "report.md").read_text()
    assert "## Memory" in md and f"**Over budget**: {line}" in md
    html = (out / "report.html").read_text()
    assert "<h2>Memory</h2>" in html and "Over budget" in html and "serving_default_image:0" in html


def test_the_c_array_decodes_to_the_artifact(deployed):
    _, out, _ = deployed
    cc = (out / "deploy" / "model_data.cc").read_text()
    body = cc[cc.index("g_model[] = {"):cc.index("};")]
    decoded = bytes(int(h, 16) for h in re.findall(r"0x([0-9a-f]{2})", body))
    artifact = (out / "model.tflite").read_bytes()
    assert decoded == artifact
    assert "alignas(16) const unsigned char g_model[]" in cc
    assert f"const unsigned int g_model_len = {len(artifact)};" in cc
    assert "extern const unsigned int g_model_len;" in (out / "deploy" / "model_data.h").read_text()


def test_the_resolver_registers_every_op_of_the_file_and_no_other(deployed):
    from rewriter.export.micro_ops import ADD_METHODS
    from rewriter.targets.artifact import read_artifact

    _, out, _ = deployed
    header = (out / "deploy" / "op_resolver.h").read_text()
    registered = re.findall(r"resolver\.(Add\w+)\(\)", header)
    ops = set(read_artifact(out / "model.tflite").op_names())
    assert sorted(registered) == sorted(ADD_METHODS[op] for op in ops)
    assert len(registered) == len(set(registered))
    assert f"constexpr int kNumOps = {len(registered)};" in header
    assert "MicroMutableOpResolver<kNumOps>" in header


def test_the_stated_arena_is_what_tflite_micro_needs(deployed):
    from rewriter.export.micro import ARENA_MARGIN
    from rewriter.verify.tflm import runs_with_arena

    _, out, report = deployed
    arena_h = (out / "deploy" / "arena.h").read_text()
    measured, size = _define(arena_h, "kTensorArenaNeeded"), _define(arena_h, "kTensorArenaSize")
    assert size == measured + ARENA_MARGIN
    model = out / "model.tflite"
    assert runs_with_arena(model, measured)  # exactly the measured figure (no margin) runs
    assert not runs_with_arena(model, measured - 1)  # a byte less does not
    assert not runs_with_arena(model, int(0.8 * size))  # 20% under the stated size fails
    memory = report["memory"]
    assert memory["sram"]["bytes"] == size and memory["sram"]["needed_bytes"] == measured
    assert memory["flash"]["bytes"] == model.stat().st_size
    assert "TFLite Micro" in memory["sram"]["source"]
    readme = (out / "deploy" / "README.md").read_text()
    assert "RegisterOps(resolver)" in readme and "kTensorArenaSize" in readme
    assert "TARGET_ARCH=cortex-m4 OPTIMIZED_KERNEL_DIR=cmsis_nn microlite" in readme


@pytest.mark.parametrize("flags", [["--deploy"], ["--sram", "512"]])
def test_deploy_and_budgets_are_refused_for_other_targets(cli, tmp_path, flags):
    code, _, err = cli(SAMPLES["keras"], "--target", "edgetpu", *flags, "-o", tmp_path / "o")
    assert code == 2
    assert f"error: {flags[0]} is about a TFLite Micro deployment" in err
    assert "tflm and ethos-u*" in err
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- done when (slow)
@pytest.fixture(scope="module")
def families_built(tmp_path_factory):
    """The detector (64x64, as benchmarks/model_families.py builds it) and the keyword spotter
    (the audio family's SavedModel after its log-mel front end), with calibration data."""
    import numpy as np

    from rewriter.frontends import load_model

    from .families import LOGMEL, audio_saved_model, detector, waveforms

    root = tmp_path_factory.mktemp("families")
    detector(size=64).save(root / "det.keras")
    np.save(root / "images.npy",
            np.random.default_rng(0).uniform(-1, 1, (32, 64, 64, 3)).astype(np.float32))
    audio = audio_saved_model(root / "audio", samples=8000, frame=256, step=128, mels=32)
    whole = load_model(audio)
    tensor = next(f"{n.name}:0" for n in whole.graph_def.node if n.name.endswith(LOGMEL))
    np.save(root / "logmel.npy", np.concatenate(
        [whole.run({"waveform": w}, fetches=[tensor])[tensor]
         for w in waveforms(32, samples=8000)]))
    return {"detector": [root / "det.keras", "--calibration", root / "images.npy"],
            "kws": [audio, "--inputs", LOGMEL, "--calibration", root / "logmel.npy"]}


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ethos-u55-128", "tflm"])
@pytest.mark.parametrize("name", ["detector", "kws"])
def test_the_detector_and_keyword_spotter_deploy(families_built, name, target, tmp_path, cli):
    from rewriter.export.micro import file_ops
    from rewriter.export.micro_ops import ADD_METHODS, ETHOSU_METHOD
    from rewriter.verify.tflm import runs_with_arena

    model, *flags = families_built[name]
    code, _, err = cli(model, "--target", target, "--deploy", "-o", tmp_path, "-q", *flags)
    assert code == 0, err
    report = json.loads((tmp_path / "report.json").read_text())
    deployed = tmp_path / ("model_vela.tflite" if target != "tflm" else "model.tflite")
    cc = (tmp_path / "deploy" / "model_data.cc").read_text()
    body = cc[cc.index("g_model[] = {"):cc.index("};")]
    assert bytes(int(h, 16) for h in re.findall(r"0x([0-9a-f]{2})", body)) == deployed.read_bytes()
    builtins, customs = file_ops(deployed)
    registered = re.findall(r"resolver\.(Add\w+)\(\)",
                            (tmp_path / "deploy" / "op_resolver.h").read_text())
    assert sorted(registered) == sorted([ADD_METHODS[b] for b in builtins]
                                        + ([ETHOSU_METHOD] if customs else []))
    measured = _define((tmp_path / "deploy" / "arena.h").read_text(), "kTensorArenaNeeded")
    memory = report["memory"]
    assert memory["flash"]["bytes"] == deployed.stat().st_size
    if target == "tflm":
        assert runs_with_arena(deployed, measured) and not runs_with_arena(deployed,
                                                                           int(0.8 * measured))
    else:
        assert customs == ["ethos-u"] and report["vela"]["cpu_ops"] == 0
        assert measured == round(memory["vela"]["summary"]["sram_memory_used_kib"] * 1024)


def test_int16_activations_bring_the_16x8_advice(tmp_path):
    """A 16x8 file's SRAM overrun names the int16 activations and --accuracy (mixed precision:
    int16 only where it helps); an int8 file's does not."""
    import numpy as np
    import tensorflow as tf

    from rewriter.export.micro_memory import advice

    inp = tf.keras.Input((8,), batch_size=1)
    model = tf.keras.Model(inp, tf.keras.layers.Dense(4)(tf.keras.layers.Dense(16)(inp)))
    rng = np.random.default_rng(0)

    def representative():
        for _ in range(4):
            yield [rng.normal(size=(1, 8)).astype(np.float32)]

    paths = {}
    for name, ops in (("int8", tf.lite.OpsSet.TFLITE_BUILTINS_INT8),
                      ("16x8", tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8)):
        conv = tf.lite.TFLiteConverter.from_keras_model(model)
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = representative
        conv.target_spec.supported_ops = [ops]
        paths[name] = tmp_path / f"{name}.tflite"
        paths[name].write_bytes(conv.convert())
    wide = [r for r in advice("sram", paths["16x8"], "tflm")["reduce"] if r.startswith("16x8")]
    assert len(wide) == 1 and "--accuracy COS" in wide[0], wide
    assert int(wide[0].split("(")[1].split()[0]) >= 2  # the Dense outputs at least
    assert not any(r.startswith("16x8") for r in advice("sram", paths["int8"], "tflm")["reduce"])
