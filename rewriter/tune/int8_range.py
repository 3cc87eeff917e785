"""Range-starved int8 tensors: which tensors one int8 scale cannot hold, and what the user can do.

:mod:`rewriter.verify.int8_layers` measures, for every quantised tensor of the artifact on the
verification samples, the share of its nonzero float values whose magnitude is below one
quantisation step (``below_step``), its peak and its median; more than
:data:`~rewriter.verify.int8_layers.STARVED` (50%) marks it *range-starved*. A mel power
spectrum is the typical case: it spans five decades, one int8 scale is set by its peak, and
nearly all of it reads as 0 or one step, which a later LOG turns into large errors.

:func:`diagnose` groups the starved tensors by where the model could hand over to a tensor that
is not starved, and lists, for this target, the remedies that apply:

1. ``cut``: run everything up to the first tensor after them that is clean (neither starved
   nor followed by a starved tensor) on the host CPU in float and start the model there (``rewrite run --inputs NODE``); offered when that
   node is one of the original model's and ``--inputs`` accepts it (the cut is tried).
2. ``compress``: compress the range before the tensor is quantised (a LOG, or a power such as
   x**0.3 or a square root, before it; a model change, then retrain or re-check).
3. ``16x8``: int16 activations with int8 weights, where the target's op table allows int16 for
   every op of the artifact (Ethos-U and TFLite Micro do for most ops; the Edge TPU runs 8-bit
   only); the share below one int16 step of the same range is given, and the remedy names
   ``--quantize 16x8``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rewriter.verify.int8_layers import STARVED, Int8Layers, OpError, range_section

if TYPE_CHECKING:  # pragma: no cover
    from rewriter.ir.model import Model
    from rewriter.targets import Target

#: Cut candidates tried per group (each try loads nothing: it cuts the graph in memory).
_CUT_TRIES = 3
#: Tensors a diagnosis names in its text (the table lists them all).
_NAMED = 6


def int16_blockers(target: Target, ops: Sequence[str]) -> list[str]:
    """The artifact's ops with no 16x8 kernel on the target (its table's ``[int16]`` section,
    or an op entry's (or the generic) dtypes excluding int16)."""
    out = []
    for op in dict.fromkeys(o for o in ops if o not in ("INPUT", "QUANTIZE", "DEQUANTIZE")):
        allowed = next((c.value for c in target.constraints_for(op) if c.kind == "dtypes"), None)
        if (allowed is not None and "int16" not in allowed) or (
                not target.no_16x8() and not target.int16_kernel(op)):
            out.append(op)
    return out


def diagnose(layers: Int8Layers, target: Target, original: Model | None = None,
             quantize: str = "int8") -> dict[str, Any]:
    """The range section of the report: threshold, starved tensors, and one diagnosis per
    group of starved tensors with the remedies for ``target``.

    The cut is offered at a node of ``original`` (the model as loaded): a tensor a rule made
    (``X/elementwise_ramps/ramps``) stands for the node ``X`` it rewrote, whose output comes
    after it."""
    section = range_section(layers)
    starved = layers.starved()
    if not starved:
        return section
    known = {n.name for n in original.graph_def.node} if original is not None else set()
    ops = [x.op for x in layers.ops]
    blockers = int16_blockers(target, ops)
    groups: dict[str | None, list[OpError]] = {}
    cuts: dict[str | None, OpError | None] = {}
    tried: dict[str, bool] = {}
    for row in starved:
        cut = next((c for c in layers.cut_after(row)[:_CUT_TRIES]
                    if _cuttable(original, _owner(c.node, known), tried)), None)
        key = _owner(cut.node, known) if cut is not None else None
        groups.setdefault(key, []).append(row)
        cuts[key] = cut
    total = layers.operators or sum(1 for x in layers.ops if x.index >= 0)
    for key, rows in groups.items():
        made_by = [x.index for x in layers.ops if key is not None and x.index >= 0
                   and _owner(x.node, known) == key]
        section["diagnosis"].append(
            _one(rows, cuts[key], key, total, target, blockers, quantize, made_by))
    return section


def _owner(node: str, known: set[str]) -> str | None:
    """``node`` if the original model has it, else the longest scope of it that is a node of
    the original model (the node a rule rewrote), else None."""
    parts = node.split("/")
    for k in range(len(parts), 0, -1):
        if "/".join(parts[:k]) in known:
            return "/".join(parts[:k])
    return None


def _cuttable(original: Model | None, node: str | None, tried: dict[str, bool]) -> bool:
    """Whether ``--inputs node`` cuts ``original`` (a node of it that separates the model)."""
    if original is None or node is None:
        return False
    if node not in tried:
        from rewriter.errors import UserError
        from rewriter.frontends.cut import apply_cut
        from rewriter.frontends.options import LoadOptions

        if node not in {n.name for n in original.graph_def.node}:
            tried[node] = False
        else:
            try:
                apply_cut(original, LoadOptions(inputs=[node]))
                tried[node] = True
            except (UserError, ValueError, KeyError):
                tried[node] = False
    return tried[node]


def _pct(v: float | None) -> str:
    return "?" if v is None else f"{100 * v:.1f}%"


def _one(rows: list[OpError], cut: OpError | None, node: str | None, total: int,
         target: Target, blockers: list[str], quantize: str,
         made_by: Sequence[int] = ()) -> dict[str, Any]:
    """One diagnosis; ``made_by``: execution indices of the operators whose output stands for
    the cut node (a rule's operators that rewrote it)."""
    worst = max(rows, key=lambda x: x.below_step or 0.0)
    names = ", ".join(f"{x.node} ({x.op})" for x in rows[:_NAMED]) + (
        f" and {len(rows) - _NAMED} more" if len(rows) > _NAMED else "")
    figures = (f"{_pct(worst.below_step)} of {worst.node}'s nonzero values are below one "
               f"{quantize} step ({worst.step:.3g}; peak {worst.ref_max_abs:.4g}, median "
               f"{worst.median_abs:.3g})")
    text = (f"range-starved int8 tensor{'s' if len(rows) > 1 else ''} {names}: {figures}, "
            "so they read as 0 or one step")
    remedies = []
    if cut is not None:
        moved = max(cut.index, *made_by) + 1  # through the op that makes the cut tensor
        remedies.append({
            "remedy": "cut", "applies": True, "node": node, "host_operators": moved,
            "short": f"`--inputs {node}` ({moved} operators move to the host)",
            "text": f"move the front end to the host: `--inputs {node}` starts the model at "
                    f"the first tensor after them from which on int8 holds every tensor "
                    f"({_pct(cut.below_step)} below one step); the {moved} of {total} "
                    f"operators that make it run on the host CPU in float, and "
                    f"--calibration/--data must then hold that tensor's values"})
    else:
        remedies.append({
            "remedy": "cut", "applies": False, "node": None, "short": None,
            "text": "no tensor after it that int8 holds separates the model (nothing for "
                    "--inputs to start at)"})
    remedies.append({
        "remedy": "compress", "applies": True,
        "short": "compress its range before quantisation (log, sqrt or x**0.3 where it is "
                 "made: a model change)",
        "text": "compress the range before the tensor is quantised (a model change): take the "
                "LOG, a square root or a power such as x**0.3 of it where it is made (e.g. a "
                "magnitude instead of a power spectrum, a log-mel from the STFT), then retrain "
                "or re-check the model"})
    int16 = target.artifact == "tflite" and not blockers and not target.no_16x8()
    at16 = ", ".join(f"{x.node.rsplit('/', 1)[-1]} {_pct(x.below_int16_step)}" for x in rows)
    left = [x for x in rows if (x.below_int16_step or 0.0) > STARVED]
    still = (f" ({len(left)} of {len(rows)} still starved at int16)" if left
             else " (none starved at int16)")
    if int16:
        text16 = (f"16x8 quantization (int16 activations, int8 weights): {target.title}'s op "
                  f"table allows int16 for every op of this artifact; at the int16 step of the "
                  f"same range, below one step: {at16}{still}: run the job again with "
                  f"--quantize 16x8")
    else:
        why = (f"{target.title} runs 8-bit tensors only (its op table's dtypes: "
               f"{', '.join(_generic_dtypes(target) or [])})" if _all_ops_blocked(target)
               else f"{target.no_16x8()}" if target.no_16x8()
               else f"{target.title}'s op table has no 16x8 kernel for {', '.join(blockers)}")
        text16 = f"16x8 quantization does not apply: {why}"
    short16 = (f"--quantize 16x8 ({len(left)} of {len(rows)} still starved at int16)"
               if int16 else None)
    remedies.append({"remedy": "16x8", "applies": int16, "short": short16, "text": text16})
    return {"tensors": [x.node for x in rows], "cut": node if cut is not None else None,
            "below_step": worst.below_step, "threshold": STARVED, "text": text,
            "figures": figures, "worst": worst.node,
            "remedies": remedies}


def _generic_dtypes(target: Target) -> list[str] | None:
    return next((list(c.value) for c in target.generic if c.kind == "dtypes"), None)


def _all_ops_blocked(target: Target) -> bool:
    """Whether int16 is excluded by the target's generic dtypes (not op by op)."""
    generic = _generic_dtypes(target)
    return generic is not None and "int16" not in generic


def lines(section: dict[str, Any] | None) -> list[str]:
    """One line per diagnosis, short: the tensors, the figures, the remedies that apply (the
    job's warning when the artifact fails verification; report.md has the full text)."""
    out = []
    for d in (section or {}).get("diagnosis") or []:
        named = list(dict.fromkeys([d["worst"], d["tensors"][-1]]))
        more = len(d["tensors"]) - len(named)
        shown = named + ([f"{more} more"] if more else [])
        ok = [r["short"] for r in d["remedies"] if r["applies"]]
        out.append(f"range-starved int8 tensor(s) {', '.join(shown)}: {d['figures']}; "
                   "remedies: " + "; ".join(f"({k}) {t}" for k, t in enumerate(ok, 1))
                   + " (report.md: Range-starved int8 tensors)")
    return out
