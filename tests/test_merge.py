"""`rewrite merge`: two models in one graph under namespaces, the first feeding the second.

Seed 002: "can I mix all of those different graphs in only one graph? Yes, but you must be careful
with namespace", and gradients did not flow between separate graphs. The merged graph must compute
second(first(x)), keep the namespaces apart, and (unfrozen) train both parts at once.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import tensorflow as tf

from rewriter.errors import UserError


def _keras(path, n_in, n_out, seed):
    import keras

    keras.utils.set_random_seed(seed)
    inp = keras.Input((n_in,), name="x")  # both models use the same names on purpose
    h = keras.layers.Dense(6, activation="relu", name="dense")(inp)
    keras.Model(inp, keras.layers.Dense(n_out, name="out")(h)).save(path)
    return keras.saving.load_model(path)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("merge")
    a = _keras(folder / "a.keras", 5, 4, seed=1)
    b = _keras(folder / "b.keras", 4, 3, seed=2)
    return folder, a, b


def _merge_cli(*argv, capsys):
    from rewriter.commands import merge
    from rewriter.ui import UI

    parser = argparse.ArgumentParser()
    merge.add_arguments(parser)
    args = parser.parse_args([str(a) for a in argv])
    code = merge.run(args, UI(quiet=True, json_mode=args.json))
    return code, capsys.readouterr().out


def test_merged_graph_computes_second_of_first(pair, tmp_path, capsys):
    folder, a, b = pair
    out = tmp_path / "merged.pb"
    code, stdout = _merge_cli(folder / "a.keras", folder / "b.keras", "-o", out, "--json",
                              capsys=capsys)
    res = json.loads(stdout)
    assert code == 0 and res["max_abs_error"] <= 1e-6
    from rewriter.frontends import load_model

    merged = load_model(out)
    names = [n.name for n in merged.graph_def.node]
    assert all(n.startswith(("first/", "second/")) for n in names)
    assert [i.node for i in merged.inputs] == ["first/x"]
    x = np.random.default_rng(0).standard_normal((1, 5)).astype(np.float32)
    got = next(iter(merged.run({merged.inputs[0].name: x}).values()))
    assert np.max(np.abs(got - np.asarray(b(a(x))))) <= 1e-6


def test_unfrozen_merge_trains_both_parts(pair, tmp_path, capsys):
    """The seed's missing piece: one gradient step reaches the variables of both models."""
    from rewriter.cli import main

    folder, _, _ = pair
    out = tmp_path / "merged.pb"
    assert _merge_cli(folder / "a.keras", folder / "b.keras", "-o", out, capsys=capsys)[0] == 0
    assert main(["unfreeze", str(out), "-o", str(tmp_path / "sm"), "-q", "--json"]) == 0
    capsys.readouterr()
    obj = tf.saved_model.load(str(tmp_path / "sm"))
    x = tf.constant(np.ones((1, 5), np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(obj(x) ** 2)
    grads = tape.gradient(loss, obj.trainable_variables)
    spaces = {v.name.split("/")[0] for v, g in zip(obj.trainable_variables, grads, strict=True)
              if g is not None and float(tf.reduce_max(tf.abs(g))) > 0}
    assert spaces == {"first", "second"}


def test_incompatible_connection_is_a_user_error(pair, tmp_path, capsys):
    folder, _, _ = pair
    with pytest.raises(UserError, match="cannot feed out"):
        _merge_cli(folder / "b.keras", folder / "a.keras", "-o", tmp_path / "m.pb",
                   capsys=capsys)
    with pytest.raises(UserError, match="SECOND has no input 'nope'"):
        _merge_cli(folder / "a.keras", folder / "b.keras", "-o", tmp_path / "m.pb",
                   "--connect", "out=nope", capsys=capsys)
