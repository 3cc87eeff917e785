"""Every checkpoint flavour reads into one name -> (dtype, shape, value) view; --map rules."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.errors import UserError
from rewriter.surgery.checkpoints import open_variables
from rewriter.surgery.variables import NameMap, VarInfo, diff_variables

from .conftest import SAMPLES


@pytest.fixture(scope="module")
def keras_files(tmp_path_factory):
    import keras

    folder = tmp_path_factory.mktemp("keras_files")
    model = keras.saving.load_model(SAMPLES["keras"])
    model.save_weights(folder / "w.weights.h5")
    model.save(folder / "m.h5")
    ckpt = tf.train.Checkpoint(kernel=tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3)))
    prefix = ckpt.save(str(folder / "tf2" / "ckpt"))  # save() adds save_counter
    return folder, {v.path: v.numpy() for v in model.weights}, prefix


def test_keras_formats_give_paths_and_exact_values(keras_files):
    folder, weights, _ = keras_files
    for path in (SAMPLES["keras"], folder / "m.h5", SAMPLES["h5_tfkeras"]):
        vs = open_variables(str(path))
        assert sorted(vs.infos) == sorted(weights)
    vs = open_variables(str(folder / "m.h5"))
    assert np.array_equal(vs.read("conv1/kernel"), weights["conv1/kernel"])


def test_keras3_weights_file_names_slots_by_layer(keras_files):
    folder, weights, _ = keras_files
    vs = open_variables(str(folder / "w.weights.h5"))
    assert vs.format == "keras-weights"
    assert vs.infos["conv1/vars/0"] == VarInfo("conv1/vars/0", "float32", (3, 3, 3, 16))
    assert np.array_equal(vs.read("conv1/vars/0"), weights["conv1/kernel"])


def test_tf2_object_checkpoint_names_are_object_paths(keras_files):
    _, _, prefix = keras_files
    vs = open_variables(prefix)
    assert vs.format == "tf2-checkpoint"
    assert "kernel" in vs.infos and "save_counter" in vs.infos
    assert np.array_equal(vs.read("kernel"), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_saved_model_variables_named_by_their_own_names():
    vs = open_variables(str(SAMPLES["saved_model"]))
    assert vs.format == "saved_model" and "conv1/kernel" in vs.infos
    assert all(k.endswith("/.ATTRIBUTES/VARIABLE_VALUE") for ks in vs.keys.values() for k in ks)


def test_map_rules_first_match_wins_and_bad_rules_are_user_errors():
    rules = NameMap.parse(["input/=init/", r"re:^(.*)/DW$=\1/kernel", "init/=other/"])
    assert rules("input/conv/DW") == "init/conv/DW"  # first matching rule only
    assert rules("x/DW") == "x/kernel"
    assert rules("init/a") == "other/a"
    assert rules("keep/me") == "keep/me"
    with pytest.raises(UserError, match="OLD=NEW"):
        NameMap.parse(["no-equals-sign"])
    with pytest.raises(UserError, match="bad regular expression"):
        NameMap.parse(["re:([=x"])


def test_two_sources_mapped_to_one_target_is_refused():
    src = {"a/w": VarInfo("a/w", "float32", (1,)), "b/w": VarInfo("b/w", "float32", (1,))}
    tgt = {"b/w": VarInfo("b/w", "float32", (1,))}
    with pytest.raises(UserError, match="both"):
        diff_variables(src, tgt, NameMap.parse(["a/=b/"]))


def test_dtype_difference_is_a_mismatch():
    src = {"w": VarInfo("w", "float64", (2,))}
    tgt = {"w": VarInfo("w", "float32", (2,))}
    diff = diff_variables(src, tgt)
    assert not diff.restored and diff.mismatched[0].target.dtype == "float32"


def test_keras_file_with_unloadable_custom_layer_still_lists_its_weights(tmp_path):
    import keras

    class Scale(keras.layers.Layer):  # local class: cannot be found again when loading
        def build(self, shape):
            self.s = self.add_weight(shape=(shape[-1],), initializer="ones", name="s")

        def call(self, x):
            return x * self.s

    inp = keras.Input((3,), name="x")
    model = keras.Model(inp, Scale(name="scale")(keras.layers.Dense(3, name="d")(inp)))
    model.save(tmp_path / "custom.keras")
    vs = open_variables(str(tmp_path / "custom.keras"))
    assert vs.format == "keras-weights"
    assert sorted(vs.infos) == ["d/vars/0", "d/vars/1", "scale/vars/0"]
    assert np.array_equal(vs.read("d/vars/0"), model.get_layer("d").kernel.numpy())
