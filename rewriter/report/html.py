"""``report.html``: the job report as one self-contained page with plots (no network, no JS).

Everything is rendered from JSON-serialisable data, so it can live in ``report.json``:

* ``report`` is the pipeline's report dict (``equivalence``, ``unsupported_before``,
  ``unsupported_after``, ``rules_applied``, ``placement_*``, ``vela``, ``warnings``...);
* the plots' data sit under ``report["plots"]`` and/or ``extras`` (same keys, ``extras`` wins):

  - ``histograms``: ``{stage: {output: error_histogram(...)}}`` (stage ``rewritten_tf``,
    ``artifact``, or any name), built with
    :func:`rewriter.verify.histograms.error_histograms` from the raw outputs;
  - ``divergence``: :meth:`rewriter.verify.divergence.Divergence.to_json`;
  - ``per_rule``: ``[RuleCheck.to_json(), ...]`` from :mod:`rewriter.verify.per_rule`.

Plots are inline SVG generated here (matplotlib is not a dependency); each ``<svg>`` carries
``data-plot`` (``histogram``, ``node-errors``, ``placement``, ``vela``, ``artifact-ops``,
``timings``, ``int8-layers`` from :mod:`rewriter.report.int8`) so tests can find them.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rewriter.host.fs import atomic_write_text

__all__ = ["render_html", "write_html"]

STAGE_TITLES = {"rewritten_tf": "Rewritten TF graph vs original",
                "artifact": "Exported artifact vs original",
                "candidate": "Candidate vs reference"}


# ----------------------------------------------------------------------------- SVG helpers
def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _num(v: Any, digits: int = 3) -> str:
    if isinstance(v, bool) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, (int, float)):
        return f"{v:.{digits}g}"
    return str(v)


def _float(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x


def _pow10(k: float) -> str:
    return f"1e{int(k)}" if float(k).is_integer() else f"1e{k:.1f}"


def _svg_open(plot: str, w: int, h: int, label: str, **data: Any) -> str:
    attrs = "".join(f' data-{k.replace("_", "-")}="{_e(v)}"' for k, v in data.items())
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" data-plot="{plot}"{attrs} '
            f'width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
            f'aria-label="{_e(label)}"><title>{_e(label)}</title>'
            f'<rect x="0" y="0" width="{w}" height="{h}" fill="#fff"/>')


def svg_histogram(hist: Mapping[str, Any], title: str, atol: float | None = None,
                  stage: str = "", output: str = "") -> str:
    """Bars of the |error| histogram on a log10 axis; a dashed line at ``atol``."""
    w, h, ml, mr, mt, mb = 520, 230, 48, 14, 26, 40
    counts = list(hist.get("counts") or [])
    zeros = int(hist.get("zeros", 0))
    lo, hi = float(hist.get("lo", 0)), float(hist.get("hi", 0))
    if atol is not None and not (0 < atol < math.inf):
        atol = None  # int8 comparisons pass on cosine: no atol to draw
    if atol is not None and counts:
        la = math.log10(atol)
        lo, hi = min(lo, math.floor(la)), max(hi, math.ceil(la))
    parts = [_svg_open("histogram", w, h, title, stage=stage, output=output, bins=len(counts),
                       zeros=zeros, total=hist.get("total", 0)),
             f'<text x="{ml}" y="16" class="t">{_e(title)}</text>']
    pw, ph = w - ml - mr, h - mt - mb
    zero_w = 42 if zeros else 0
    top = max(counts + [zeros, 1])
    y0 = mt + ph
    parts.append(f'<line x1="{ml}" y1="{y0}" x2="{w - mr}" y2="{y0}" class="axis"/>')
    parts.append(f'<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{y0}" class="axis"/>')
    parts.append(f'<text x="{ml - 4}" y="{mt + 8}" class="lbl" text-anchor="end">{top}</text>')
    parts.append(f'<text x="{ml - 4}" y="{y0}" class="lbl" text-anchor="end">0</text>')
    if zeros:
        bh = ph * zeros / top
        parts.append(f'<rect class="bar zero" x="{ml + 2}" y="{y0 - bh:.1f}" width="{zero_w - 18}"'
                     f' height="{bh:.1f}"><title>{zeros} element(s) exactly equal</title></rect>'
                     f'<text x="{ml + (zero_w - 16) / 2}" y="{y0 + 15}" class="lbl" '
                     f'text-anchor="middle">=0</text>')
    if counts:
        span = hi - lo

        def x_of(v: float) -> float:
            return ml + zero_w + (v - lo) / span * (pw - zero_w)

        n = len(counts)
        step = (float(hist["hi"]) - float(hist["lo"])) / n
        for k, c in enumerate(counts):
            if not c:
                continue
            a = float(hist["lo"]) + k * step
            x1, x2 = x_of(a), x_of(a + step)
            bh = ph * c / top
            parts.append(f'<rect class="bar" x="{x1:.1f}" y="{y0 - bh:.1f}" '
                         f'width="{max(x2 - x1 - 1, 1):.1f}" height="{bh:.1f}"><title>{c} '
                         f'element(s) with |error| in [{10 ** a:.2g}, {10 ** (a + step):.2g})'
                         f'</title></rect>')
        for d in range(int(math.floor(lo)), int(math.ceil(hi)) + 1):
            x = x_of(d)
            parts.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0 + 4}" '
                         f'class="axis"/><text x="{x:.1f}" y="{y0 + 15}" class="lbl" '
                         f'text-anchor="middle">{_pow10(d)}</text>')
        if atol is not None:
            x = x_of(math.log10(atol))
            parts.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{y0}" class="tol"/>'
                         f'<text x="{x + 3:.1f}" y="{mt + 10}" class="lbl tol-l">atol '
                         f'{atol:.2g}</text>')
    elif not zeros:
        parts.append(f'<text x="{w / 2}" y="{h / 2}" class="lbl" text-anchor="middle">'
                     'no finite elements</text>')
    parts.append(f'<text x="{ml + pw / 2}" y="{h - 6}" class="lbl" text-anchor="middle">'
                 '|error| (log scale); bars: element count</text></svg>')
    return "".join(parts)


def _ratio(err: float | None, bound: float | None) -> float | None:
    """|error| / bound (inf when the bound is 0 and the error is not; None when unknown)."""
    if err is None:
        return None
    if not math.isfinite(err):
        return math.inf
    if bound is None or bound <= 0 or not math.isfinite(bound):
        return 0.0 if err == 0 else math.inf
    return err / bound


def svg_node_errors(div: Mapping[str, Any]) -> str:
    """Each compared node's max |error| as a fraction of its bound, in graph order (log y).

    Above the line at 1 a node is out of bound; exact zeros sit on the floor. The tooltip of
    every dot gives node, op, |error| and bound.
    """
    nodes = list(div.get("nodes") or [])
    w, h, ml, mr, mt, mb = 1100, 300, 56, 16, 26, 40
    pw, ph = w - ml - mr, h - mt - mb
    errs = [_float(n.get("max_abs_error")) for n in nodes]
    bounds = [_float(n.get("bound")) for n in nodes]
    ratios = [_ratio(e, b) for e, b in zip(errs, bounds, strict=True)]
    pos = [r for r in ratios if r is not None and 0 < r < math.inf]
    hi = max(1, math.ceil(math.log10(max(pos)))) if pos else 1
    lo = max(min(math.floor(math.log10(min(pos))), -1) if pos else -3, hi - 10)
    first = (div.get("first") or {}).get("index")
    parts = [_svg_open("node-errors", w, h, "per-node error along the graph", nodes=len(nodes),
                       first=first if first is not None else "")]
    parts.append(f'<text x="{ml}" y="16" class="t">Per-node max |error| / its bound along the '
                 f'graph ({len(nodes)} nodes, topological order); above the red line: out of '
                 'bound</text>')
    y0 = mt + ph

    def xy(i: int, r: float | None) -> tuple[float, float]:
        if r is None or r <= 10.0 ** lo:
            r = 10.0 ** lo
        r = min(r, 10.0 ** hi)
        x = ml + (i + 0.5) / max(len(nodes), 1) * pw
        return x, mt + (hi - math.log10(r)) / (hi - lo) * ph

    for d in range(lo, hi + 1):
        _, y = xy(0, 10.0 ** d)
        label = ("&#8804;" if d == lo else "") + _pow10(d)  # exact zeros sit on the floor
        parts.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{w - mr}" y2="{y:.1f}" class="grid"/>'
                     f'<text x="{ml - 4}" y="{y + 4:.1f}" class="lbl" text-anchor="end">'
                     f'{label}</text>')
    _, y1 = xy(0, 1.0)
    parts.append(f'<line x1="{ml}" y1="{y0}" x2="{w - mr}" y2="{y0}" class="axis"/>'
                 f'<line x1="{ml}" y1="{y1:.1f}" x2="{w - mr}" y2="{y1:.1f}" class="tol"/>'
                 f'<text x="{w - mr - 4}" y="{y1 - 4:.1f}" class="lbl tol-l" '
                 'text-anchor="end">bound</text>')
    if nodes:
        pts = " ".join("{:.1f},{:.1f}".format(*xy(i, r)) for i, r in enumerate(ratios))
        parts.append(f'<polyline points="{pts}" class="errline"/>')
    for i, n in enumerate(nodes):
        x, y = xy(i, ratios[i])
        cls = "pt" if n.get("ok") else "pt bad"
        r = 4.5 if i == first else 2.2
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" class="{cls}"><title>'
                     f'{_e(n.get("node"))} ({_e(n.get("op"))}): |error| {_num(errs[i])}, bound '
                     f'{_num(bounds[i])}</title></circle>')
    if first is not None and 0 <= first < len(nodes):
        x, y = xy(first, ratios[first])
        ly = y + 18 if y < mt + 24 else y - 8  # below the dot when it is at the top
        parts.append(f'<text x="{min(x + 6, w - 300):.1f}" y="{ly:.1f}" '
                     f'class="lbl bad-l">first divergence: {_e(nodes[first].get("node"))}'
                     '</text>')
    parts.append(f'<text x="{ml + pw / 2}" y="{h - 8}" class="lbl" text-anchor="middle">'
                 'node (original graph order)</text></svg>')
    return "".join(parts)


def svg_bars(plot: str, title: str, rows: Sequence[tuple[str, float, float, str]]) -> str:
    """Horizontal bars: (label, value, maximum, text) per row."""
    w, rh, ml = 560, 26, 150
    h = 30 + rh * len(rows)
    parts = [_svg_open(plot, w, h, title, rows=len(rows)),
             f'<text x="8" y="16" class="t">{_e(title)}</text>']
    for k, (label, value, top, text) in enumerate(rows):
        y = 26 + k * rh
        full = w - ml - 160
        bw = full * (value / top) if top > 0 else 0
        parts.append(f'<text x="{ml - 6}" y="{y + 15}" class="lbl" text-anchor="end">'
                     f'{_e(label)}</text><rect x="{ml}" y="{y + 3}" width="{full}" height="16" '
                     f'class="track"/><rect x="{ml}" y="{y + 3}" width="{bw:.1f}" height="16" '
                     f'class="bar"/><text x="{ml + full + 6}" y="{y + 15}" class="lbl">'
                     f'{_e(text)}</text>')
    parts.append("</svg>")
    return "".join(parts)


# ----------------------------------------------------------------------------- sections
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;
max-width:1140px;color:#1d232b;background:#f6f7f9;padding:0 16px}
h1{font-size:22px;margin:0 0 6px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid
#d8dde3;padding-bottom:4px}h3{font-size:15px;margin:16px 0 6px}
.badge{display:inline-block;padding:2px 10px;border-radius:10px;font-weight:600;color:#fff}
.ok{background:#2e7d32}.bad{background:#c62828}
table{border-collapse:collapse;margin:6px 0 10px;background:#fff;font-size:13px}
th,td{border:1px solid #d8dde3;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eef1f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.plots{display:flex;flex-wrap:wrap;gap:12px}.plot{background:#fff;border:1px solid #d8dde3}
.plot .t{font-size:13px;font-weight:600;fill:#1d232b}.plot .lbl{font-size:11px;fill:#4a5561}
.plot .axis{stroke:#4a5561;stroke-width:1}.plot .grid{stroke:#e3e7eb;stroke-width:1}
.plot .bar{fill:#3b76c4}.plot .bar.zero{fill:#8fb3e3}.plot .track{fill:#eef1f4}
.plot .tol{stroke:#c62828;stroke-dasharray:5 3;stroke-width:1.5}.plot .tol-l,.plot .bad-l{fill:#c62828}
.plot .bound{fill:none;stroke:#c62828;stroke-dasharray:5 3;stroke-width:1.2}
.plot .errline{fill:none;stroke:#9db8dc;stroke-width:1}.plot .pt{fill:#3b76c4}
.plot .pt.bad{fill:#c62828}.plot .bar.worst{fill:#c62828}.muted{color:#5d6874}ul{margin:4px 0}
"""


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="n">{_e(_num(c))}</td>' if isinstance(c, (int, float))
            and not isinstance(c, bool) else f"<td>{_e('' if c is None else c)}</td>"
            for c in row)
        body.append(f"<tr>{cells}</tr>")
    return f'<table class="{cls}"><tr>{head}</tr>{"".join(body)}</table>'


def _badge(ok: bool, yes: str = "OK", no: str = "NOT OK") -> str:
    return f'<span class="badge {"ok" if ok else "bad"}">{yes if ok else no}</span>'


def _equivalence(report: Mapping[str, Any], plots: Mapping[str, Any]) -> str:
    eq = report.get("equivalence") or {}
    hists = plots.get("histograms") or {}
    if not eq and not hists:
        return ""
    out = ["<h2>Numeric equivalence</h2>"]
    for stage in list(eq) + [s for s in hists if s not in eq]:
        cmp = eq.get(stage) or {}
        title = STAGE_TITLES.get(stage, stage)
        if cmp.get("runtime"):
            title += f" ({cmp['runtime']})"
        badge = _badge(bool(cmp.get("ok")), "match", "MISMATCH") if cmp else ""
        out.append(f"<h3>{_e(title)} {badge} <span class='muted'>{_e(cmp.get('samples', ''))}"
                   " sample(s)</span></h3>")
        outs = cmp.get("outputs") or {}
        if outs:
            out.append(_table(
                ["output", "max abs", "max rel", "RMSE", "cosine", "L2 rel", "atol", "rtol",
                 "needed atol", "ok"],
                [[n, m.get("max_abs_error"), m.get("max_rel_error"), m.get("rmse"),
                  f"{_float(m.get('cosine')) or 0:.6f}", m.get("l2_rel_error"), m.get("atol"),
                  m.get("rtol"), m.get("needed_atol"), "yes" if m.get("ok") else "NO"]
                 for n, m in outs.items()]))
        from rewriter.report.build import index_text

        notes = [*cmp.get("notes", []), *(index_text({"name": k, **m}, cmp.get("samples", "?"))
                                          for k, m in outs.items()
                                          if m.get("index_agreement") is not None)]
        if notes:
            out.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
        svgs = [svg_histogram(h, f"{name}: |error| histogram", _float(
            (outs.get(name) or {}).get("atol")), stage, name)
            for name, h in (hists.get(stage) or {}).items()]
        if svgs:
            out.append('<div class="plots">' + "".join(svgs) + "</div>")
    return "".join(out)


def _data(report: Mapping[str, Any]) -> str:
    from rewriter.report.build import DATA_HEADER, data_notes, data_rows

    data = report.get("data")
    if not data:
        return ""
    notes = "".join(f"<li>{_e(n)}</li>" for n in data_notes(dict(data)))
    return ("<h2>Data</h2>" + _table(DATA_HEADER, data_rows(dict(data)))
            + (f"<ul>{notes}</ul>" if notes else ""))


def _divergence(plots: Mapping[str, Any]) -> str:
    div = plots.get("divergence")
    if not div:
        return ""
    first = div.get("first")
    out = ["<h2>Per-node error along the graph</h2>",
           f"<p>{_badge(bool(div.get('ok')), 'no divergence', 'DIVERGES')} "
           f"{_e(div.get('summary', ''))} <span class='muted'>({div.get('compared', 0)} nodes "
           f"compared, {div.get('skipped', 0)} not comparable, {div.get('samples', 0)} "
           f"sample(s), {_num(div.get('seconds', 0))} s)</span></p>",
           svg_node_errors(div)]
    if first:
        out.append(_table(["first diverging node", "op", "max abs error", "bound", "produced by"],
                          [[first.get("node"), first.get("op"), _float(first.get("max_abs_error")),
                            _float(first.get("bound")),
                            ", ".join(f"{p['rule']} at {p['root']}"
                                      for p in div.get("produced_by") or [])]]))
    return "".join(out)


def _per_rule(plots: Mapping[str, Any]) -> str:
    checks = plots.get("per_rule")
    if not checks:
        return ""
    rows = [[c.get("step"), c.get("rule"), c.get("node") or f"{len(c.get('roots', []))} nodes",
             "exact" if c.get("exact") else "approximate", _float(c.get("max_abs_error")),
             _float(c.get("max_rel_error")), c.get("tolerance"),
             "ok" if c.get("ok") else ("ERROR: " + c["error"] if c.get("error") else "MISMATCH")]
            for c in checks]
    return ("<h2>Outputs after each rule</h2>" +
            _table(["step", "rule", "node", "kind", "max abs", "max rel", "tolerance", "verdict"],
                   rows))


def _op_tables(report: Mapping[str, Any]) -> str:
    out = []
    bars = []
    for key, label in (("placement_before", "before rewriting"),
                       ("placement_after", "exported artifact")):
        p = report.get(key)
        if p:
            bars.append((label, float(p.get("percent_on_accelerator", 0)), 100.0,
                         f"{p.get('percent_on_accelerator')}% ({p.get('ops_on_accelerator')}/"
                         f"{p.get('ops_total')} ops)"))
    for key, title in (("unsupported_before", "Unsupported before rewriting"),
                       ("unsupported_rewritten_graph", "Unsupported in the rewritten graph"),
                       ("unsupported_after", "Unsupported in the exported artifact")):
        if key not in report:
            continue
        items = report.get(key) or []
        out.append(f"<h3>{_e(title)} {_badge(not items, 'none', str(len(items)) + ' op type(s)')}"
                   "</h3>")
        if items:
            out.append(_table(["op", "count", "reason", "fix"],
                              [[u.get("op"), u.get("count"), u.get("reason"),
                                u.get("fix") or "no rule"] for u in items]))
    if not out and not bars:
        return ""
    head = "<h2>Op table verdict" + (f" ({_e(report['target'])})" if report.get("target")
                                     else "") + "</h2>"
    label = next((report[k].get("label") for k in ("placement_before", "placement_after")
                  if report.get(k)), None) or "ops on the accelerator"
    plot = svg_bars("placement", label, bars) if bars else ""
    return head + plot + "".join(out)


def _rules(report: Mapping[str, Any]) -> str:
    rules = report.get("rules_applied")
    if rules is None:
        return ""
    if not rules:
        return "<h2>Rules applied</h2><p>None.</p>"
    rows = []
    for a in rules:
        roots = list(a.get("roots") or [])
        shown = ", ".join(roots[:4]) + (f" (+{len(roots) - 4})" if len(roots) > 4 else "")
        rows.append([a.get("rule"), a.get("count", len(roots)),
                     a.get("exactness") or ("exact" if a.get("exact") else "approximate"),
                     shown])
    return "<h2>Rules applied</h2>" + _table(["rule", "matches", "exactness", "nodes"], rows)


def _vela(report: Mapping[str, Any]) -> str:
    v = report.get("vela")
    if not v:
        return ""
    npu, cpu = int(v.get("npu_ops") or 0), int(v.get("cpu_ops") or 0)
    total = max(npu + cpu, 1)
    out = [f"<h2>Vela ({_e(v.get('config', ''))})</h2>",
           svg_bars("vela", "operators placed by Vela",
                    [("on the NPU", npu, total, f"{npu}"), ("on the CPU", cpu, total, f"{cpu}")])]
    from rewriter.targets.vela import count_note, summary_rows

    rows = summary_rows(v.get("summary") or {})
    if rows:
        out.append(_table(["metric", "value"], [list(r) for r in rows]))
    note = count_note(v, v.get("file_ops"))
    if note:
        out.append(f"<p class=note>{_e(note)}.</p>")
    reasons = v.get("cpu_reasons") or []
    if reasons:
        out.append(_table(["CPU op", "tensor", "why"],
                          [[c.get("op"), c.get("ofm"), "; ".join(c.get("reasons") or [])]
                           for c in reasons]))
    return "".join(out)


def _artifact_and_timings(report: Mapping[str, Any]) -> str:
    out = []
    ops = report.get("artifact_ops") or []
    if ops:
        counts: dict[str, int] = {}
        for op in ops:
            counts[str(op)] = counts.get(str(op), 0) + 1
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:20]
        out.append(svg_bars("artifact-ops", f"ops in the exported artifact ({len(ops)})",
                            [(k, v, top[0][1], str(v)) for k, v in top]))
    timings = {k: v for k, v in (report.get("timings") or {}).items()
               if isinstance(v, (int, float))}
    if timings:
        most = max(timings.values()) or 1.0
        out.append(svg_bars("timings", "time per step (s)",
                            [(k, v, most, f"{v:.2f} s") for k, v in timings.items()]))
    return ("<h2>Artifact and timings</h2><div class=\"plots\">" + "".join(out) + "</div>"
            if out else "")


def _recover(report: Mapping[str, Any]) -> str:
    from rewriter.tune.recover import markdown_lines

    lines = markdown_lines(report.get("recover"))
    return ("<h2>Fine-tuning (--recover)</h2><ul>" + "".join(f"<li>{_e(t)}</li>" for t in lines)
            + "</ul>") if lines else ""


def _notes(report: Mapping[str, Any]) -> str:
    items = [f"warning: {w}" for w in report.get("warnings") or []]
    items += list(report.get("notes") or [])
    if not items:
        return ""
    return "<h2>Notes</h2><ul>" + "".join(f"<li>{_e(i)}</li>" for i in items) + "</ul>"


def render_html(report: Mapping[str, Any], extras: Mapping[str, Any] | None = None) -> str:
    """The whole page (see the module docstring for what ``report`` and ``extras`` hold)."""
    plots = {**(report.get("plots") or {}), **(extras or {})}
    title = report.get("title") or (
        f"rewrite report: {Path(str(report.get('input', 'model'))).name}"
        + (f" -> {report['target']}" if report.get("target") else ""))
    ok = report.get("ok")
    head = [f"<h1>{_e(title)}</h1>"]
    if ok is not None:
        head.append(f"<p>{_badge(bool(ok))} {_e(report.get('summary', ''))}</p>")
    from rewriter.report import memory
    from rewriter.report.explorer import html_section as explorer_html
    from rewriter.report.int8 import html_section

    body = "".join(head + [_data(report), _equivalence(report, plots),
                           html_section(report.get("int8_layers"), _table), _divergence(plots),
                           _per_rule(plots), _recover(report),
                           _op_tables(report), _rules(report), _vela(report),
                           memory.html(report.get("memory"), _table),
                           _artifact_and_timings(report), explorer_html(dict(report)),
                           _notes(report)])
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width"><title>{_e(title)}</title>'
            f"<style>{CSS}</style></head><body>{body}</body></html>\n")


def write_html(outdir: str | os.PathLike, report: Mapping[str, Any],
               extras: Mapping[str, Any] | None = None, name: str = "report.html") -> Path:
    """Write ``outdir/name`` atomically; returns its path."""
    return atomic_write_text(Path(outdir) / name, render_html(report, extras))
