"""tf_keras LayerNormalization on conv features (a training-mode FusedBatchNormV3 on
[1, R, D, 1]) no longer cuts an Edge TPU model: the prediction sees the moments the converter
emits and a rule rewrites them in the L2_NORMALIZATION form (the rule's own tests are
tests/rules/test_layernorm_l2norm_fused_bn.py)."""

from __future__ import annotations

import json

import pytest

tf_keras = pytest.importorskip("tf_keras")


def test_edgetpu_job_runs_the_whole_tf_keras_model(cli, tmp_path):
    tf_keras.utils.set_random_seed(3)  # an untrained model: its int8 cosine depends on the init
    inp = tf_keras.Input((16, 16, 3), batch_size=1, name="image")
    x = tf_keras.layers.Conv2D(8, 3, padding="same")(inp)
    x = tf_keras.layers.LayerNormalization()(x)
    x = tf_keras.layers.Conv2D(8, 3, padding="same")(x)
    x = tf_keras.layers.GlobalAveragePooling2D()(x)
    tf_keras.Model(inp, tf_keras.layers.Dense(4)(x)).save(tmp_path / "ln.h5")
    code, out, _ = cli(tmp_path / "ln.h5", "--target", "edgetpu", "-o", tmp_path / "out",
                       "--json")
    report = json.loads(out)
    assert code == 0, report["summary"]
    assert {u["op"] for u in report["unsupported_before"]} == {"FusedBatchNormV3"}
    assert [r["rule"] for r in report["rules_applied"]] == ["layernorm_l2norm_fused_bn"]
    after = report["placement_after"]
    assert after["cut"] is None and after["ops_on_accelerator"] == after["ops_total"]
    assert report["equivalence"]["rewritten_tf"]["ok"] and report["equivalence"]["artifact"]["ok"]
