"""The report's "Forms chosen by cost" section: where the target runs several exact forms of one
op (a rule family), the form the planner took and every alternative's measured cost
(``report.json`` ``form_choices``, from :func:`rewriter.targets.form_costs.rank`)."""

from __future__ import annotations

from typing import Any

#: Figure -> column title.
COLUMNS = {"cpu_ops": "CPU ops", "npu_ms": "NPU ms", "host_ms": "host ms",
           "total_ms": "total ms", "sram_kib": "SRAM KiB",
           "host_cycles": "host cycles (CPU model)", "activation_peak_bytes": "peak activations B",
           "file_bytes": "file B"}


def markdown(choices: list[dict[str, Any]] | None) -> list[str]:
    """Lines of the section (none when no family had a choice)."""
    if not choices:
        return []
    lines = ["", "## Forms chosen by cost", ""]
    for c in choices:
        head = f"**{c.get('family')}** (for {c.get('op')}): `{c.get('chosen')}`"
        if not c.get("forms"):
            lines += [f"- {head}, by {c.get('by')}: {c.get('why', '')}".rstrip(": ")]
            continue
        on = f" measured on {c['measured_on']}," if c.get("measured_on") else ""
        cases = ", ".join(f"{k} x{v}" for k, v in (c.get("cases") or {}).items())
        lines += [f"{head},{on} cheapest summed over the measured cases nearest the model's "
                  f"regions ({cases}); source: {c.get('by')}.", ""]
        keys = [k for k in COLUMNS if any(k in f for f in c["forms"].values())]
        lines += ["| form | " + " | ".join(COLUMNS[k] for k in keys) + " |",
                  "|---|" + "---|" * len(keys)]
        for rule, fig in c["forms"].items():
            mark = " (chosen)" if rule == c.get("chosen") else ""
            lines.append(f"| {rule}{mark} | " + " | ".join(_num(fig.get(k)) for k in keys) + " |")
        lines.append("")
    return lines


def _num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.3f}"
    return f"{int(v)}"
