"""Constraint kinds: each a named predicate whose rule text is formatted from the table's data.

A table constrains an op with kinds defined once here (:data:`KINDS`): ``dtypes``, ``rank_max``,
``stride_range``, ... The rule text is a template over the table's value, and the predicate
returns the observed value when the constraint is violated, so every verdict reads like Vela's
("Stride must be in [1, 3]: observed 4x1"). A predicate whose facts are unknown does not judge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rewriter.opfacts import OpFacts, Shape


def _wxh(pair: tuple[int, int]) -> str:
    return f"{pair[1]}x{pair[0]}"


def _shape_str(shape: Shape | None) -> str:
    return "[" + ", ".join("?" if d is None or d < 0 else str(d) for d in shape or ()) + "]"


def _known(shape: Shape | None) -> bool:
    return shape is not None and all(d is not None and d >= 0 for d in shape)


@dataclass(frozen=True)
class Kind:
    """A constraint kind: its rule text (a template over the table's value) and its predicate.

    ``check(facts, value)`` returns the observed value as text when the op violates the
    constraint, or ``None`` when it passes or the facts it needs are unknown.
    """

    name: str
    template: str
    check: Callable[[OpFacts, Any], str | None]
    value_type: type | tuple[type, ...]

    def rule(self, value: Any) -> str:
        return self.template.format(**_template_args(value))


def _template_args(value: Any) -> dict[str, Any]:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return {"lo": value[0], "hi": value[1], "value": value}
    if isinstance(value, list):
        return {"allowed": ", ".join(str(v) for v in value), "value": value}
    return {"max": value, "value": value}


def _check_dtypes(f: OpFacts, allowed: list[str]) -> str | None:
    for dtype in (f.dtype, f.out_dtype):
        if dtype is not None and dtype not in allowed:
            return dtype
    return None


def _check_rank_max(f: OpFacts, limit: int) -> str | None:
    for shape in (f.input_shape, f.output_shape):
        if shape is not None and len(shape) > limit:
            return f"rank {len(shape)} {_shape_str(shape)}"
    return None


def _check_static(f: OpFacts, _: bool) -> str | None:
    for shape in (f.input_shape, f.output_shape):
        if shape is not None and not _known(shape):
            return _shape_str(shape)
    return None


def _check_batch_one(f: OpFacts, _: bool) -> str | None:
    shape = f.input_shape
    if shape is not None and len(shape) >= 2 and shape[0] is not None and shape[0] > 1:
        return f"batch {shape[0]}"
    return None


def _check_inner_dims(f: OpFacts, limit: int) -> str | None:
    for shape in (f.input_shape, f.output_shape):
        if shape is not None and len(shape) > limit and _known(shape):
            if any(d > 1 for d in shape[:-limit]):
                return _shape_str(shape)
    return None


def _check_elements_max(f: OpFacts, limit: int) -> str | None:
    if not _known(f.input_shape):
        return None
    n = 1
    for d in f.input_shape:
        n *= d
    return f"{n} elements" if n > limit else None


def _check_hw_product_max(f: OpFacts, limit: int) -> str | None:
    s = f.input_shape
    if not _known(s) or len(s) < 3:
        return None
    h, w = s[-3], s[-2]
    return f"{w}x{h} = {w * h}" if w * h > limit else None


def _check_stride_range(f: OpFacts, bounds: list[int]) -> str | None:
    if f.strides is None:
        return None
    lo, hi = bounds
    return _wxh(f.strides) if any(not lo <= s <= hi for s in f.strides) else None


def _check_same_kernel_max(f: OpFacts, limit: int) -> str | None:
    if f.kernel is None or f.padding != "SAME":
        return None
    return f"{_wxh(f.kernel)} with SAME padding" if max(f.kernel) > limit else None


def _check_kernel_height_max(f: OpFacts, limit: int) -> str | None:
    return _wxh(f.kernel) if f.kernel is not None and f.kernel[0] > limit else None


def _check_dilation_equal(f: OpFacts, _: bool) -> str | None:
    d = f.dilation
    return _wxh(d) if d is not None and d[0] != d[1] else None


def _check_fused_activation(f: OpFacts, allowed: list[str]) -> str | None:
    a = f.fused_activation
    return a if a is not None and a not in allowed else None


def _norm_axes(f: OpFacts) -> tuple[int, ...] | None:
    if f.axes is None or f.input_shape is None:
        return None
    rank = len(f.input_shape)
    return tuple(sorted(a % rank for a in f.axes)) if rank else None


def _check_no_batch_axis(f: OpFacts, _: bool) -> str | None:
    axes = _norm_axes(f)
    return f"axis {list(axes)} of {_shape_str(f.input_shape)}" if axes and 0 in axes else None


def _check_mean_depth(f: OpFacts, _: bool) -> str | None:
    axes = _norm_axes(f)
    s = f.input_shape
    if axes is None or not _known(s) or len(s) != 4 or 3 not in axes:
        return None
    if 1 in (s[1], s[2], s[3]):
        return None
    return f"reduces axis 3 of {_shape_str(s)}"


def _check_reduced_axis_max(f: OpFacts, limit: int) -> str | None:
    axes = _norm_axes(f)
    if axes is None or not _known(f.input_shape):
        return None
    for a in axes:
        if f.input_shape[a] > limit:
            return f"axis {a} has {f.input_shape[a]} elements"
    return None


def _check_slice_strides_one(f: OpFacts, _: bool) -> str | None:
    st = f.slice_strides
    return str(list(st)) if st is not None and any(s != 1 for s in st) else None


def _check_version_max(f: OpFacts, limit: int) -> str | None:
    return f"version {f.version}" if f.version is not None and f.version > limit else None


_BOOL, _INT, _LIST = (bool,), (int,), (list,)

#: Every constraint kind a table may use: name -> rule text template and predicate.
KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("dtypes", "Tensors must be {allowed}", _check_dtypes, _LIST),
    Kind("rank_max", "Tensor rank must be at most {max}", _check_rank_max, _INT),
    Kind("static_shape", "Tensor shapes must be static", _check_static, _BOOL),
    Kind("batch_one", "Batch must be 1", _check_batch_one, _BOOL),
    Kind("inner_dims", "Only the {max} innermost dimension(s) may be larger than 1",
         _check_inner_dims, _INT),
    Kind("elements_max", "Input must have at most {max} elements", _check_elements_max, _INT),
    Kind("hw_product_max", "The product of IFM width and height must be at most {max}",
         _check_hw_product_max, _INT),
    Kind("stride_range", "Stride must be in [{lo}, {hi}]", _check_stride_range, _LIST),
    Kind("same_kernel_max", "With SAME padding, kernel width and height must be at most {max}",
         _check_same_kernel_max, _INT),
    Kind("kernel_height_max", "Kernel height must be at most {max}", _check_kernel_height_max,
         _INT),
    Kind("dilation_equal", "Dilation must be the same in x and y", _check_dilation_equal, _BOOL),
    Kind("fused_activation", "Fused activation must be one of {allowed}",
         _check_fused_activation, _LIST),
    Kind("no_batch_axis", "Must not reduce or split along the batch axis", _check_no_batch_axis,
         _BOOL),
    Kind("mean_depth_reduction", "Reduction over depth is only supported if any of h, w, c is 1",
         _check_mean_depth, _BOOL),
    Kind("reduced_axis_max", "Reduced axis must have at most {max} elements",
         _check_reduced_axis_max, _INT),
    Kind("slice_strides_one", "Slice strides must all be 1", _check_slice_strides_one, _BOOL),
    Kind("version_max", "Op version must be at most {max}", _check_version_max, _INT),
)}


@dataclass(frozen=True)
class Constraint:
    kind: str
    value: Any

    @property
    def rule(self) -> str:
        return KINDS[self.kind].rule(self.value)

    def violation(self, facts: OpFacts) -> tuple[str, str] | None:
        """(reason, observed) when ``facts`` violate this constraint, else None."""
        observed = KINDS[self.kind].check(facts, self.value)
        if observed is None:
            return None
        return f"{self.rule}: observed {observed}", observed
