"""The ``memory`` section of ``report.json`` (``--deploy``, ``--sram``, ``--flash``) in report.md
and report.html: flash and SRAM with their sources and budgets, Vela's figures for Ethos-U, and
each budget overrun with the largest tensors or weights and what would reduce it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from html import escape
from typing import Any


def rows(memory: Mapping[str, Any]) -> list[list[Any]]:
    """(what, bytes, budget, source) for flash and SRAM."""
    out = []
    for key, label in (("flash", "flash (model)"), ("sram", "SRAM (tensor arena)")):
        m = memory.get(key) or {}
        budget = m.get("budget_bytes")
        figure = str(m.get("bytes"))
        if key == "sram" and m.get("needed_bytes") is not None:
            figure += f" ({m['needed_bytes']} + {m.get('margin_bytes')} margin)"
        out.append([label, figure, "-" if budget is None else str(budget), m.get("source", "")])
    return out


def _vela_line(memory: Mapping[str, Any]) -> str | None:
    v = memory.get("vela")
    if not v:
        return None
    s = v.get("summary") or {}
    figures = ", ".join(f"{k} {val:g}" for k, val in s.items() if val is not None)
    return f"Vela ({v.get('command', '')}): {figures}"


def markdown(memory: Mapping[str, Any] | None) -> list[str]:
    if not memory:
        return []
    out = ["", "## Memory", "", "| | bytes | budget | source |", "|---|---|---|---|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows(memory)]
    line = _vela_line(memory)
    if line:
        out += ["", line]
    for text in memory.get("over_budget_lines") or memory.get("over_budget") or []:
        out += ["", f"**Over budget**: {text}"]
    if memory.get("deploy"):
        out += ["", f"Deployment package: `{memory['deploy']}`"]
    return out


def html(memory: Mapping[str, Any] | None,
         table: Callable[[Sequence[str], Sequence[Sequence[Any]]], str]) -> str:
    if not memory:
        return ""
    out = ["<h2>Memory</h2>", table(["", "bytes", "budget", "source"], rows(memory))]
    line = _vela_line(memory)
    if line:
        out.append(f"<p class=note>{escape(line)}</p>")
    over = memory.get("over_budget_lines") or memory.get("over_budget") or []
    if over:
        out.append("<ul>" + "".join(f"<li><b>Over budget</b>: {escape(t)}</li>" for t in over)
                   + "</ul>")
    if memory.get("deploy"):
        out.append(f"<p>Deployment package: <code>{escape(str(memory['deploy']))}</code></p>")
    return "".join(out)
