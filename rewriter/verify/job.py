"""The job that wrote a model file, so ``rewrite verify A OUT/...`` agrees with ``rewrite A -o OUT``.

``rewrite MODEL --target T -o OUT`` writes ``OUT/report.json`` beside ``OUT/model.tflite`` (or
``.onnx``) and ``OUT/saved_model``. When ``rewrite verify`` is given one of those as B and the
job's input as A, :func:`find_job` finds the report and :class:`Job` gives back what the job
measured on: its verification data (``data.verification.recipe``: the same file, mapping and
sample count, or the same seed and ranges for synthetic data) and its criterion
(``equivalence.artifact`` for the exported file, ``equivalence.rewritten_tf``, including the
approximate rules' bounds, for the rewritten SavedModel), per output.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewriter.errors import UserError

REPORT = "report.json"
_ROLES = {"artifact": "the exported artifact", "rewritten_tf": "the rewritten TF graph",
          "recovered_tf": "the fine-tuned TF graph (--recover), informative"}


@dataclass
class Job:
    """A job's report, and which of its outputs the compared file is."""

    report_path: Path
    report: dict[str, Any]
    role: str  # "artifact" | "rewritten_tf"
    same_input: bool  # A is the model the job started from

    @property
    def criterion(self) -> tuple[dict, dict, dict | None] | None:
        """(atol, rtol, min_cosine) by output name, as the job judged this file; None when the
        report has no such comparison or A is another model."""
        if not self.same_input:
            return None
        outputs = ((self.report.get("equivalence") or {}).get(self.stage) or {}).get("outputs")
        if not outputs:
            return None
        atol = {k: _num(v["atol"]) for k, v in outputs.items()}
        rtol = {k: _num(v["rtol"]) for k, v in outputs.items()}
        cos = {k: _num(v["min_cosine"]) for k, v in outputs.items()
               if v.get("min_cosine") is not None}
        return atol, rtol, cos or None

    @property
    def stage(self) -> str:
        """The job's comparison of this file: after ``--recover`` the SavedModel holds the
        fine-tuned graph, compared informatively (``recovered_tf``)."""
        eq = self.report.get("equivalence") or {}
        if self.role == "rewritten_tf" and "recovered_tf" in eq:
            return "recovered_tf"
        return self.role

    def describe(self) -> str:
        outputs = self.report["equivalence"][self.stage]["outputs"]
        rules = sorted({_rule_text(v) for v in outputs.values()})
        return f"{self.report_path}, {_ROLES[self.stage]}: {'; '.join(rules)}"

    def data(self, specs: Sequence[Any]) -> Any:
        """The job's verification samples drawn again, or None (with why in ``self.missing``)."""
        from rewriter.verify.data import from_recipe

        self.missing = ""
        if not self.same_input:
            self.missing = (f"B was written by a job on {self.report.get('input')}, not on A: "
                            "its data and tolerances are not used")
            return None
        recipe = ((self.report.get("data") or {}).get("verification") or {}).get("recipe")
        if not recipe:
            self.missing = f"{self.report_path} records no verification data (an older job)"
            return None
        try:
            data = from_recipe(recipe, specs)
        except UserError as exc:
            self.missing = f"the job's data cannot be drawn again ({exc})"
            return None
        data.recipe["job"] = str(self.report_path)
        data.notes.insert(0, f"the job's verification data ({self.report_path})")
        return data

    def why_not_data(self, own: Any) -> str:
        if own:
            return (f"{self.report_path} is the job that wrote B; data options given, so its "
                    "data and tolerances are not used")
        return getattr(self, "missing", "") or "the job's data is not used"


def _num(v: Any) -> float:
    return float(v) if not isinstance(v, str) else float(v.replace("Infinity", "inf"))


def _rule_text(v: dict[str, Any]) -> str:
    parts = []
    atol, rtol = _num(v["atol"]), _num(v["rtol"])
    if math.isfinite(atol) or rtol:
        parts.append(f"|d| <= {atol:.3g} + {rtol:.3g} x |ref|")
    if v.get("min_cosine") is not None:
        parts.append(f"cosine >= {_num(v['min_cosine']):g}")
    return " and ".join(parts) or "no tolerance"


def find_job(reference: str, candidate: str) -> Job | None:
    """The job whose ``report.json`` sits beside ``candidate`` and names it, else None."""
    cand = Path(candidate).resolve()
    outdir = cand.parent
    if cand.is_file() and cand.name == "saved_model.pb":
        cand, outdir = cand.parent, cand.parent.parent
    report_path = outdir / REPORT
    if not report_path.is_file():
        return None
    try:
        report = json.loads(report_path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(report, dict):
        return None
    exported = (report.get("export") or {}).get("path")
    if cand.is_dir() and cand.name == "saved_model":
        role = "rewritten_tf"
    elif exported and Path(exported).resolve() == cand or cand.name in ("model.tflite",
                                                                        "model.onnx"):
        role = "artifact"
    else:
        return None
    same = _same_path(report.get("input"), reference)
    return Job(report_path, report, role, same)


def _same_path(a: Any, b: str) -> bool:
    if not isinstance(a, str):
        return False
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False
