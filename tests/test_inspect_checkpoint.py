"""The library behind `rewrite inspect CKPT [--against MODEL]`: list and diff checkpoints.

``list_checkpoint_variables`` prints what ``inspect_checkpoint`` prints (seed 003: "look at
what's in the checkpoint and what's in the graph"), ``diff_checkpoint`` says what a restore would
do before anyone runs one.
"""

from __future__ import annotations

import pytest
import tensorflow as tf

from rewriter.errors import UserError
from rewriter.surgery import VarInfo, diff_checkpoint, is_checkpoint, list_checkpoint_variables

from .conftest import SAMPLES

v1 = tf.compat.v1


def _tf1(folder, names, save=True):
    graph = tf.Graph()
    with graph.as_default():
        for name, shape in names.items():
            v1.get_variable(name, shape)
        v1.train.export_meta_graph(filename=str(folder / "graph.meta"), graph=graph)
        if save:
            with v1.Session(graph=graph) as sess:
                sess.run(v1.global_variables_initializer())
                return v1.train.Saver().save(sess, str(folder / "model.ckpt-122543"))
    return str(folder / "graph.meta")


def test_lists_names_dtypes_shapes_like_inspect_checkpoint(tmp_path):
    prefix = _tf1(tmp_path, {"input/init_conv/DW": [3, 3, 3, 16], "input/bias": [16]})
    assert list_checkpoint_variables(prefix) == [
        VarInfo("input/bias", "float32", (16,)),
        VarInfo("input/init_conv/DW", "float32", (3, 3, 3, 16))]


def test_is_checkpoint_accepts_weights_without_a_graph_only(tmp_path):
    import keras

    prefix = _tf1(tmp_path, {"w": [2]})
    assert is_checkpoint(prefix) and is_checkpoint(prefix + ".index")
    assert is_checkpoint(str(tmp_path))  # the directory's 'checkpoint' file names it
    keras.saving.load_model(SAMPLES["keras"]).save_weights(tmp_path / "m.weights.h5")
    assert is_checkpoint(str(tmp_path / "m.weights.h5"))
    assert not is_checkpoint(str(SAMPLES["keras"]))
    assert not is_checkpoint(str(SAMPLES["h5_tfkeras"]))
    assert not is_checkpoint(str(SAMPLES["saved_model"]))
    assert not is_checkpoint(str(tmp_path / "nothing-here"))


def test_diff_against_a_graph_shows_restored_new_unused_mismatched(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ckpt = _tf1(tmp_path / "a", {"w1": [3, 3], "w2": [3, 4], "old": [2]})
    meta = _tf1(tmp_path / "b", {"w1": [3, 3], "w2": [3, 5], "w_new": [1]}, save=False)
    diff = diff_checkpoint(ckpt, meta)
    assert [p.target for p in diff.restored] == ["w1"]
    assert [v.name for v in diff.new] == ["w_new"]
    assert [v.name for v in diff.unused] == ["old"]
    assert [(m.source.shape, m.target.shape) for m in diff.mismatched] == [((3, 4), (3, 5))]
    assert "w2: target float32[3, 5] but source w2 is float32[3, 4]" == diff.mismatched[0].reason()
    assert not diff.complete


def test_diff_between_formats_of_one_model_is_complete():
    """The sample's .keras weights against its SavedModel: same names, nothing missing."""
    diff = diff_checkpoint(str(SAMPLES["keras"]), str(SAMPLES["saved_model"]))
    assert diff.complete and not diff.unused and len(diff.restored) == 20


def test_unreadable_checkpoint_is_a_user_error_naming_the_path(tmp_path):
    (tmp_path / "bad.index").write_bytes(b"\x00garbage" * 8)
    with pytest.raises(UserError, match=str(tmp_path / "bad")):
        list_checkpoint_variables(str(tmp_path / "bad"))
    with pytest.raises(UserError, match="no such file"):
        list_checkpoint_variables(str(tmp_path / "missing"))
