"""A stride-2 slice between two convolutions (stock Keras 3, ``h[:, ::2, ::2, :]``) through
``rewrite --target edgetpu`` (issue 28): the Edge TPU maps STRIDED_SLICE only with unit strides,
so it was cut there; ``strided_slice_unit_steps`` makes it exit 0 with no cut, int8 cosine >=
0.99. Ethos-U55 and TFLite Micro run the slice as it is (measured: exit 0 on both)."""

from __future__ import annotations

import numpy as np

from tests.whole_job import assert_runs_whole, rules_applied


def test_stride_2_slice_runs_whole_on_the_edge_tpu(tmp_path):
    import keras

    init = keras.initializers.GlorotUniform
    x = keras.Input((16, 16, 8))
    h = keras.layers.Conv2D(8, 3, padding="same", kernel_initializer=init(seed=0))(x)
    keras.Model(x, keras.layers.Conv2D(4, 1, kernel_initializer=init(seed=1))(
        h[:, ::2, ::2, :])).save(tmp_path / "slice.keras")
    rng = np.random.default_rng(0)
    np.save(tmp_path / "calibration.npy", rng.standard_normal((32, 16, 16, 8)).astype("f4"))
    np.save(tmp_path / "data.npy", rng.standard_normal((8, 16, 16, 8)).astype("f4"))
    report = assert_runs_whole(tmp_path / "slice.keras", "edgetpu", tmp_path / "out")
    assert rules_applied(report) == ["strided_slice_unit_steps"]
