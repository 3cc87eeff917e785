"""Which exact form of an op is cheapest on a target, from measured costs (``op_tables/_form_costs.toml``).

Where a rule family has several exact forms the target runs (LayerNorm over channels as
Mean/Sub/Mul/Rsqrt, with its means as 1x1 convolutions, or through L2_NORMALIZATION; GroupNorm
likewise), the planner asks :func:`rank` for the order, cheapest first. The table is written by
``benchmarks/form_costs.py``: each form applied alone to Keras layers at stated shapes, exported in
full int8, judged by the target's own tool; its ``[meta]`` says the command, commit and versions.

The cost of a form on a target is summed over the table's cases that every compared form covers
(the forms are compared on the same layers), each case counted once per region of the model
whose input shape is nearest to it among the cases of the same rank (:func:`nearest`; a region
of a rank no common case has is not counted, and when no region is, the rules' own order
stands), and compared in this order:

1. ops left on the host CPU (Ethos-U: Vela's CPU ops), fewest first: placement before speed;
2. time: Ethos-U, Vela's NPU ms plus the host ms of its CPU ops (``rewriter.targets.cost``);
   CPU targets (:data:`CPU_TARGETS`), every op on the host by the same lower-bound CPU model;
3. memory: Vela's SRAM (Ethos-U), else the activation bytes live at the peak (the arena's main
   part); then the file's size (flash).

Figures within :data:`TIE` of each other count as equal, so the next criterion decides (Vela
prints microseconds; a 1% difference at one shape is no evidence of order at another). Where the
table measures no common case of the forms for the target (GPU, Edge TPU, ONNX: not measured),
the rules' own order stands (``Rule.priority``) and :func:`rank` says so.
"""

from __future__ import annotations

import math
from functools import cmp_to_key, lru_cache
from typing import Any

__all__ = ["TIE", "measured_as", "nearest", "rank", "table"]

#: Relative difference under which two figures count as equal.
TIE = 0.02


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    """The parsed table (empty when the file is absent)."""
    from rewriter.targets.tables import TABLE_DIR, tomllib

    path = TABLE_DIR / "_form_costs.toml"
    if not path.is_file():
        return {"meta": {}, "form": []}
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    return {"meta": data.get("meta", {}), "form": data.get("form", [])}


def _source() -> str:
    meta = table()["meta"]
    return (f"op_tables/_form_costs.toml ({meta.get('command', '?')}, commit "
            f"{str(meta.get('commit') or '?')[:12]}, {meta.get('date', '?')})")


def _figures(family: str, target: str, rule: str, cases: dict[str, int]) -> dict[str, float]:
    """The form's figures summed over ``cases`` (case -> how many of the model's regions it
    stands for), from its target's rows and the shared ``any`` ones."""
    out: dict[str, float] = {}
    for row in table()["form"]:
        if (row.get("family") == family and row.get("rule") == rule
                and row.get("case") in cases and row.get("target") in (target, "any")):
            for key, value in row.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[key] = out.get(key, 0) + value * cases[row["case"]]
    return out


def _shape_of(case: str, family: str) -> tuple[int, ...] | None:
    for row in table()["form"]:
        if row.get("case") == case and row.get("family") == family and row.get("shape"):
            return tuple(int(d) for d in row["shape"])
    return None


def nearest(shape: tuple[int | None, ...], cases: dict[str, tuple[int, ...]]) -> str | None:
    """The case whose shape is nearest ``shape``: the same rank first, then the smallest
    |log| ratio of element counts plus |log| ratio of the last (channel) dimension."""
    def distance(other: tuple[int, ...]) -> tuple[int, float]:
        dims = [d if d else 1 for d in shape]
        return (0 if len(other) == len(dims) else 1,
                abs(math.log(math.prod(dims) / math.prod(other)))
                + abs(math.log(dims[-1] / other[-1])))

    return min(sorted(cases), key=lambda c: distance(cases[c])) if cases and shape else None


#: Targets whose ops run on a CPU: their forms are compared by the shared rows (the CPU model's
#: cycles, then memory). Other targets without rows of their own (GPU, Edge TPU, ONNX, RKNN:
#: another currency, not measured) keep the rules' own order.
CPU_TARGETS = frozenset({"tflm", "tflite"})


def _cases(family: str, target: str, rule: str) -> set[str]:
    """Cases the table measured ``rule`` on, for ``target`` (Ethos-U: its own rows; CPU
    targets: the shared rows; others: none)."""
    kind = target if _is_vela(target) else "any" if target in CPU_TARGETS else None
    return {r["case"] for r in table()["form"]
            if r.get("family") == family and r.get("rule") == rule and r.get("target") == kind}


def _is_vela(target: str) -> bool:
    return target.startswith("ethos-u")


def measured_as(target: str) -> str:
    """The table's name for ``target``: itself when measured, else for an Ethos-U config the
    measured config of the same accelerator (``ethos-u55-64`` -> ``ethos-u55-128``: the same
    operators, fewer MACs per cycle), else ``target``."""
    names = {r.get("target") for r in table()["form"]}
    if target in names or not _is_vela(target):
        return target
    family = target.rsplit("-", 1)[0]
    same = sorted(n for n in names if isinstance(n, str) and n.rsplit("-", 1)[0] == family)
    return same[0] if same else target


def _key(fig: dict[str, float], vela: bool) -> list[float]:
    if vela:
        return [fig.get("cpu_ops", 0), fig.get("total_ms", 0.0), fig.get("sram_kib", 0.0),
                fig.get("file_bytes", 0)]
    return [0, fig.get("host_cycles", 0), fig.get("activation_peak_bytes", 0),
            fig.get("file_bytes", 0)]


def _cheaper(a: list[float], b: list[float]) -> bool:
    """Whether key ``a`` is below ``b``: the first criterion not within :data:`TIE` decides."""
    for x, y in zip(a, b, strict=True):
        if abs(x - y) > TIE * max(abs(x), abs(y)):
            return x < y
    return False


def rank(family: str, target: str, rules: list[str],
         shapes: list[tuple[int | None, ...]] | None = None
         ) -> tuple[list[str], dict[str, Any] | None]:
    """``rules`` (one family's forms the target runs, in the rules' own order) cheapest first on
    ``target`` by the table, and the evidence: ``{"family", "by", "cases", "forms": {rule:
    figures}}``, or ``{"family", "by": "rule priority", "why"}`` when the table cannot compare
    them; None for a single form (nothing to choose).

    ``shapes``: the input shapes of the model's regions; each counts the table case
    :func:`nearest` to it (the forms are compared at the model's own sizes, as near as the
    table goes). Without them, every case common to the forms counts once."""
    if len(rules) < 2:
        return list(rules), None
    asked, target = target, measured_as(target)
    common = set.intersection(*(_cases(family, target, r) for r in rules))
    if not common:
        return list(rules), {"family": family, "by": "rule priority",
                             "why": f"{_source()} measures no common case of "
                                    f"{', '.join(rules)} on {target}"}
    weights = dict.fromkeys(common, 1)
    if shapes:
        known = {c: s for c in common if (s := _shape_of(c, family)) is not None}
        ranks = {len(s) for s in known.values()}
        picks = [nearest(s, known) for s in shapes if len(s) in ranks]
        if not picks:  # a case of another rank is no evidence (other ops, other layouts)
            return list(rules), {"family": family, "by": "rule priority",
                                 "why": f"{_source()} measures no case of rank "
                                        f"{'/'.join(str(n) for n in sorted({len(s) for s in shapes}))}"
                                        f" common to {', '.join(rules)} on {target}"}
        weights = {c: picks.count(c) for c in dict.fromkeys(picks) if c is not None} or weights
    vela = _is_vela(target)
    figs = {r: _figures(family, target, r, weights) for r in rules}

    def compare(a: str, b: str) -> int:
        ka, kb = _key(figs[a], vela), _key(figs[b], vela)
        return -1 if _cheaper(ka, kb) else 1 if _cheaper(kb, ka) else 0

    ordered = sorted(rules, key=cmp_to_key(compare))  # stable: ties keep the rules' order
    shown = (("cpu_ops", "npu_ms", "host_ms", "total_ms", "sram_kib", "file_bytes") if vela else
             ("host_cycles", "activation_peak_bytes", "file_bytes"))
    return ordered, {"family": family, "by": _source(), "cases": weights,
                     **({"measured_on": target} if target != asked else {}),
                     "forms": {r: {k: round(figs[r][k], 6) for k in shown if k in figs[r]}
                               for r in ordered}}
