"""Input data: images reach the model mapped the way it expects, never unscaled in silence; the
input layer's scaling is found and measured; every source says where its samples came from."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rewriter.errors import UserError
from rewriter.frontends import load_model
from rewriter.verify.data import (
    from_recipe,
    gather,
    parse_pixel_norm,
    parse_pixel_range,
    pixel_map_from_args,
)
from rewriter.verify.input_scaling import input_scaling


def _save(model, path):
    model.save(path)
    return load_model(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Three 8x8 RGB nets: bare, with Rescaling(1/127.5, -1), with a Normalization adapted to
    data in [0, 1] (so raw pixels would land far outside its range)."""
    import keras

    d = tmp_path_factory.mktemp("scaling")
    layers = keras.layers

    def net(pre):
        inp = keras.Input((8, 8, 3), batch_size=1, name="image")
        x = pre(inp) if pre else inp
        x = layers.GlobalAveragePooling2D()(layers.Conv2D(4, 3)(x))
        return keras.Model(inp, layers.Dense(2, name="logits")(x))

    norm = layers.Normalization(mean=[0.5, 0.4, 0.3], variance=[0.04, 0.09, 0.01])
    return {"bare": _save(net(None), d / "bare.keras"),
            "rescaling": _save(net(layers.Rescaling(1 / 127.5, offset=-1)), d / "r.keras"),
            "normalization": _save(net(norm), d / "n.keras")}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Five RGB PNGs of 12x10, one grayscale PNG of 8x8 (pixels known)."""
    import tensorflow as tf

    d = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    pixels = []
    for k in range(5):
        img = rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)
        pixels.append(img)
        (d / f"{k}.png").write_bytes(tf.io.encode_png(img).numpy())
    gray = np.full((8, 8, 1), 200, np.uint8)
    (d / "9_gray.png").write_bytes(tf.io.encode_png(gray).numpy())
    return d


def test_rescaling_layer_is_found_and_measured(models):
    sc = input_scaling(models["rescaling"])["image"]
    assert sc.scale == pytest.approx([1 / 127.5] * 3) and sc.offset == pytest.approx([-1.0] * 3)
    assert sc.takes_pixels and sc.image(0, 255) == pytest.approx((-1.0, 1.0))
    assert "rescaling" in sc.describe()


def test_normalization_layer_is_measured_per_channel(models):
    sc = input_scaling(models["normalization"])["image"]
    assert sc.scale == pytest.approx([1 / 0.2, 1 / 0.3, 1 / 0.1], rel=1e-5)
    assert sc.offset == pytest.approx([-2.5, -0.4 / 0.3, -3.0], rel=1e-5)
    assert not sc.takes_pixels  # 0..255 would become [-3, 2547]
    lo, hi = sc.preimage(-1, 1)
    assert lo == pytest.approx([0.3, 0.1, 0.2]) and hi == pytest.approx([0.7, 0.7, 0.4])


def test_a_model_without_an_input_layer_has_no_scaling(models, samples):
    assert input_scaling(models["bare"]) == {}
    assert input_scaling(load_model(samples["keras"])) == {}


def test_tf_keras_rescaling_is_found_too(tmp_path):
    import tf_keras

    inp = tf_keras.Input((4, 4, 1), batch_size=1, name="x")
    out = tf_keras.layers.Conv2D(1, 1)(tf_keras.layers.Rescaling(1 / 255.0)(inp))
    tf_keras.Model(inp, out).save(tmp_path / "m.h5")
    sc = input_scaling(load_model(tmp_path / "m.h5"))["x"]
    assert sc.scale == pytest.approx([1 / 255.0]) and sc.takes_pixels


def test_images_without_a_mapping_exit_2_naming_pixel_range(models, images):
    with pytest.raises(UserError, match="no Rescaling or Normalization layer.*--pixel-range"):
        gather(images, models["bare"].inputs, samples=4)


def test_images_for_a_normalization_that_expects_0_1_are_refused(models, images):
    m = models["normalization"]
    with pytest.raises(UserError, match=r"not a normalised range.*--pixel-range"):
        gather(images, m.inputs, samples=4, scaling=input_scaling(m))


def test_pixel_range_maps_0_255_linearly(models, images):
    d = gather(images, models["bare"].inputs, samples=6, pixels=parse_pixel_range("-1,1"))
    x = np.stack([s["image"] for s in d.samples])
    assert x.shape == (6, 1, 8, 8, 3) and x.min() >= -1 and x.max() <= 1
    gray = d.samples[5]["image"]  # 200 everywhere, replicated to RGB
    assert gray == pytest.approx(np.full((1, 8, 8, 3), -1 + 2 * 200 / 255), abs=1e-6)
    info = d.to_json()
    assert info["inputs"]["image"]["mapping"].startswith("pixels 0..255 mapped linearly to "
                                                         "[-1, 1]")
    assert "5 RGB, 1 grayscale -> RGB" in info["notes"][0]
    assert "5 resized to 8x8" in info["notes"][0]  # the gray one is 8x8 already


def test_pixel_norm_maps_per_channel(models, images):
    pm = parse_pixel_norm("100,150,200/50")
    d = gather(images, models["bare"].inputs, samples=6, pixels=pm)
    assert d.samples[5]["image"][0, 0, 0] == pytest.approx([2.0, 1.0, 0.0], abs=1e-6)


def test_rescaling_model_gets_raw_pixels_with_no_flag(models, images):
    m = models["rescaling"]
    d = gather(images, m.inputs, samples=6, scaling=input_scaling(m))
    assert d.samples[5]["image"] == pytest.approx(np.full((1, 8, 8, 3), 200.0))
    assert "raw pixels 0..255, scaled by the model's" in d.mapping["image"]
    assert d.warnings == []


def test_pixel_range_on_a_rescaling_model_warns_of_double_scaling(models, images):
    m = models["rescaling"]
    d = gather(images, m.inputs, samples=2, scaling=input_scaling(m),
               pixels=parse_pixel_range("0,1"))
    assert any("scaled twice" in w for w in d.warnings)


def test_synthetic_default_range_comes_from_the_model(models):
    for name, lo, hi in (("rescaling", 0.0, 255.0), ("bare", -1.0, 1.0)):
        m = models[name]
        d = gather(None, m.inputs, samples=8, scaling=input_scaling(m))
        x = np.stack([s["image"] for s in d.samples])
        assert lo <= x.min() < lo + 0.1 * (hi - lo) and hi - 0.1 * (hi - lo) < x.max() <= hi
        assert d.synthetic and d.to_json()["source"] == "synthetic"
    m = models["normalization"]
    d = gather(None, m.inputs, samples=8, scaling=input_scaling(m))
    x = np.stack([s["image"] for s in d.samples])
    assert x[..., 2].min() >= 0.2 - 1e-6 and x[..., 2].max() <= 0.4 + 1e-6  # per channel
    assert "per channel" in d.mapping["image"]


def test_pixel_range_sets_the_synthetic_range_too(models):
    d = gather(None, models["bare"].inputs, samples=4, pixels=parse_pixel_range("0,1"))
    x = np.stack([s["image"] for s in d.samples])
    assert 0 <= x.min() and x.max() <= 1


def test_provenance_names_source_count_shape_and_range(calibration, samples, tmp_path):
    model = load_model(samples["keras"])
    path = samples["keras"].parent / "calibration.npy"
    info = json.loads(json.dumps(gather(path, model.inputs, samples=5).to_json(),
                                 allow_nan=False))
    assert info["source"] == str(path) and info["format"] == "npy" and info["samples"] == 5
    image = info["inputs"]["image"]
    assert image["shape"] == [1, 32, 32, 3] and image["nonfinite"] == 0
    assert image["min"] == pytest.approx(float(calibration[:5].min()))
    assert image["max"] == pytest.approx(float(calibration[:5].max()))
    bad = calibration[:3].copy()
    bad[0, 0, 0, 0] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    d = gather(tmp_path / "nan.npy", model.inputs, samples=3)
    assert d.nonfinite() == 1 and d.to_json()["inputs"]["image"]["nonfinite"] == 1


def test_recipe_draws_the_same_samples_again(models, images):
    m = models["rescaling"]
    for path, pixels in ((None, None), (images, None), (images, parse_pixel_range("0,1"))):
        d = gather(path, m.inputs, samples=3, seed=5, pixels=pixels, scaling=input_scaling(m))
        again = from_recipe(json.loads(json.dumps(d.recipe)), m.inputs)
        assert len(again.samples) == 3
        for a, b in zip(d.samples, again.samples):
            np.testing.assert_array_equal(a["image"], b["image"])


@pytest.mark.parametrize("args, message", [
    (("0", None), "LO,HI"), (("1,0", None), "LO < HI"), (("a,b", None), "numbers"),
    (("0,1", "1/2"), "not both"), ((None, "1,2"), "MEAN/STD"), ((None, "1/0"), "positive"),
])
def test_bad_pixel_flags_are_refused(args, message):
    with pytest.raises(UserError, match=message):
        pixel_map_from_args(*args)
