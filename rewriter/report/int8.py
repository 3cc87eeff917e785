"""The per-layer int8 error section of ``report.md`` and ``report.html``.

Rendered from ``report["int8_layers"]`` (:meth:`rewriter.verify.int8_layers.Int8Layers.to_json`):
a table of the layers that add the most int8 error (worst first) and, in the page, one SVG
(``data-plot="int8-layers"``) with every layer in execution order: a bar for the error it adds
itself, a line for the error leaving it, the worst layers in red. Then the range-starved tensors
(``report["int8_layers"]["range"]``, :mod:`rewriter.tune.int8_range`): the tensors with more than half
their nonzero float values below one quantisation step, and per group the diagnosis and the
remedies for the target.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

HEADER = ("layer", "ops", "error entering", "error added", "error leaving", "cosine",
          "channel range spread", "int8 step")
SHOWN = 10
_RED = 3


def _f(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _worst(section: Mapping[str, Any], n: int) -> list[Mapping[str, Any]]:
    """The ``n`` worst layer entries, one per occurrence (``worst_index``; a report written
    before it, by name: the first occurrence of each)."""
    layers = list(section.get("layers") or [])
    if "worst_index" in section:
        return [layers[i] for i in list(section["worst_index"])[:n] if 0 <= i < len(layers)]
    by_name: dict[str, Mapping[str, Any]] = {}
    for x in layers:
        by_name.setdefault(x["layer"], x)
    return [by_name[k] for k in list(dict.fromkeys(section.get("worst") or []))[:n]
            if k in by_name]


def _label(x: Mapping[str, Any], layers: Sequence[Mapping[str, Any]]) -> str:
    """The layer's name; where the name repeats (an unrolled loop), which occurrence."""
    same = [y for y in layers if y["layer"] == x["layer"]]
    text = x["layer"]
    if len(same) > 1:
        k = next(i for i, y in enumerate(same, 1) if y is x)
        text += f" [{k} of {len(same)}, ops #{x.get('first')}-#{x.get('last')}]"
    return text + (f" (+{', '.join(x['fused'])})" if x.get("fused") else "")


def rows(section: Mapping[str, Any], n: int = SHOWN) -> list[list[Any]]:
    """The ``n`` layers that add the most error, worst first, one row per occurrence."""
    layers = list(section.get("layers") or [])
    out = []
    for x in _worst(section, n):
        out.append([_label(x, layers),
                    _ops_text(x.get("ops") or []), _f(x["error_in"]), _f(x["added"]),
                    _f(x["error_out"]), _f(x["cosine"]), _f(x["channel_spread"]),
                    x.get("step")])
    return out


def _ops_text(ops: Sequence[str]) -> str:
    counts: dict[str, int] = {}
    for op in ops:
        counts[op] = counts.get(op, 0) + 1
    return ", ".join(op if k == 1 else f"{op} x{k}" for op, k in counts.items())


def _g(v: Any) -> str:
    x = _f(v)
    return "" if v is None or math.isnan(x) else f"{x:.3g}"


def markdown(section: Mapping[str, Any] | None) -> list[str]:
    if not section:
        return []
    lines = ["", "## int8 error per layer", "", section.get("summary", "") + ".", "",
             "Relative error: RMSE over the float tensor's spread, per channel (see "
             "`rewriter/verify/int8_layers.py`); *added* is the layer's own share, measured "
             "from the int8 values entering it.", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in rows(section):
        lines.append("| " + " | ".join([r[0], r[1], *(_g(v) for v in r[2:])]) + " |")
    return lines + range_markdown(section.get("range"))


RANGE_HEADER = ("tensor", "op", "int8 step", "peak", "median |x|", "below one step",
                "below one int16 step", "zero or < 1/65536 of its range")


def _pct(v: Any) -> str:
    x = _f(v)
    return "" if v is None or math.isnan(x) else f"{100 * x:.1f}%"


def range_rows(rng: Mapping[str, Any]) -> list[list[str]]:
    return [[t["node"], t["op"], _g(t.get("step")), _g(t.get("peak")), _g(t.get("median_abs")),
             _pct(t.get("below_step")), _pct(t.get("below_int16_step")), _pct(t.get("zeros"))]
            for t in rng.get("tensors") or []]


def range_intro(rng: Mapping[str, Any]) -> str:
    threshold = f"{100 * _f(rng.get('threshold')):.0f}%"
    if not rng.get("tensors"):
        w = rng.get("worst") or {}
        worst = (f" (the most: {w['node']}, {_pct(w.get('below_step'))})" if w else "")
        return (f"No int8 tensor has more than {threshold} of its nonzero values below "
                f"one quantisation step{worst}.")
    return (f"{len(rng['tensors'])} tensor(s) have more than {threshold} of their nonzero "
            "float values (verification samples) below one quantisation step: they read as 0 "
            "or one step, and only their few largest values survive.")


def range_markdown(rng: Mapping[str, Any] | None) -> list[str]:
    if not rng:
        return []
    lines = ["", "### Range-starved int8 tensors", "", range_intro(rng)]
    if rng.get("tensors"):
        lines += ["", "| " + " | ".join(RANGE_HEADER) + " |", "|" + "---|" * len(RANGE_HEADER)]
        lines += ["| " + " | ".join(r) + " |" for r in range_rows(rng)]
    for d in rng.get("diagnosis") or []:
        lines += ["", f"**Diagnosis:** {d['text']}.", "", "Remedies on this target:"]
        lines += [f"- {'' if r['applies'] else '(does not apply) '}{r['text']}"
                  for r in d["remedies"]]
    return lines


def range_html(rng: Mapping[str, Any] | None, table: Any) -> str:
    if not rng:
        return ""
    out = f"<h3>Range-starved int8 tensors</h3><p>{html.escape(range_intro(rng))}</p>"
    if rng.get("tensors"):
        out += table(RANGE_HEADER, range_rows(rng))
    for d in rng.get("diagnosis") or []:
        out += (f"<p class='range-diagnosis'><b>Diagnosis:</b> {html.escape(d['text'])}.</p>"
                "<ul>" + "".join(
                    f"<li>{'(does not apply) ' if not r['applies'] else ''}"
                    f"{html.escape(r['text'])}</li>" for r in d["remedies"]) + "</ul>")
    return out


def svg(section: Mapping[str, Any]) -> str:
    """Bars: error each layer adds; line: error leaving it (log y, execution order)."""
    layers = list(section.get("layers") or [])
    worst = {id(x) for x in _worst(section, _RED)}
    w, h, ml, mr, mt, mb = 1100, 280, 56, 16, 26, 40
    pw, ph = w - ml - mr, h - mt - mb
    vals = [v for x in layers for v in (_f(x["added"]), _f(x["error_out"]))
            if math.isfinite(v) and v > 0]
    hi = math.ceil(math.log10(max(vals))) if vals else 0
    lo = min(math.floor(math.log10(min(vals))) if vals else -3, hi - 1)
    lo = max(lo, hi - 6)

    def y_of(v: float) -> float:
        v = min(max(v, 10.0 ** lo), 10.0 ** hi) if math.isfinite(v) and v > 0 else 10.0 ** lo
        return mt + (hi - math.log10(v)) / (hi - lo) * ph

    n = max(len(layers), 1)
    bw = max(pw / n * 0.7, 1.0)
    label = "int8 error per layer"
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" data-plot="int8-layers" '
             f'data-layers="{len(layers)}" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
             f'role="img" aria-label="{label}"><title>{label}</title>'
             f'<rect x="0" y="0" width="{w}" height="{h}" fill="#fff"/>'
             f'<text x="{ml}" y="16" class="t">int8 relative error per layer, execution order '
             f'({len(layers)} layers): bars = error the layer adds, line = error leaving it; '
             f'red = the {len(worst)} worst</text>']
    for d in range(lo, hi + 1):
        y = y_of(10.0 ** d)
        parts.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{w - mr}" y2="{y:.1f}" class="grid"/>'
                     f'<text x="{ml - 4}" y="{y + 4:.1f}" class="lbl" text-anchor="end">'
                     f'1e{d}</text>')
    y0 = mt + ph
    parts.append(f'<line x1="{ml}" y1="{y0}" x2="{w - mr}" y2="{y0}" class="axis"/>')
    pts = []
    for k, x in enumerate(layers):
        cx = ml + (k + 0.5) / n * pw
        ya = y_of(_f(x["added"]))
        cls = "bar worst" if id(x) in worst else "bar"
        tip = html.escape(f"{x['layer']} ({_ops_text(x.get('ops') or [])}): adds "
                          f"{_g(x['added'])}, leaving {_g(x['error_out'])}, channel spread "
                          f"{_g(x['channel_spread'])}")
        parts.append(f'<rect x="{cx - bw / 2:.1f}" y="{ya:.1f}" width="{bw:.1f}" '
                     f'height="{max(y0 - ya, 0):.1f}" class="{cls}"><title>{tip}</title></rect>')
        pts.append(f"{cx:.1f},{y_of(_f(x['error_out'])):.1f}")
        if id(x) in worst:
            parts.append(f'<text x="{min(cx + 4, w - 200):.1f}" y="{max(ya - 4, mt + 10):.1f}" '
                         f'class="lbl bad-l">{html.escape(x["layer"])}</text>')
    if pts:
        parts.append(f'<polyline points="{" ".join(pts)}" '
                     'style="fill:none;stroke:#1d232b;stroke-width:1.5"/>')
    parts.append(f'<text x="{ml + pw / 2}" y="{h - 8}" class="lbl" text-anchor="middle">'
                 "layer (execution order in the .tflite)</text></svg>")
    return "".join(parts)


def html_section(section: Mapping[str, Any] | None, table: Any) -> str:
    """The page's section; ``table(header, rows)`` is the page's own table renderer."""
    if not section:
        return ""
    return ("<h2>int8 error per layer</h2>"
            f"<p>{html.escape(section.get('summary', ''))}. <span class='muted'>"
            f"({section.get('matched', 0)} operator outputs matched, "
            f"{section.get('samples', 0)} sample(s))</span></p>"
            + svg(section) + table(HEADER, rows(section))
            + range_html(section.get("range"), table))
