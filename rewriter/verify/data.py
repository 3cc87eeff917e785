"""Input samples for verification and calibration: files, image directories, or synthetic data.

A *sample* is one feed dict keyed by input name, each array at the input's full static shape
(batch included). Sources:

* ``.npy``: one array for a single-input model; shape ``S`` (one sample), ``S[1:]`` (one sample
  without its batch dimension) or ``(N, *S[1:])`` when the batch is 1 (N samples).
* ``.npz``: arrays keyed by input name, each read as above (same N for every input); a
  single-input model also accepts a file with one array under any key.
* a directory of images (png, jpeg, gif, bmp), sorted by name, decoded with TensorFlow, resized
  to the input's height and width (bilinear), pixel values 0..255 or mapped linearly to the
  input's range when one is given.
* seeded synthetic data, uniform within each input's declared range (default [-1, 1] for
  floats, [0, 10) for integers).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from rewriter.errors import UserError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp")
DEFAULT_RANGE = (-1.0, 1.0)
Range = tuple[float, float]


class Spec(Protocol):
    """What a sample source needs to know about an input (``TensorSpec`` has it)."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str


def static(shape: Sequence[int | None]) -> tuple[int, ...]:
    """A concrete shape: unknown dimensions become 1."""
    return tuple(1 if d is None or d < 0 else int(d) for d in shape)


def synthetic_inputs(specs: Sequence[Spec], samples: int = 1, seed: int = 0,
                     ranges: Mapping[str, Range] | None = None) -> list[dict[str, np.ndarray]]:
    """``samples`` seeded feed dicts, uniform within each input's range."""
    rng = np.random.default_rng(seed)
    ranges = ranges or {}
    out: list[dict[str, np.ndarray]] = []
    for _ in range(samples):
        feeds: dict[str, np.ndarray] = {}
        for spec in specs:
            shape, dt = static(spec.shape), np.dtype(spec.dtype)
            if dt.kind == "f":
                lo, hi = ranges.get(spec.name, DEFAULT_RANGE)
                feeds[spec.name] = rng.uniform(lo, hi, size=shape).astype(dt)
            elif dt.kind in "iu":
                lo, hi = ranges.get(spec.name, (0, 10))
                feeds[spec.name] = rng.integers(int(lo), int(hi), size=shape).astype(dt)
            elif dt.kind == "b":
                feeds[spec.name] = rng.integers(0, 2, size=shape).astype(dt)
            else:
                raise UserError(f"cannot synthesise data for input {spec.name!r} of dtype "
                                f"{spec.dtype}; give --inputs")
        out.append(feeds)
    return out


def load_inputs(path: str | os.PathLike, specs: Sequence[Spec], samples: int | None = None,
                ranges: Mapping[str, Range] | None = None) -> list[dict[str, np.ndarray]]:
    """Samples from a ``.npy``/``.npz`` file or an image directory (at most ``samples``)."""
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such file or directory")
    if p.is_dir():
        result = _images(p, specs, ranges or {}, samples)
    elif p.suffix.lower() == ".npy":
        result = _npy(p, specs)
    elif p.suffix.lower() == ".npz":
        result = _npz(p, specs)
    else:
        raise UserError(f"{p}: input data must be a .npy or .npz file or a directory of images")
    if not result:
        raise UserError(f"{p}: holds no samples")
    return result[:samples] if samples else result


def _npy(p: Path, specs: Sequence[Spec]) -> list[dict[str, np.ndarray]]:
    if len(specs) != 1:
        names = ", ".join(s.name for s in specs)
        raise UserError(f"{p}: a .npy file feeds a single-input model; this one has inputs "
                        f"{names}: give a .npz keyed by input name")
    arr = _load_array(p)
    return [{specs[0].name: a} for a in _split(arr, specs[0], str(p))]


def _npz(p: Path, specs: Sequence[Spec]) -> list[dict[str, np.ndarray]]:
    try:
        with np.load(p, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise UserError(f"{p}: cannot read .npz ({exc})") from None
    if len(specs) == 1 and len(arrays) == 1 and specs[0].name not in arrays:
        arrays = {specs[0].name: next(iter(arrays.values()))}
    missing = [s.name for s in specs if s.name not in arrays]
    if missing:
        raise UserError(f"{p}: no array for input(s) {', '.join(missing)}; it holds "
                        f"{', '.join(sorted(arrays)) or 'nothing'}")
    per_input = {s.name: _split(arrays[s.name], s, f"{p}[{s.name}]") for s in specs}
    counts = {len(v) for v in per_input.values()}
    if len(counts) != 1:
        raise UserError(f"{p}: inputs hold different numbers of samples ({sorted(counts)})")
    n = counts.pop()
    return [{name: chunks[k] for name, chunks in per_input.items()} for k in range(n)]


def _load_array(p: Path) -> np.ndarray:
    try:
        return np.load(p, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise UserError(f"{p}: cannot read .npy ({exc})") from None


def _split(arr: np.ndarray, spec: Spec, where: str) -> list[np.ndarray]:
    """One array per sample, each at the input's full static shape and dtype."""
    shape = static(spec.shape)
    dt = np.dtype(spec.dtype)
    if arr.dtype.kind not in "fiub":
        raise UserError(f"{where}: dtype {arr.dtype} cannot feed input {spec.name!r} ({dt})")
    if arr.shape == shape:
        return [arr.astype(dt)]
    if arr.shape == shape[1:]:
        return [arr.reshape(shape).astype(dt)]
    if shape and shape[0] == 1 and arr.ndim == len(shape) and arr.shape[1:] == shape[1:]:
        return [arr[k:k + 1].astype(dt) for k in range(arr.shape[0])]
    raise UserError(f"{where}: shape {list(arr.shape)} does not fit input {spec.name!r} of "
                    f"shape {list(shape)} (give {list(shape)}, {list(shape[1:])} or "
                    f"[N, {', '.join(str(d) for d in shape[1:])}])")


def _images(p: Path, specs: Sequence[Spec], ranges: Mapping[str, Range],
            samples: int | None) -> list[dict[str, np.ndarray]]:
    if len(specs) != 1:
        raise UserError(f"{p}: an image directory feeds a single-input model; give a .npz")
    spec = specs[0]
    shape = static(spec.shape)
    if len(shape) != 4 or shape[-1] not in (1, 3, 4):
        raise UserError(f"{p}: input {spec.name!r} of shape {list(shape)} is not an NHWC image")
    files = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise UserError(f"{p}: no images ({', '.join(IMAGE_SUFFIXES)}) in this directory")
    files = files[:samples] if samples else files
    return [{spec.name: _image(f, shape, spec, ranges.get(spec.name))} for f in files]


def _image(f: Path, shape: tuple[int, ...], spec: Spec, rng: Range | None) -> np.ndarray:
    import tensorflow as tf

    try:
        img = tf.io.decode_image(f.read_bytes(), channels=shape[-1], expand_animations=False)
    except (tf.errors.InvalidArgumentError, OSError) as exc:
        raise UserError(f"{f}: cannot decode image ({str(exc).splitlines()[0][:120]})") from None
    img = tf.image.resize(tf.cast(img, tf.float32), shape[1:3], method="bilinear").numpy()
    if rng is not None:
        img = rng[0] + img / 255.0 * (rng[1] - rng[0])
    dt = np.dtype(spec.dtype)
    if dt.kind in "iu":
        img = np.clip(np.round(img), np.iinfo(dt).min, np.iinfo(dt).max)
    return img.reshape(shape).astype(dt)


def parse_ranges(items: Sequence[str], specs: Sequence[Spec]) -> dict[str, Range]:
    """``--input-range [NAME:]LO,HI`` values; without a name, the range applies to every input."""
    ranges: dict[str, Range] = {}
    names = [s.name for s in specs]
    for item in items:
        name, sep, values = item.rpartition(":")
        try:
            lo, hi = (float(v) for v in values.split(","))
        except ValueError:
            raise UserError(f"--input-range {item!r} is not [NAME:]LO,HI (e.g. 0,255)") from None
        if not lo < hi:
            raise UserError(f"--input-range {item!r}: LO must be below HI")
        if sep and name not in names:
            raise UserError(f"--input-range names unknown input {name!r}; inputs: "
                            f"{', '.join(names)}")
        for n in ([name] if sep else names):
            ranges[n] = (lo, hi)
    return ranges
