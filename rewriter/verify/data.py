"""Input samples for verification and calibration, and where they came from.

A *sample* is one feed dict keyed by input name, each array at the input's full static shape
(batch included). Sources:

* ``.npy``: one array for a single-input model; shape ``S`` (one sample), ``S[1:]`` (one sample
  without its batch dimension) or ``(N, *S[1:])`` when the batch is 1 (N samples). Fed as stored.
* ``.npz``: arrays keyed by input name, each read as above (same N for every input); a
  single-input model also accepts a file with one array under any key.
* a directory of images (png, jpeg, gif, bmp), sorted by name, decoded with TensorFlow, converted
  to the input's channels (grayscale replicated to RGB, alpha dropped, RGB to luma for one
  channel) and resized to its height and width (bilinear, aspect ratio not kept). Pixels 0..255
  then reach the model in one of three ways (:func:`image_mapping`), never silently unscaled:
  raw, when the model scales them itself (a Rescaling/Normalization layer at its input, see
  :mod:`rewriter.verify.input_scaling`, or a uint8 input); mapped by a :class:`PixelMap`
  (``--pixel-range LO,HI`` or ``--pixel-norm MEAN/STD``); otherwise a :class:`UserError` naming
  ``--pixel-range``.
* seeded synthetic data, uniform per input in: ``--input-range``; else the range a
  ``--pixel-range`` names; else the one the model's input layer implies (0..255 when it takes raw
  pixels, else the inputs it maps to [-1, 1]); else [-1, 1] (integers: [0, 10)).

:func:`gather` returns a :class:`Data`: the samples and their provenance (source, count, shape,
observed min/max, non-finite count, how they were mapped), which ``report.json`` shows as
``data`` and from which ``rewrite verify`` can draw the same samples again (``recipe``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rewriter.errors import UserError
from rewriter.verify.dtypes import Conversion, convert

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp")
DEFAULT_RANGE = (-1.0, 1.0)
INT_RANGE = (0, 10)
#: Range = (lo, hi); lo/hi are floats, or per-channel arrays (last axis) from the model's layer.
Range = tuple[Any, Any]
PIXEL_HINT = ("give --pixel-range LO,HI (the range the model was trained on, e.g. 0,1 or -1,1) "
              "or --pixel-norm MEAN/STD")


class Spec(Protocol):
    """What a sample source needs to know about an input (``TensorSpec`` has it)."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str


def static(shape: Sequence[int | None]) -> tuple[int, ...]:
    """A concrete shape: unknown dimensions become 1."""
    return tuple(1 if d is None or d < 0 else int(d) for d in shape)


# ------------------------------------------------------------------------- pixel mapping
@dataclass(frozen=True)
class PixelMap:
    """How image pixels 0..255 become input values: linearly onto ``[lo, hi]``, or
    ``(p - mean) / std`` per channel (pixel units, RGB order)."""

    lo: float | None = None
    hi: float | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    def apply(self, pixels: np.ndarray) -> np.ndarray:
        if self.mean is not None and self.std is not None:
            return (pixels - np.asarray(self.mean)) / np.asarray(self.std)
        assert self.lo is not None and self.hi is not None
        return self.lo + pixels / 255.0 * (self.hi - self.lo)

    def value_range(self) -> Range:
        """What pixels 0..255 become (per channel for mean/std)."""
        if self.mean is not None and self.std is not None:
            a = (0.0 - np.asarray(self.mean)) / np.asarray(self.std)
            b = (255.0 - np.asarray(self.mean)) / np.asarray(self.std)
            return np.minimum(a, b), np.maximum(a, b)
        return float(self.lo), float(self.hi)  # type: ignore[arg-type]

    def describe(self) -> str:
        if self.mean is not None:
            return (f"pixels 0..255 mapped as (p - {_nums(self.mean)}) / {_nums(self.std)} "
                    "(--pixel-norm)")
        return f"pixels 0..255 mapped linearly to [{self.lo:g}, {self.hi:g}] (--pixel-range)"

    def to_json(self) -> dict[str, Any]:
        if self.mean is not None:
            return {"mean": list(self.mean), "std": list(self.std or ())}
        return {"range": [self.lo, self.hi]}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> PixelMap:
        if "mean" in d:
            return PixelMap(mean=tuple(d["mean"]), std=tuple(d["std"]))
        return PixelMap(lo=float(d["range"][0]), hi=float(d["range"][1]))


def _nums(v: Sequence[float] | None) -> str:
    v = list(v or ())
    return f"{v[0]:g}" if len(v) == 1 else "[" + ", ".join(f"{x:g}" for x in v) + "]"


def _floats(text: str, flag: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise UserError(f"{flag} {text!r}: not a comma-separated list of numbers") from None


def parse_pixel_range(text: str) -> PixelMap:
    """``--pixel-range LO,HI``."""
    vals = _floats(text, "--pixel-range")
    if len(vals) != 2 or not vals[0] < vals[1]:
        raise UserError(f"--pixel-range {text!r} is not LO,HI with LO < HI (e.g. 0,1 or -1,1)")
    return PixelMap(lo=vals[0], hi=vals[1])


def parse_pixel_norm(text: str) -> PixelMap:
    """``--pixel-norm MEAN/STD``, each one number or one per channel (pixel units, RGB)."""
    mean_text, sep, std_text = text.partition("/")
    if not sep:
        raise UserError(f"--pixel-norm {text!r} is not MEAN/STD (e.g. "
                        "123.7,116.3,103.5/58.4,57.1,57.4)")
    mean, std = _floats(mean_text, "--pixel-norm"), _floats(std_text, "--pixel-norm")
    if len(mean) != len(std) and 1 not in (len(mean), len(std)):
        raise UserError(f"--pixel-norm {text!r}: MEAN and STD have different lengths")
    if any(s <= 0 for s in std):
        raise UserError(f"--pixel-norm {text!r}: STD must be positive")
    return PixelMap(mean=mean, std=std)


def pixel_map_from_args(pixel_range: str | None, pixel_norm: str | None) -> PixelMap | None:
    if pixel_range and pixel_norm:
        raise UserError("give --pixel-range or --pixel-norm, not both")
    if pixel_range:
        return parse_pixel_range(pixel_range)
    return parse_pixel_norm(pixel_norm) if pixel_norm else None


# ------------------------------------------------------------------------- provenance
@dataclass
class Data:
    """Samples and where they came from (``report.json``'s ``data`` entries)."""

    samples: list[dict[str, np.ndarray]]
    source: str  # a path, or "synthetic"
    format: str  # npy | npz | images | synthetic
    mapping: dict[str, str]  # input name -> how values were mapped to it
    notes: list[str] = field(default_factory=list)
    recipe: dict[str, Any] = field(default_factory=dict)  # how to draw the same samples again
    warnings: list[str] = field(default_factory=list)  # the data and the model disagree
    file_dtypes: dict[str, str] = field(default_factory=dict)  # the file's own, when converted

    @property
    def synthetic(self) -> bool:
        return self.format == "synthetic"

    def nonfinite(self) -> int:
        return int(sum(np.size(a) - np.isfinite(a).sum() for s in self.samples
                       for a in s.values() if np.asarray(a).dtype.kind == "f"))

    def head(self, n: int) -> Data:
        """The first ``n`` samples, same provenance."""
        recipe = dict(self.recipe) | {"samples": min(n, len(self.samples))}
        return Data(self.samples[:n], self.source, self.format, dict(self.mapping),
                    list(self.notes), recipe, list(self.warnings), dict(self.file_dtypes))

    def tail(self, n: int) -> Data:
        """The last ``n`` samples, same provenance (the recipe skips the others)."""
        n = min(n, len(self.samples))
        skip = len(self.samples) - n + int(self.recipe.get("skip", 0))
        recipe = dict(self.recipe) | {"samples": n, "skip": skip}
        return Data(self.samples[len(self.samples) - n:], self.source, self.format,
                    dict(self.mapping), list(self.notes), recipe, list(self.warnings),
                    dict(self.file_dtypes))

    def to_json(self) -> dict[str, Any]:
        inputs: dict[str, Any] = {}
        for name in self.samples[0] if self.samples else ():
            arr = np.stack([np.asarray(s[name]) for s in self.samples])
            fin = arr[np.isfinite(arr)] if arr.dtype.kind == "f" else arr
            inputs[name] = {
                "shape": list(arr.shape[1:]), "dtype": arr.dtype.name,
                "file_dtype": self.file_dtypes.get(name, arr.dtype.name),
                "min": float(fin.min()) if fin.size else None,
                "max": float(fin.max()) if fin.size else None,
                "nonfinite": int(arr.size - fin.size), "mapping": self.mapping.get(name, "")}
        return {"source": self.source, "format": self.format, "samples": len(self.samples),
                "inputs": inputs, "notes": list(self.notes), "warnings": list(self.warnings),
                "recipe": self.recipe}

    def describe(self) -> str:
        what = "synthetic" if self.synthetic else self.source
        return f"{len(self.samples)} {'synthetic ' if self.synthetic else ''}sample(s)" + (
            "" if self.synthetic else f" from {what}")


def gather(path: str | os.PathLike | None, specs: Sequence[Spec], *, samples: int,
           seed: int = 0, ranges: Mapping[str, Range] | None = None,
           pixels: PixelMap | None = None, scaling: Mapping[str, Any] | None = None) -> Data:
    """The samples for ``specs`` from ``path`` (or synthetic when None), with provenance.

    ``scaling`` is :func:`rewriter.verify.input_scaling.input_scaling` of the model (input name
    -> affine map at its start); it decides how images are fed and the synthetic default range.
    """
    scaling = scaling or {}
    if path is None:
        resolved, how = synthetic_ranges(specs, ranges or {}, pixels, scaling)
        data = synthetic_inputs(specs, samples, seed=seed, ranges=resolved)
        recipe = {"source": "synthetic", "seed": seed, "samples": samples,
                  "ranges": {k: [_jsonable(v[0]), _jsonable(v[1])] for k, v in resolved.items()}}
        return Data(data, "synthetic", "synthetic", how, [], recipe)
    p = Path(path)
    recipe = {"source": str(p.resolve()), "samples": samples}
    if p.is_dir():
        mapping = image_mapping(p, specs, pixels, scaling)
        loaded, notes = _images(p, specs, {k: m for k, (m, _) in mapping.items()}, samples)
        recipe["pixels"] = pixels.to_json() if pixels is not None else "raw"
        warnings = [f"{p}: input {k!r}: {how}" for k, (_, how) in mapping.items()
                    if "scaled twice" in how]
        return Data(loaded, str(path), "images", {k: how for k, (_, how) in mapping.items()},
                    notes, recipe, warnings)
    seen: dict[str, Conversion] = {}
    loaded = load_inputs(p, specs, samples, seen=seen)
    return Data(loaded, str(path), p.suffix.lower().lstrip("."),
                {s.name: "as stored (no mapping)" for s in specs},
                [c.note for c in seen.values() if c.note], recipe,
                _range_warnings(p, loaded, scaling) + [c.warning for c in seen.values()
                                                       if c.warning],
                {k: c.file_dtype for k, c in seen.items()})


def from_recipe(recipe: Mapping[str, Any], specs: Sequence[Spec],
                scaling: Mapping[str, Any] | None = None) -> Data:
    """The samples a ``Data.recipe`` describes, drawn again (UserError when its file is gone)."""
    skip = int(recipe.get("skip") or 0)
    if skip:
        whole = from_recipe(dict(recipe) | {"skip": 0,
                                            "samples": skip + int(recipe["samples"])},
                            specs, scaling)
        return whole.tail(int(recipe["samples"]))
    n = int(recipe.get("samples") or 1)
    if recipe.get("source") == "synthetic":
        ranges = {k: (np.asarray(v[0], np.float64) if isinstance(v[0], list) else v[0],
                      np.asarray(v[1], np.float64) if isinstance(v[1], list) else v[1])
                  for k, v in (recipe.get("ranges") or {}).items()}
        return gather(None, specs, samples=n, seed=int(recipe.get("seed") or 0), ranges=ranges,
                      scaling=scaling)
    path = Path(recipe["source"])
    if not path.exists():
        raise UserError(f"{path}: no longer exists")
    if path.is_dir():
        how = recipe.get("pixels", "raw")
        pixels = None if how == "raw" else PixelMap.from_json(how)
        loaded, notes = _images(path, specs, {s.name: pixels for s in specs}, n)
        text = pixels.describe() if pixels is not None else "raw pixels 0..255"
        return Data(loaded, str(path), "images", {s.name: text for s in specs}, notes,
                    dict(recipe))
    return gather(path, specs, samples=n, scaling=scaling)


def _jsonable(v: Any) -> Any:
    return [float(x) for x in np.ravel(v)] if np.ndim(v) else float(v)


def _range_warnings(p: Path, samples: list[dict[str, np.ndarray]],
                    scaling: Mapping[str, Any]) -> list[str]:
    """A note when stored data looks pre-scaled but the model scales raw pixels itself."""
    notes = []
    for name, sc in scaling.items():
        if not sc.takes_pixels or not samples or name not in samples[0]:
            continue
        hi = max(float(np.nanmax(s[name])) for s in samples)
        if hi <= 1.5:
            notes.append(f"{p}: input {name!r} is at most {hi:.3g}, but the model's "
                         f"{sc.describe()} takes raw pixels ({sc.pixels_text()})")
    return notes


def synthetic_ranges(specs: Sequence[Spec], ranges: Mapping[str, Range],
                     pixels: PixelMap | None, scaling: Mapping[str, Any]
                     ) -> tuple[dict[str, Range], dict[str, str]]:
    """Each float input's synthetic range, and why that range (for the report)."""
    out: dict[str, Range] = {}
    how: dict[str, str] = {}
    for spec in specs:
        kind = np.dtype(spec.dtype).kind
        if spec.name in ranges:
            out[spec.name] = ranges[spec.name]
            how[spec.name] = f"uniform in {_range_text(ranges[spec.name])} (--input-range)"
        elif kind != "f":
            out[spec.name] = INT_RANGE if kind in "iu" else (0, 2)
            how[spec.name] = f"uniform integers in [{out[spec.name][0]}, {out[spec.name][1]})"
        elif pixels is not None:
            out[spec.name] = pixels.value_range()
            how[spec.name] = (f"uniform in {_range_text(out[spec.name])}, what "
                              f"{pixels.describe()} gives")
        elif spec.name in scaling and scaling[spec.name].takes_pixels:
            out[spec.name] = (0.0, 255.0)
            how[spec.name] = (f"uniform in [0, 255], raw pixels for the model's "
                              f"{scaling[spec.name].describe()}")
        elif spec.name in scaling:
            out[spec.name] = scaling[spec.name].preimage(-1.0, 1.0)
            how[spec.name] = (f"uniform in {_range_text(out[spec.name])}, what the model's "
                              f"{scaling[spec.name].describe()} maps to [-1, 1]")
        else:
            out[spec.name] = DEFAULT_RANGE
            how[spec.name] = ("uniform in [-1, 1] (default: the model states no input range; "
                              "give --input-range or real data)")
    return out, how


def _range_text(r: Range) -> str:
    lo, hi = r
    if np.ndim(lo) or np.ndim(hi):
        los = ", ".join(f"{v:.3g}" for v in np.ravel(lo))
        his = ", ".join(f"{v:.3g}" for v in np.ravel(hi))
        return f"[{los}] .. [{his}] per channel"
    return f"[{float(lo):g}, {float(hi):g}]"


def synthetic_inputs(specs: Sequence[Spec], samples: int = 1, seed: int = 0,
                     ranges: Mapping[str, Range] | None = None) -> list[dict[str, np.ndarray]]:
    """``samples`` seeded feed dicts, uniform within each input's range (per channel when the
    range's ends are arrays)."""
    rng = np.random.default_rng(seed)
    ranges = ranges or {}
    out: list[dict[str, np.ndarray]] = []
    for _ in range(samples):
        feeds: dict[str, np.ndarray] = {}
        for spec in specs:
            shape, dt = static(spec.shape), np.dtype(spec.dtype)
            if dt.kind == "f":
                lo, hi = ranges.get(spec.name, DEFAULT_RANGE)
                feeds[spec.name] = rng.uniform(np.asarray(lo), np.asarray(hi),
                                               size=shape).astype(dt)
            elif dt.kind in "iu":
                lo, hi = ranges.get(spec.name, INT_RANGE)
                feeds[spec.name] = rng.integers(int(lo), int(hi), size=shape).astype(dt)
            elif dt.kind == "b":
                feeds[spec.name] = rng.integers(0, 2, size=shape).astype(dt)
            else:
                raise UserError(f"cannot synthesise data for input {spec.name!r} of dtype "
                                f"{spec.dtype}; give --inputs")
        out.append(feeds)
    return out


# ------------------------------------------------------------------------- files
def load_inputs(path: str | os.PathLike, specs: Sequence[Spec], samples: int | None = None,
                pixels: Mapping[str, PixelMap | None] | None = None,
                seen: dict[str, Conversion] | None = None) -> list[dict[str, np.ndarray]]:
    """Samples from a ``.npy``/``.npz`` file or an image directory (at most ``samples``);
    ``seen`` receives the dtype conversions made (input name -> :class:`Conversion`).

    An image directory needs ``pixels`` (input name -> its :class:`PixelMap`, None for raw
    pixels), normally from :func:`image_mapping`; :func:`gather` does both.
    """
    p = Path(path)
    if not p.exists():
        raise UserError(f"{p}: no such file or directory")
    if p.is_dir():
        if pixels is None:
            raise UserError(f"{p}: images need a pixel mapping; {PIXEL_HINT}")
        result = _images(p, specs, pixels, samples)[0]
    elif p.suffix.lower() == ".npy":
        result = _npy(p, specs, seen)
    elif p.suffix.lower() == ".npz":
        result = _npz(p, specs, seen)
    else:
        raise UserError(f"{p}: input data must be a .npy or .npz file or a directory of images")
    if not result:
        raise UserError(f"{p}: holds no samples")
    return result[:samples] if samples else result


def _npy(p: Path, specs: Sequence[Spec], seen: dict[str, Conversion] | None = None
         ) -> list[dict[str, np.ndarray]]:
    if len(specs) != 1:
        names = ", ".join(s.name for s in specs)
        raise UserError(f"{p}: a .npy file feeds a single-input model; this one has inputs "
                        f"{names}: give a .npz keyed by input name")
    arr = _load_array(p)
    return [{specs[0].name: a} for a in _split(arr, specs[0], str(p), seen)]


def _npz(p: Path, specs: Sequence[Spec], seen: dict[str, Conversion] | None = None
         ) -> list[dict[str, np.ndarray]]:
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
    per_input = {s.name: _split(arrays[s.name], s, f"{p}[{s.name}]", seen) for s in specs}
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


def _split(arr: np.ndarray, spec: Spec, where: str,
           seen: dict[str, Conversion] | None = None) -> list[np.ndarray]:
    """One array per sample, each at the input's full static shape and dtype (converted only
    when exact, else refused or said: :func:`rewriter.verify.dtypes.convert`, recorded in
    ``seen``)."""
    shape = static(spec.shape)
    fits = (arr.shape == shape or arr.shape == shape[1:] or (
        shape and shape[0] == 1 and arr.ndim == len(shape) and arr.shape[1:] == shape[1:]))
    if fits:
        arr, how = convert(arr, np.dtype(spec.dtype), where, spec.name)
        if how is not None and seen is not None:
            seen[spec.name] = how
    if arr.shape == shape:
        return [arr]
    if arr.shape == shape[1:]:
        return [arr.reshape(shape)]
    if fits:
        return [arr[k:k + 1] for k in range(arr.shape[0])]
    raise UserError(f"{where}: shape {list(arr.shape)} does not fit input {spec.name!r} of "
                    f"shape {list(shape)} (give {list(shape)}, {list(shape[1:])} or "
                    f"[N, {', '.join(str(d) for d in shape[1:])}])")


# ------------------------------------------------------------------------- images
def image_mapping(p: Path, specs: Sequence[Spec], pixels: PixelMap | None,
                  scaling: Mapping[str, Any]) -> dict[str, tuple[PixelMap | None, str]]:
    """How pixels 0..255 of the images in ``p`` reach each input: (map or None for raw, why).

    Raises :class:`UserError` (naming ``--pixel-range``) when nothing says how."""
    if len(specs) != 1:
        raise UserError(f"{p}: an image directory feeds a single-input model; give a .npz")
    spec = specs[0]
    sc = scaling.get(spec.name)
    kind = np.dtype(spec.dtype).kind
    if pixels is not None:
        how = pixels.describe()
        if sc is not None and sc.takes_pixels:
            how += (f"; the model's {sc.describe()} already takes raw pixels "
                    f"({sc.pixels_text()}), so they are scaled twice")
        return {spec.name: (pixels, how)}
    if np.dtype(spec.dtype) == np.uint8:
        return {spec.name: (None, "raw pixels 0..255 (the input is uint8)")}
    if sc is not None and sc.takes_pixels:
        return {spec.name: (None, f"raw pixels 0..255, scaled by the model's {sc.describe()}: "
                                  f"{sc.pixels_text()}")}
    if sc is not None and kind == "f":
        lo, hi = sc.preimage(-1.0, 1.0)
        raise UserError(f"{p}: input {spec.name!r} starts with {sc.describe()}, and "
                        f"{sc.pixels_text()}, not a normalised range (it expects about "
                        f"[{float(np.min(lo)):.3g}, {float(np.max(hi)):.3g}]); " + PIXEL_HINT)
    raise UserError(f"{p}: images hold pixels 0..255 and input {spec.name!r} has no Rescaling or "
                    f"Normalization layer to map them; " + PIXEL_HINT)


def _images(p: Path, specs: Sequence[Spec], pixels: Mapping[str, PixelMap | None],
            samples: int | None) -> tuple[list[dict[str, np.ndarray]], list[str]]:
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
    out, seen = [], []
    for f in files:
        img, native = _image(f, shape, spec, pixels.get(spec.name))
        out.append({spec.name: img})
        seen.append(native)
    return out, [_image_note(seen, shape)]


_CHANNELS = {1: "grayscale", 2: "grayscale+alpha", 3: "RGB", 4: "RGBA"}


def _image_note(seen: list[tuple[int, int, int]], shape: tuple[int, ...]) -> str:
    """What decoding did: channel conversions and resizing, with counts."""
    want = _CHANNELS[shape[-1]]
    conv: dict[str, int] = {}
    for _, _, c in seen:
        key = _CHANNELS.get(c, f"{c}-channel") + ("" if c == shape[-1] else f" -> {want}")
        conv[key] = conv.get(key, 0) + 1
    sizes = {(h, w) for h, w, _ in seen}
    target = (shape[1], shape[2])
    resized = sum(1 for h, w, _ in seen if (h, w) != target)
    size_text = (f"{resized} resized to {target[0]}x{target[1]} (bilinear, aspect ratio not "
                 f"kept; {len(sizes)} source size(s), e.g. {max(sizes)[0]}x{max(sizes)[1]})"
                 if resized else f"all already {target[0]}x{target[1]}")
    channel_text = ", ".join(f"{n} {k}" for k, n in sorted(conv.items()))
    return f"{len(seen)} image(s) decoded: {channel_text}; {size_text}"


def _image(f: Path, shape: tuple[int, ...], spec: Spec,
           pixels: PixelMap | None) -> tuple[np.ndarray, tuple[int, int, int]]:
    import tensorflow as tf

    try:
        img = tf.io.decode_image(f.read_bytes(), channels=0, expand_animations=False)
    except (tf.errors.InvalidArgumentError, OSError) as exc:
        raise UserError(f"{f}: cannot decode image ({str(exc).splitlines()[0][:120]})") from None
    native = (int(img.shape[0]), int(img.shape[1]), int(img.shape[2]))
    img = _to_channels(tf.cast(img, tf.float32), native[2], shape[-1])
    img = tf.image.resize(img, shape[1:3], method="bilinear").numpy()
    if pixels is not None:
        img = pixels.apply(img.astype(np.float64))
    dt = np.dtype(spec.dtype)
    if dt.kind in "iu":
        img = np.clip(np.round(img), np.iinfo(dt).min, np.iinfo(dt).max)
    return img.reshape(shape).astype(dt), native


def _to_channels(img: Any, have: int, want: int) -> Any:
    """Grayscale replicated, alpha dropped, RGB to luma (ITU-R 601), as ``want`` needs."""
    import tensorflow as tf

    if have in (2, 4):  # drop alpha
        img, have = img[..., : have - 1], have - 1
    if have == want:
        return img
    if have == 1 and want in (3, 4):
        img = tf.image.grayscale_to_rgb(img)
        return tf.concat([img, tf.fill(tf.shape(img[..., :1]), 255.0)], -1) if want == 4 else img
    if have == 3 and want == 1:
        return tf.image.rgb_to_grayscale(img)
    if have == 3 and want == 4:
        return tf.concat([img, tf.fill(tf.shape(img[..., :1]), 255.0)], -1)
    raise UserError(f"cannot convert a {have}-channel image to {want} channels")


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
