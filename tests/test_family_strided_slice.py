"""A stride-2 slice between two convolutions (stock Keras 3, ``h[:, ::2, ::2, :]``) through
``rewrite --target edgetpu`` (issue 28): the Edge TPU maps STRIDED_SLICE only with unit strides,
so it was cut there; ``strided_slice_unit_steps`` makes it exit 0 with no cut, int8 cosine >=
0.99. Ethos-U55 and TFLite Micro run the slice as it is (measured: exit 0 on both)."""

from __future__ import annotations

import json

import numpy as np

from rewriter.cli import main


def test_stride_2_slice_runs_whole_on_the_edge_tpu(tmp_path):
    import keras

    init = keras.initializers.GlorotUniform
    x = keras.Input((16, 16, 8))
    h = keras.layers.Conv2D(8, 3, padding="same", kernel_initializer=init(seed=0))(x)
    keras.Model(x, keras.layers.Conv2D(4, 1, kernel_initializer=init(seed=1))(
        h[:, ::2, ::2, :])).save(tmp_path / "slice.keras")
    rng = np.random.default_rng(0)
    np.save(tmp_path / "cal.npy", rng.standard_normal((32, 16, 16, 8)).astype("f4"))
    np.save(tmp_path / "data.npy", rng.standard_normal((8, 16, 16, 8)).astype("f4"))
    code = main([str(tmp_path / "slice.keras"), "--target", "edgetpu", "--calibration",
                 str(tmp_path / "cal.npy"), "--data", str(tmp_path / "data.npy"),
                 "-o", str(tmp_path / "out"), "-q"])
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert code == 0 and report["ok"] is True, report["unsupported_after"]
    assert [a["rule"] for a in report["rules_applied"]] == ["strided_slice_unit_steps"]
    assert report["placement_after"]["cut"] is None
    [cmp] = report["equivalence"]["artifact"]["outputs"].values()
    assert cmp["cosine"] >= 0.99
