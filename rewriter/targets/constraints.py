"""Constraint kinds: each a named predicate whose rule text is formatted from the table's data.

A table constrains an op with kinds defined once here (:data:`KINDS`): ``dtypes``, ``rank_max``,
``stride_range``, ... The rule text is a template over the table's value, and the predicate
returns the observed value when the constraint is violated, so every verdict reads like Vela's
("Stride must be in [1, 3]: observed 4x1"). A predicate whose facts are unknown does not judge.
A kind of severity ``warning`` marks what a table says *might* not be mapped (the Edge TPU's
large reshapes, resize precision): the op stays supported and the verdict carries the warning.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rewriter.targets.opfacts import OpFacts, Shape


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
    severity: str = "error"  # "error": not mapped; "warning": might not be mapped

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


def _activations(f: OpFacts) -> list[Shape | None]:
    """Shapes of every non-constant tensor of the op (weights and constant operands aside)."""
    tensors = [t.shape for t in (*f.inputs, *f.outputs) if not t.const]
    return tensors or [f.input_shape, f.output_shape]


def _outer_non_one(shape: Shape | None, limit: int) -> bool:
    return (shape is not None and len(shape) > limit and _known(shape)
            and any(d > 1 for d in shape[:-limit]))


def _check_inner_dims(f: OpFacts, limit: int) -> str | None:
    for shape in _activations(f):
        if _outer_non_one(shape, limit):
            return _shape_str(shape)
    return None


def _check_output_inner_dims(f: OpFacts, limit: int) -> str | None:
    return _shape_str(f.output_shape) if _outer_non_one(f.output_shape, limit) else None


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
    """The op's axes, non-negative (negative ones counted from the input's rank)."""
    if f.axes is None:
        return None
    if all(a >= 0 for a in f.axes):
        return tuple(sorted(f.axes))
    if not f.input_shape:
        return None
    rank = len(f.input_shape)
    return tuple(sorted(a + rank if a < 0 else a for a in f.axes))


def _check_no_batch_axis(f: OpFacts, _: bool) -> str | None:
    axes = _norm_axes(f)
    if not axes or 0 not in axes:
        return None
    shape = f.output_shape if f.op == "PACK" else f.input_shape
    return f"axis {list(axes)} of {_shape_str(shape)}"


def _check_depth_multiple(f: OpFacts, multiple: int) -> str | None:
    axes, s = _norm_axes(f), f.input_shape
    if axes is None or not _known(s) or not s or len(s) - 1 not in axes:
        return None
    depth = s[-1]
    return f"reduces depth {depth} of {_shape_str(s)}" if depth > 1 and depth % multiple else None


def _check_concat_constants(f: OpFacts, _: bool) -> str | None:
    consts = [i for i, t in enumerate(f.inputs) if t.const]
    if not consts:
        return None
    if len(f.inputs) != 2:
        return f"{len(f.inputs)} inputs, input {consts[0]} a constant"
    bad = [(i, f.inputs[i].nonzero) for i in consts if f.inputs[i].nonzero != 0]
    if not bad:
        return None
    i, nz = bad[0]
    count = "unknown" if nz is None else str(nz)
    return f"constant input {i} {_shape_str(f.inputs[i].shape)} has {count} non-zero value(s)"


def _check_inputs_max(f: OpFacts, limit: int) -> str | None:
    return f"{len(f.inputs)} inputs" if len(f.inputs) > limit else None


def _check_alpha_inner_dims(f: OpFacts, limit: int) -> str | None:
    alpha = f.inputs[1].shape if len(f.inputs) > 1 else None
    return f"alpha {_shape_str(alpha)}" if _outer_non_one(alpha, limit) else None


def _check_io_rank3(f: OpFacts, _: bool) -> str | None:
    for shape in (f.input_shape, f.output_shape):
        if shape is None:
            continue
        if len(shape) > 4 or (len(shape) == 4 and shape[0] is not None and shape[0] != 1):
            return _shape_str(shape)
    return None


def _check_weights_format(f: OpFacts, allowed: list[str]) -> str | None:
    fmt = f.options.get("weights_format")
    return fmt if fmt is not None and fmt not in allowed else None


def _check_slice_masks(f: OpFacts, _: bool) -> str | None:
    masks = [f"{k} {f.options[k]}" for k in ("ellipsis_mask", "new_axis_mask")
             if f.options.get(k)]
    return ", ".join(masks) or None


def _check_reshape_layout(f: OpFacts, _: bool) -> str | None:
    """A reshape that regroups dimensions (not only adding or removing 1s) moves data."""
    a, b = f.input_shape, f.output_shape
    if not _known(a) or not _known(b):
        return None
    if [d for d in a if d != 1] == [d for d in b if d != 1]:
        return None
    n = 1
    for d in a:
        n *= d
    return f"{_shape_str(a)} -> {_shape_str(b)} ({n} elements)"


def _check_resize_sizes(f: OpFacts, _: bool) -> str | None:
    a, b = f.input_shape, f.output_shape
    return f"{_shape_str(a)} -> {_shape_str(b)}" if a is not None and b is not None else None


def _check_resize_scale(f: OpFacts, _: bool) -> str | None:
    a, b = f.input_shape, f.output_shape
    if not _known(a) or not _known(b) or len(a) != 4 or len(b) != 4:
        return None
    if tuple(a[1:3]) == (1, 1) or list(a) == list(b):
        return None
    corners = bool(f.options.get("align_corners", False))
    scales = []
    for i, o in ((a[1], b[1]), (a[2], b[2])):
        i, o = (i - 1, o - 1) if corners else (i, o)
        scales.append(o // i if i > 0 and o % i == 0 and o // i in (1, 2, 4, 8) else None)
    if None not in scales and (scales[0] == scales[1] or 1 in scales):
        return None
    return f"{_shape_str(a)} -> {_shape_str(b)}" + (" (align_corners)" if corners else "")


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


def _check_no_float_island(f: OpFacts, _: bool) -> str | None:
    if not f.float_island:
        return None
    return (f"float island around {f.related_op}" if f.related_op
            else f"{f.dtype or 'float32'} between DEQUANTIZE and QUANTIZE")


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
    Kind("no_batch_axis", "Must not operate along the batch axis", _check_no_batch_axis,
         _BOOL),
    Kind("depth_reduction_multiple",
         "A reduction over depth (the innermost dimension) needs a depth that is a multiple "
         "of {max}", _check_depth_multiple, _INT),
    Kind("concat_constant_zero_pad",
         "If any input is a compile-time constant, there must be only 2 inputs and the "
         "constant must be all zeros (a zero-padding op)", _check_concat_constants, _BOOL),
    Kind("inputs_max", "At most {max} input tensors", _check_inputs_max, _INT),
    Kind("alpha_inner_dims", "Alpha must be {max}-dimensional (only its innermost dimension "
         "larger than 1)", _check_alpha_inner_dims, _INT),
    Kind("io_rank3", "Input and output must be 3-dimensional tensors (batch 1)",
         _check_io_rank3, _BOOL),
    Kind("weights_format", "Weights must be in the {allowed} format", _check_weights_format,
         _LIST),
    Kind("output_inner_dims", "The output tensor must be {max}-dimensional (only its "
         "innermost dimension larger than 1)", _check_output_inner_dims, _INT),
    Kind("slice_masks_zero", "Ellipsis and new-axis masks must be 0", _check_slice_masks,
         _BOOL),
    Kind("reshape_may_not_map", "Certain reshapes might not be mapped for large tensor sizes",
         _check_reshape_layout, _BOOL, "warning"),
    Kind("resize_may_not_map", "Depending on input/output size, this operation might not be "
         "mapped, to avoid loss in precision", _check_resize_sizes, _BOOL, "warning"),
    Kind("resize_scale", "OFM height and width must be 1x/2x/4x/8x the IFM's (-1 each with "
         "align_corners), equal or 1 per axis, unless the IFM is 1x1 or the OFM equals it "
         "(an upscale: no downscale)", _check_resize_scale, _BOOL),
    Kind("mean_depth_reduction", "Reduction over depth is only supported if any of h, w, c is 1",
         _check_mean_depth, _BOOL),
    Kind("reduced_axis_max", "Reduced axis must have at most {max} elements",
         _check_reduced_axis_max, _INT),
    Kind("slice_strides_one", "Slice strides must all be 1", _check_slice_strides_one, _BOOL),
    Kind("version_max", "Op version must be at most {max}", _check_version_max, _INT),
    Kind("no_float_island", "Must not run in float inside an int8 model",
         _check_no_float_island, _BOOL),
)}


@dataclass(frozen=True)
class Constraint:
    kind: str
    value: Any

    @property
    def rule(self) -> str:
        return KINDS[self.kind].rule(self.value)

    @property
    def severity(self) -> str:
        return KINDS[self.kind].severity

    def violation(self, facts: OpFacts) -> tuple[str, str] | None:
        """(reason, observed) when ``facts`` violate this constraint, else None."""
        observed = KINDS[self.kind].check(facts, self.value)
        if observed is None:
            return None
        return f"{self.rule}: observed {observed}", observed
