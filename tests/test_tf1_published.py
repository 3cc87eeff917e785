"""Published TF1 checkpoints and exports load as their authors left them (issue 25).

The models are TF1 training graphs written by ``tests/tf1_models.py`` in a fresh process (TF1
control flow), once per session: batch norm and dropout behind an ``is_training`` tf.cond,
gradients and Adam slots, labels and learning-rate placeholders, a ``checkpoint`` file naming
another machine's paths, an empty prefix, and an Estimator-style export fed serialized
``tf.Example`` strings. The reference is the graph run by TensorFlow with the flag False.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rewriter.errors import UserError
from rewriter.frontends import load_model
from rewriter.frontends.options import LoadOptions

from .tf1_models import SHAPE

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tf1(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tf1_published")
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    subprocess.run([sys.executable, str(ROOT / "tests" / "tf1_models.py"), str(out)],
                   check=True, env=env, capture_output=True, timeout=600)
    return out


def _layouts(root: Path) -> list[str]:
    """Every way a person names these checkpoints."""
    return [f"{root}/plain/model.ckpt", f"{root}/plain/model.ckpt.meta",
            f"{root}/plain/model.ckpt.index", f"{root}/plain",
            f"{root}/dir_foreign", f"{root}/dir_foreign/model.ckpt.meta",
            f"{root}/empty_prefix", f"{root}/empty_prefix/", f"{root}/empty_prefix/.meta",
            f"{root}/empty_prefix/.index"]


def test_every_layout_loads_the_inference_graph_that_tensorflow_runs(tf1):
    calib = np.load(tf1 / "calibration.npy")
    ref = np.load(tf1 / "reference.npy")
    for path in _layouts(tf1):
        model = load_model(path)
        x = "model/x" if "dir_foreign" in path else "x"  # a placeholder in a name scope
        assert [s.name for s in model.inputs] == [x], path  # labels, lr, is_training: not
        assert [s.name for s in model.outputs] == ["predictions"], path
        ops = {n.op for n in model.graph_def.node}
        assert not ops & {"Switch", "Merge", "RandomUniform", "VariableV2", "Assign",
                          "ApplyAdam", "RestoreV2", "SaveV2"}, (path, ops)
        bn = [n for n in model.graph_def.node if n.op.startswith("FusedBatchNorm")]
        assert len(bn) == 2 and not any(n.attr["is_training"].b for n in bn)
        assert not [n.name for n in model.graph_def.node if "gradients" in n.name]
        got = np.concatenate([model.run({x: calib[i:i + 1]})["predictions"]
                              for i in range(len(calib))])
        np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6, err_msg=path)
        assert any(n.startswith("training flag 'is_training'") for n in model.source.notes)


def test_a_tf1_graph_written_by_tf2_folds_its_functional_conds(tmp_path):
    """The same training graph written by TF 2's compat.v1 (tf.cond as functional If)."""
    from .tf1_models import build_checkpoint

    folder, calib, ref = build_checkpoint(tmp_path / "cfv2", steps=3)
    model = load_model(str(folder / "model.ckpt"))
    ops = {n.op for n in model.graph_def.node}
    assert not ops & {"If", "StatelessIf", "PartitionedCall", "OptionalFromValue",
                      "RandomUniform"}, ops
    bn = [n for n in model.graph_def.node if n.op.startswith("FusedBatchNorm")]
    assert len(bn) == 2 and not any(n.attr["is_training"].b for n in bn)
    got = np.concatenate([model.run({"x": calib[i:i + 1]})["predictions"]
                          for i in range(len(calib))])
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6)


def test_a_foreign_checkpoint_file_falls_back_in_one_line_without_tensorflow_logs(tf1):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-m", "rewriter", "inspect", str(tf1 / "dir_foreign")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = [ln for ln in (run.stdout + run.stderr).splitlines() if "does not exist here" in ln]
    assert len(lines) == 1 and "/home/author/experiments/run3/model.ckpt" in lines[0]
    assert "ERROR:tensorflow" not in run.stderr and "Couldn't match" not in run.stderr


def test_a_checkpoint_file_naming_nothing_here_is_one_error_line(tf1, tmp_path, cli):
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "/home/a/run/model.ckpt-9"\n')
    code, _, err = cli("inspect", tmp_path)
    assert code == 2
    assert err.splitlines()[0].startswith("error: ") and "/home/a/run/model.ckpt-9" in err
    assert len(err.strip().splitlines()) == 1


def test_set_overrides_the_training_flag_and_is_refused_for_what_it_cannot_set(tf1):
    path = str(tf1 / "plain" / "model.ckpt")
    model = load_model(path, LoadOptions(settings={"is_training": "true"}))
    bn = [n for n in model.graph_def.node if n.op.startswith("FusedBatchNorm")]
    assert bn and all(n.attr["is_training"].b for n in bn)
    assert "RandomUniform" in {n.op for n in model.graph_def.node}  # dropout is back
    assert any("set to True by --set" in n for n in model.source.notes)
    with pytest.raises(UserError, match="no placeholder 'learning_rate' reaches the outputs"):
        load_model(path, LoadOptions(settings={"learning_rate": "0.1"}))
    with pytest.raises(UserError, match="not a scalar placeholder"):
        load_model(path, LoadOptions(settings={"x": "1"}))
    with pytest.raises(UserError, match="true or false"):
        load_model(path, LoadOptions(settings={"is_training": "maybe"}))


def test_outputs_are_found_as_a_person_would_nearest_the_end_first(tf1):
    from rewriter.frontends.checkpoint import read_meta_graph
    from rewriter.frontends.tf1_graph import collection_roots, output_candidates

    meta = read_meta_graph(str(tf1 / "plain" / "model.ckpt.meta"))
    roots = collection_roots(meta)
    assert output_candidates(meta.graph_def, roots) == ["predictions"]
    aux = meta.graph_def.node.add()
    aux.CopyFrom(next(n for n in meta.graph_def.node if n.name == "predictions"))
    aux.name, aux.input[0] = "aux_head", "dense/Relu"  # a second head, nearer the start
    assert output_candidates(meta.graph_def, roots) == ["predictions", "aux_head"]


def test_stale_output_shapes_and_unknown_ops_off_the_inference_path_do_not_stop_a_load(tf1,
                                                                                       tmp_path):
    from rewriter.frontends.checkpoint import read_meta_graph

    src = tf1 / "plain"
    meta = read_meta_graph(str(src / "model.ckpt.meta"))
    for node in meta.graph_def.node:
        if node.name.startswith("gradients/"):
            node.attr["_output_shapes"].list.shape.add().dim.add().size = 12345  # stale
            if node.op.startswith("FusedBatchNormGrad"):
                node.op = "Addons>FusedBatchNormGradX"  # a library not installed
        if node.name == "dense/Relu":
            node.attr["_output_shapes"].list.shape.add().dim.add().size = 7  # stale too
    for f in src.iterdir():
        if f.name.startswith("model.ckpt"):
            (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "model.ckpt.meta").write_bytes(meta.SerializeToString())
    model = load_model(str(tmp_path / "model.ckpt"))
    assert [s.name for s in model.outputs] == ["predictions"]
    for node in meta.graph_def.node:  # the same library op on the inference path: named
        if node.name == "dense/Relu":
            node.op = "Addons>Mish"
    (tmp_path / "model.ckpt.meta").write_bytes(meta.SerializeToString())
    with pytest.raises(UserError, match=r"'Addons>Mish'.*TensorFlow Addons.*--outputs"):
        load_model(str(tmp_path / "model.ckpt"))


def test_an_estimator_export_is_cut_after_its_tf_example_parsing(tf1):
    from rewriter.frontends.safety import saved_model_findings

    export = tf1 / "estimator" / "export"
    assert saved_model_findings(str(export)) == []  # its two other Savers never run on load
    model = load_model(str(export))  # signature key 'examples' is not the placeholder's name
    assert [(s.name, s.shape, s.dtype) for s in model.inputs] == [("x", (1, *SHAPE), "float32")]
    assert [s.name for s in model.outputs] == ["probabilities"]
    assert not {n.op for n in model.graph_def.node} & {"ParseExampleV2", "ParseExample"}
    assert any(n.startswith("cut after tf.Example parsing") for n in model.source.notes)
    calib, ref = np.load(tf1 / "calibration.npy"), np.load(tf1 / "reference_estimator.npy")
    got = np.concatenate([model.run({"x": calib[i:i + 1]})["probabilities"]
                          for i in range(len(calib))])
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6)


def test_restore_and_unfreeze_know_the_same_layouts(tf1, tmp_path, cli):
    """A foreign-``checkpoint`` directory restored into an empty-prefix ``.meta`` with a stale
    ``_output_shapes``; the result loads and runs as TensorFlow ran the original."""
    from rewriter.frontends.checkpoint import read_meta_graph

    target = tmp_path / "target"
    target.mkdir()
    meta = read_meta_graph(str(tf1 / "empty_prefix" / ".meta"))
    stale = next(n for n in meta.graph_def.node if n.name.startswith("gradients/"))
    stale.attr["_output_shapes"].list.shape.add().dim.add().size = 12345
    (target / ".meta").write_bytes(meta.SerializeToString())
    code, _, err = cli("-q", "restore", tf1 / "dir_foreign", "--into", target / ".meta",
                       "-o", tmp_path / "restored")
    assert code == 0, err
    model = load_model(str(tmp_path / "restored"))
    calib, ref = np.load(tf1 / "calibration.npy"), np.load(tf1 / "reference.npy")
    np.testing.assert_allclose(model.run({"x": calib[:1]})["predictions"], ref[:1], rtol=0,
                               atol=2e-6)
    code, _, err = cli("-q", "unfreeze", tf1 / "empty_prefix", "-o", tmp_path / "unfrozen")
    assert code == 2 and "this is a checkpoint model, which keeps its variables" in err  # known


def test_a_saved_model_with_an_op_of_a_missing_library_is_named(tf1, tmp_path):
    import shutil

    from rewriter.frontends.safety import read_saved_model

    export = tmp_path / "export"
    shutil.copytree(tf1 / "estimator" / "export", export)
    sm = read_saved_model(str(export))
    node = next(n for n in sm.meta_graphs[0].graph_def.node if n.op == "Relu")
    node.op = "ImageProjectiveTransform"  # a tf.contrib.image op, not in TensorFlow 2
    (export / "saved_model.pb").write_bytes(sm.SerializeToString())
    with pytest.raises(UserError, match=r"'ImageProjectiveTransform'.*tf\.contrib"):
        load_model(str(export))


def test_scalar_input_shapes_parse():
    from rewriter.frontends.options import parse_input_shapes, parse_settings

    assert parse_input_shapes(["t:", "u:()", "x:1,2"]) == {"t": (), "u": (), "x": (1, 2)}
    assert parse_settings(["is_training=false", " k = 1.5 "]) == {"is_training": "false",
                                                                   "k": "1.5"}
    with pytest.raises(UserError, match="NAME=VALUE"):
        parse_settings(["is_training"])


# ----------------------------------------------------------------------------- the job
TARGETS = ("edgetpu", "ethos-u55-128", "tflm", "onnx")
DEFAULT_RUNS = [("dir_foreign", "edgetpu"), ("estimator/export", "onnx")]


def _job(tf1: Path, layout: str, target: str, out: Path) -> None:
    from rewriter.cli import main

    code = main([str(tf1 / layout), "--target", target, "-o", str(out), "-q",
                 "--calibration", str(tf1 / "calibration.npy")])
    report = json.loads((out / "report.json").read_text())
    assert code == 0 and report["ok"], report["summary"]
    assert report["unsupported_after"] == []
    placed = report["placement_after"]
    if placed:
        assert placed["ops_on_accelerator"] == placed["ops_total"], placed
    for out_eq in report["equivalence"]["artifact"]["outputs"].values():
        if target == "onnx":
            assert out_eq["max_rel_error"] <= 1e-4, out_eq
        else:
            assert out_eq["cosine"] >= 0.99, out_eq
    assert any(n.startswith("training flag") or n.startswith("cut after")
               for n in report["notes"])


@pytest.mark.parametrize("layout,target", DEFAULT_RUNS)
def test_the_job_runs_a_published_layout_with_only_calibration(tf1, tmp_path, layout, target):
    _job(tf1, layout, target, tmp_path / "out")


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("layout", ["plain/model.ckpt.meta", "dir_foreign", "empty_prefix",
                                    "estimator/export"])
def test_every_layout_on_every_target(tf1, tmp_path, layout, target):
    _job(tf1, layout, target, tmp_path / "out")
