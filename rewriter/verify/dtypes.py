"""Data types said, not guessed: user data is converted to an input's dtype only when exact.

A ``.npy``/``.npz`` array whose dtype differs from the model input's is converted by
:func:`convert`, which says what the conversion did:

* exact (every value survives the round trip: int64 values within +-2^24 into float32, bool
  into any number, float32 into float64, integers into a wider integer): converted, and the
  data section records the file's own dtype;
* float into a narrower float within its range (float64 into float32): rounded to nearest,
  relative error at most 2^-24 for float32 (a note, as any float64 -> float32 cast);
* integers into a float beyond its exact range (int64 into float32 beyond 2^24): converted
  with a warning stating the largest absolute error the conversion made (measured);
* refused (exit 2): complex, strings and objects; floats beyond the target's finite range (they
  would become Inf); non-integral floats into an integer input; integers out of an integer
  input's range; values other than 0/1 into a bool input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rewriter.errors import UserError


@dataclass(frozen=True)
class Conversion:
    """What :func:`convert` did to one input's array."""

    file_dtype: str
    dtype: str
    exact: bool
    note: str = ""      # said in the data section's notes
    warning: str = ""   # said in the summary and the data section's warnings


def convert(arr: np.ndarray, dt: np.dtype, where: str, name: str
            ) -> tuple[np.ndarray, Conversion | None]:
    """``arr`` as ``dt`` and what was done (None when it already is ``dt``); UserError when the
    conversion would change values in a way no tolerance can account for."""
    src = arr.dtype
    if src == dt:
        return arr, None
    what = f"{where}: input {name!r}: {src} data into a {dt} input"
    if src.kind not in "fiub":
        raise UserError(f"{what}: cannot convert ({src} is not a real number type); "
                        f"save the data as {dt}")
    with np.errstate(all="ignore"):  # out-of-range values are found and named below
        out = arr.astype(dt)
    if _round_trips(arr, out):
        return out, Conversion(src.name, dt.name, True,
                               note=f"input {name!r}: {src} data converted to {dt} exactly")
    if dt.kind == "b":
        raise UserError(f"{what}: holds values other than 0 and 1; save it as bool")
    if dt.kind in "iu":
        why = ("holds non-integral values" if src.kind == "f" and not np.all(
            np.equal(np.mod(arr[np.isfinite(arr)], 1), 0)) else
               f"holds values outside {dt}'s range [{np.iinfo(dt).min}, {np.iinfo(dt).max}]")
        raise UserError(f"{what}: {why}; save the data as {dt}")
    finite = arr[np.isfinite(arr)] if src.kind == "f" else arr
    limit = float(np.finfo(dt).max)
    if finite.size and float(np.max(np.abs(finite.astype(np.float64)))) > limit:
        raise UserError(f"{what}: holds values beyond {dt}'s range (|x| > {limit:.4g}), which "
                        f"would become Inf; rescale the data or save it as {dt}")
    if src.kind == "f":  # a narrower float, within range: rounded to nearest
        eps = float(np.finfo(dt).eps) / 2
        return out, Conversion(src.name, dt.name, False, note=(
            f"input {name!r}: {src} data rounded to {dt} (relative error at most {eps:.3g})"))
    # long double holds every int64 exactly on x86-64 (a 64-bit mantissa); float64 elsewhere
    wide = np.longdouble
    err = float(np.max(np.abs(out.astype(wide) - arr.astype(wide))))
    exact_to = 2 ** (np.finfo(dt).nmant + 1)
    return out, Conversion(src.name, dt.name, False, warning=(
        f"{what}: values beyond +-2^{np.finfo(dt).nmant + 1} ({exact_to}) are not exact in {dt};"
        f" converted with a largest absolute error of {err:.6g} (save the data as {dt}, or "
        "scale it, to say what you mean)"))


def _round_trips(arr: np.ndarray, out: np.ndarray) -> bool:
    """True when every value of ``arr`` comes back from ``out`` unchanged (NaN as NaN)."""
    with np.errstate(all="ignore"):
        back = out.astype(arr.dtype)
    if arr.dtype.kind == "f":
        return bool(np.array_equal(back, arr, equal_nan=True))
    return bool(np.array_equal(back, arr))
