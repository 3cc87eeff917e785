"""`rewrite check --json` predicts what `rewrite run` does: the same rules for the same ops, the
same second attempt (converter re-fusion: HARD_SWISH on the Edge TPU, GELU on TFLite Micro;
float islands such as NEG on Ethos-U), and what the rewritten artifact still lacks.

Both commands run in-process on the same model with their default (seeded) data; the rules
named by ``check`` (its ``plan`` and each unsupported op's ``fix``) are compared with those
``report.json`` records. A few models by default; every activation of the catalogue on every
int8 target, the other sample formats and the detector family under ``slow``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rewriter.frontends.activations import activation_net, catalogue, get

TARGETS = ("edgetpu", "ethos-u55-128", "tflm")


def _activation_model(tmp: Path, key: str) -> Path:
    from rewriter.testing import model_from_keras

    path = tmp / "model.pb"
    path.write_bytes(model_from_keras(activation_net(get(key))).graph_def.SerializeToString())
    return path


def _fixes(plan: dict[str, Any]) -> dict[str, list[str]]:
    return {f["op"]: [f["rule"], *f.get("also", [])] for f in plan["fixes"]}


def _graph_fixes(entries: list[dict[str, Any]]) -> dict[str, str | None]:
    return {u["op"]: u["fix"] for u in entries}


def assert_agree(cli, path: Path, target: str, out: Path, *extra: str) -> tuple[dict, dict]:
    """Run check and run on ``path`` for ``target`` (both with ``extra`` options); assert they
    name the same rules."""
    code, stdout, err = cli("check", path, "--target", target, "--json", "-q", *extra)
    assert code in (0, 1), err
    check = json.loads(stdout)
    code, _, err = cli(path, "--target", target, "-o", out, "-q", *extra)
    assert code in (0, 1), err
    report = json.loads((out / "report.json").read_text())
    predicted, ran = check["plan"], report["plan"]
    assert predicted["rules"] == ran["rules"]
    assert [r["rule"] for r in report["rules_applied"]] == predicted["rules"]
    assert _fixes(predicted) == _fixes(ran)
    assert ({u["op"]: u["why"] for u in predicted["unfixable"]}
            == {u["op"]: u["why"] for u in ran["unfixable"]})
    assert (predicted["retry"] or {}).get("exclude") == (report.get("retry") or {}).get("exclude")
    # each op the TF graph lacks names the rule run applied to it (or none, in both)
    assert _graph_fixes(check["graph"]["unsupported"]) == _graph_fixes(
        report["unsupported_before"])
    # and what the rewritten artifact still lacks is predicted
    assert predicted["artifact_unsupported"] == sorted(
        {u.get("target_op") or u["op"] for u in report["unsupported_after"]})
    assert predicted["artifact_ok"] == (not report["unsupported_after"])
    # an op of the original artifact the job fixes names a rule the job applied
    for u in (check["artifact"] or {}).get("unsupported", []):
        for rule in filter(None, (u["fix"] or "").split(", ")):
            assert rule in predicted["rules"], (u, predicted["rules"])
    return check, report


#: (activation, target, what makes the case): the converter re-fuses HARD_SWISH and GELU, a
#: NEG island on Ethos-U, a rule fitted on the calibration range.
DEFAULT = [("hard_swish", "edgetpu"), ("gelu", "tflm"), ("log_sigmoid", "ethos-u55-128"),
           ("selu", "edgetpu")]


@pytest.mark.parametrize("key,target", DEFAULT, ids=lambda v: str(v))
def test_check_names_the_rules_run_applies(cli, tmp_path, key, target):
    check, report = assert_agree(cli, _activation_model(tmp_path, key), target,
                                 tmp_path / "out")
    assert report["ok"] and report["rules_applied"]  # a rule was needed, and it was enough
    if key == "hard_swish":  # the TF graph runs on the Edge TPU; the converter fuses HARD_SWISH
        ops = {u.get("target_op") or u["op"] for u in check["artifact"]["unsupported"]}
        assert "HARD_SWISH" in ops and check["plan"]["rules"] == ["hard_swish_unfused"]
        assert [u["fix"] for u in check["artifact"]["unsupported"]] == ["hard_swish_unfused"]


def test_check_exact_only_predicts_run_exact_only(cli, tmp_path):
    """Every GELU rule is approximate: with --exact-only both commands leave GELU unfixed, for
    the same reason, and neither applies a rule."""
    check, report = assert_agree(cli, _activation_model(tmp_path, "gelu"), "tflm",
                                 tmp_path / "out", "--exact-only")
    assert check["plan"]["exact_only"] is True and report["plan"]["exact_only"] is True
    assert check["plan"]["rules"] == [] and not report["ok"]
    [unfixable] = check["plan"]["unfixable"]
    assert "--exact-only refuses it" in unfixable["why"]
    # TFLite Micro cannot load a file with GELU: the job still measures it (in LiteRT), says
    # so, and ends with its report (exit 1 on the unsupported op), not exit 2
    artifact = report["equivalence"]["artifact"]
    assert artifact["runtime"] == "LiteRT"
    assert "TFLite Micro has no kernel for GELU" in artifact["runtime_fallback"]
    assert artifact["runtime_fallback"] in report["warnings"]
    assert {u.get("target_op") or u["op"] for u in report["unsupported_after"]} == {"GELU"}
    assert min(o["cosine"] for o in artifact["outputs"].values()) > 0.9


def test_check_and_run_agree_on_the_sample_model(cli, samples, tmp_path):
    check, report = assert_agree(cli, samples["keras"], "edgetpu", tmp_path / "out")
    assert check["plan"]["rules"] and report["ok"]


@pytest.mark.slow
@pytest.mark.parametrize("key", [a.key for a in catalogue()])
@pytest.mark.parametrize("target", TARGETS)
def test_check_and_run_agree_on_every_activation(cli, tmp_path, key, target):
    assert_agree(cli, _activation_model(tmp_path, key), target, tmp_path / "out")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["keras", "h5_tfkeras", "saved_model", "graphdef", "checkpoint"])
@pytest.mark.parametrize("target", TARGETS)
def test_check_and_run_agree_on_every_sample_format(cli, samples, tmp_path, fmt, target):
    assert_agree(cli, samples[fmt], target, tmp_path / "out")


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_check_and_run_agree_on_the_detector(cli, tmp_path, target):
    from tests.families import detector

    path = tmp_path / "detector.keras"
    detector().save(path)
    assert_agree(cli, path, target, tmp_path / "out")
