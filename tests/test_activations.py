"""Every Keras activation on the int8 accelerators: the catalogue is complete and right, the
docs table is current, and the job places every op with int8 cosine >= 0.99 (a representative
subset by default, the rest of the subset under ``slow``). The whole activation x target matrix
is measured by ``benchmarks/activation_matrix.py`` and checked on its results file by
``tests/test_results_claims.py`` (it was rerun here, 135 more jobs, under ``slow``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rewriter.frontends.activations import (
    activation_net,
    catalogue,
    get,
    structured_images,
)
from rewriter.testing import model_from_keras

TARGETS = ("edgetpu", "ethos-u55-128", "tflm")
#: One per kind: Select + Exp (selu), a composite region (mish), channel-wise (log_softmax).
SUBSET = ("selu", "mish", "log_softmax")
#: The default run: SELU on every target, the other two where their rules differ most (MISH's
#: ramps in TFLite Micro, LOG_SOFTMAX on the Edge TPU); the rest of SUBSET x TARGETS is ``slow``.
DEFAULT_CELLS = [("selu", t) for t in TARGETS] + [("mish", "tflm"), ("log_softmax", "edgetpu")]


def test_the_catalogue_has_every_keras_activation():
    import keras

    listed = {a.name for a in catalogue() if a.framework == "keras"}
    public = {n for n in dir(keras.activations) if not n.startswith("_")
              and n not in ("get", "serialize", "deserialize")}
    assert public <= listed


def test_every_reference_is_the_function_keras_computes():
    x = np.linspace(-4.0, 4.0, 64 * 8, dtype=np.float32).reshape(64, 8)
    for act in catalogue():
        if act.name == "sparsemax":
            continue  # Keras 3.15's is wrong: see the next test
        k = __import__(act.framework)
        inp = k.Input((8,), batch_size=64)
        model = k.Model(inp, act.build(k, inp))
        got = np.asarray(model(x))
        np.testing.assert_allclose(got, act.reference(x.astype(np.float64)), atol=2e-5,
                                   err_msg=act.key)


def test_keras_3_15_sparsemax_is_not_the_simplex_projection_our_reference_is():
    """Keras <= 3.15 sums every cumulative sum in the support instead of taking the k-th
    (keras-team/keras#23425, fixed by #23469 after 3.15): the output does not sum to 1. The
    catalogue's reference is the projection; a rewrite must keep what the graph computes, so
    sparsemax graphs are compared with TF, never with the reference. When this fails, Keras has
    the fix: drop the exception above."""
    import keras

    x = np.array([[0.5, 0.1, -0.3, 0.2]], np.float32)
    ref = get("sparsemax").reference(x.astype(np.float64))
    np.testing.assert_allclose(ref, [[0.5 + 1 / 15, 0.1 + 1 / 15, 0.0, 0.2 + 1 / 15]],
                               atol=1e-12)
    assert ref.sum() == pytest.approx(1.0)
    got = np.asarray(keras.activations.sparsemax(x))
    assert got.sum() == pytest.approx(1 / 6, abs=1e-6)  # tau = (0.5 + 0.7 + 0.8 - 1) / 3


def test_the_activation_docs_table_is_current():
    from rewriter.commands.docs import docs_dir, stale_pages
    from rewriter.report.activation_table import PAGE

    assert PAGE not in stale_pages(docs_dir()), "run `rewrite docs` and commit docs/targets/"


def test_a_select_with_no_constant_operand_is_predicted_as_select():
    """TF 2.21 emits SELECT (no TFLite Micro kernel) for Keras' ELU(alpha) Select."""
    from rewriter.targets import load_target

    model = model_from_keras(activation_net(get("ELU(alpha=0.5)")))
    check = load_target("tflm").check_graph(model, "int8")
    selects = [v for v in check.verdicts if v.op in ("SelectV2",)]
    assert selects and selects[0].target_op == "SELECT" and not selects[0].supported


def _job(key: str, target: str, tmp_path) -> dict:
    """The job on the activation's network: report.json, plus TFLite Micro's cosine."""
    from rewriter.cli import main

    model = model_from_keras(activation_net(get(key)))
    pb, cal, val = tmp_path / "m.pb", tmp_path / "cal.npy", tmp_path / "val.npy"
    pb.write_bytes(model.graph_def.SerializeToString())
    np.save(cal, structured_images(32, seed=1))
    np.save(val, structured_images(8, seed=2))
    out = tmp_path / target
    code = main([str(pb), "--target", target, "-o", str(out), "-q", "--calibration", str(cal),
                 "--data", str(val)])
    report = json.loads((out / "report.json").read_text())
    report["exit_code"] = code
    if target == "tflm":
        from rewriter.verify.tflm import TflmRunner

        runner = TflmRunner(str(out / "model.tflite"))
        feeds = [{runner.inputs[0].name: v[None]} for v in np.load(val)]
        got = np.concatenate([next(iter(o.values())) for o in runner.run_many(feeds)]).ravel()
        want = np.concatenate([next(iter(model.run({model.inputs[0].name: f[
            runner.inputs[0].name]}).values())) for f in feeds]).ravel()
        report["tflm_cosine"] = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
    return report


def _assert_placed_and_close(report: dict, target: str) -> None:
    assert report["exit_code"] == 0 and report["ok"], report["summary"]
    assert report["unsupported_after"] == []
    if target == "edgetpu":
        assert report["placement_after"]["cut"] is None
    if target.startswith("ethos-u"):
        assert report["vela"]["cpu_ops"] == 0
    [cmp] = report["equivalence"]["artifact"]["outputs"].values()
    assert cmp["cosine"] >= 0.99
    if target == "tflm":
        assert report["tflm_cosine"] >= 0.99


@pytest.mark.parametrize(("key", "target"), DEFAULT_CELLS)
def test_representative_activations_are_placed_and_close_in_int8(key, target, tmp_path):
    _assert_placed_and_close(_job(key, target, tmp_path), target)


@pytest.mark.slow
@pytest.mark.parametrize(("key", "target"), [(k, t) for k in SUBSET for t in TARGETS
                                             if (k, t) not in DEFAULT_CELLS])
def test_the_rest_of_the_subset_is_placed_and_close_in_int8(key, target, tmp_path):
    _assert_placed_and_close(_job(key, target, tmp_path), target)
