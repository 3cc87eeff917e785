"""Verdicts: one per op (:class:`OpVerdict`) and all of one level (:class:`GraphCheck`).

A :class:`GraphCheck` is what the tables say about a TF graph (level ``graph``, predicted) or an
exported file (level ``artifact``, which decides): each op's verdict with its reason and
placement, the Edge TPU cut when the target partitions at the first unsupported op, and the
grouped summaries the reports and ``rewrite check`` print.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: The reason given for the QUANTIZE/DEQUANTIZE at a float graph edge (runs on the CPU).
EDGE_REASON = "converts float I/O at the graph edge; runs on the CPU"


@dataclass
class OpVerdict:
    """The verdict on one node (TF graph level) or one operator (artifact level)."""

    node: str
    op: str
    target_op: str | None
    supported: bool
    reason: str | None = None
    observed: str | None = None
    placement: str = "accelerator"  # accelerator | cpu | none (folded away)
    related_op: str | None = None  # the float op a mid-graph (DE)QUANTIZE exists for
    constraint: str | None = None  # the op is in the table; the kind of the limit it breaks
    warning: str | None = None  # a limit the table says might keep it off the accelerator

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class OpStatus:
    """Op-type level answer (no attributes): does the target run TF op ``op``?"""

    op: str
    supported: bool
    target_ops: list[str]
    reason: str | None = None


@dataclass
class GraphCheck:
    """All verdicts of one level for one target, with the Edge TPU cut when it applies."""

    target: str
    level: str  # "graph" | "artifact"
    verdicts: list[OpVerdict]
    ok: bool
    cut: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    #: What the placement count counts, in the target's words ("ops on the Edge TPU").
    ops_label: str = "ops the target supports"

    def counted(self) -> list[OpVerdict]:
        """Verdicts on real ops (folded-away nodes excluded)."""
        return [v for v in self.verdicts if v.placement != "none"]

    def on_accelerator(self) -> tuple[int, int]:
        ops = self.counted()
        return sum(v.placement == "accelerator" for v in ops), len(ops)

    def unsupported_summary(self) -> list[dict[str, Any]]:
        """``[{"op", "count", "reason", "fix"}]`` grouped by op and reason; ``fix`` left None."""
        groups: dict[tuple[str, str], dict[str, Any]] = {}
        for v in self.verdicts:
            if v.supported:
                continue
            key = (v.op, v.reason or "")
            g = groups.setdefault(key, {"op": v.op, "target_op": v.target_op, "count": 0,
                                        "reason": v.reason, "fix": None, "nodes": [],
                                        "related_op": v.related_op})
            g["count"] += 1
            if len(g["nodes"]) < 20:
                g["nodes"].append(v.node)
        return sorted(groups.values(), key=lambda g: (-g["count"], g["op"]))

    def warnings_summary(self) -> list[dict[str, Any]]:
        """``[{"op", "count", "warning", "nodes"}]``: ops mapped that the table says might not
        be (grouped by op and warning)."""
        groups: dict[tuple[str, str], dict[str, Any]] = {}
        for v in self.verdicts:
            if not v.warning or v.placement != "accelerator":  # after the cut: on the CPU
                continue
            g = groups.setdefault((v.op, v.warning), {"op": v.target_op or v.op, "count": 0,
                                                      "warning": v.warning, "nodes": []})
            g["count"] += 1
            if len(g["nodes"]) < 20:
                g["nodes"].append(v.node)
        return sorted(groups.values(), key=lambda g: (-g["count"], g["op"]))

    def table(self) -> list[dict[str, Any]]:
        """Edge-TPU-compiler-style rows: one per (op, status, reason) with a count; ``supported``
        says whether the table maps the op (False rows are what a rule must fix)."""
        rows: dict[tuple[str, str, str], dict[str, Any]] = {}
        for v in self.counted():
            status = _status_text(v)
            reason = v.reason or v.warning or ""
            key = (v.target_op or v.op, status, reason)
            row = rows.setdefault(key, {"op": key[0], "count": 0, "status": status,
                                        "reason": reason or None, "source_ops": set(),
                                        "supported": v.supported})
            row["count"] += 1
            row["source_ops"].add(v.op)
        out = sorted(rows.values(), key=lambda r: (not r["status"].startswith("Mapped"),
                                                   r["op"]))
        for r in out:
            r["source_ops"] = sorted(r["source_ops"])
        return out

    def placement(self) -> dict[str, Any]:
        """Ops the target runs out of all (folded-away nodes not counted; ``ops_on_accelerator``
        is the key other tools read, ``label`` says what it counts for this target), the cut, and
        the ops the table says might not be mapped (``might_not_map``: op, count, warning)."""
        mapped, total = self.on_accelerator()
        return {"ops_total": total, "ops_on_accelerator": mapped,
                "percent_on_accelerator": round(100.0 * mapped / total, 1) if total else 100.0,
                "label": self.ops_label, "cut": self.cut,
                "might_not_map": [{k: v for k, v in w.items() if k != "nodes"}
                                  for w in self.warnings_summary()]}

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "level": self.level, "ok": self.ok, "cut": self.cut,
                **self.placement(), "unsupported": self.unsupported_summary(),
                "warnings": self.warnings_summary(), "notes": list(self.notes),
                "verdicts": [v.to_json() for v in self.verdicts]}


#: Statuses in the Edge TPU compiler's words where it has them.
STATUS_MAPPED = "Mapped"
STATUS_MAY_NOT_MAP = "Mapped (might not be)"
STATUS_LIMITATION = "Operation is otherwise supported, but not mapped due to a limitation"
STATUS_DTYPE = "Operation is working on an unsupported data type"
STATUS_UNSUPPORTED = "Operation not supported"


def _status_text(v: OpVerdict) -> str:
    if v.supported and v.placement == "accelerator":
        return STATUS_MAY_NOT_MAP if v.warning else STATUS_MAPPED
    if v.supported:
        return "CPU (graph edge)" if v.reason == EDGE_REASON else "CPU (after the cut)"
    if v.constraint is None:
        return STATUS_UNSUPPORTED
    return STATUS_DTYPE if v.constraint == "dtypes" else STATUS_LIMITATION
