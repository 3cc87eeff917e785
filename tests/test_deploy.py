"""``rewrite MODEL --target tflm --deploy``: OUT/deploy/ is a TFLite Micro package whose every
figure is checked against the file: the C array decodes to the artifact's bytes, the resolver
registers exactly the file's ops, and the arena it states is the one TFLite Micro needs (the file
runs in it, and not in 20% less). The job is held to ``--sram 1`` (1 KiB, far below the arena)
and ``--flash 1024``: it ends with exit 1 naming the SRAM overrun, and writes the package all
the same."""

from __future__ import annotations

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
    code = main([str(SAMPLES["keras"]), "--target", "tflm", "--deploy", "-o", str(out), "-q",
                 "--calibration", str(MODELS / "calibration.npy"), "--sram", "1",
                 "--flash", "1024"])
    return code, out, json.loads((out / "report.json").read_text())


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


@pytest.mark.parametrize("flags", [["--deploy"], ["--sram", "512"]])
def test_deploy_and_budgets_are_refused_for_other_targets(cli, tmp_path, flags):
    code, _, err = cli(SAMPLES["keras"], "--target", "edgetpu", *flags, "-o", tmp_path / "o")
    assert code == 2
    assert f"error: {flags[0]} is about a TFLite Micro deployment" in err
    assert "tflm and ethos-u*" in err
    assert not (tmp_path / "o").exists()
