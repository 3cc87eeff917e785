"""Reports of a job: ``report.json`` for pipelines and ``report.md`` for people.

:func:`build_report` builds the ``report.json`` dict once, at the end of the job, from the
stages' typed results (:class:`rewriter.job.results.Job`). The JSON schema is documented in the
README ("report.json"); the Markdown is rendered from the same dict, so the two cannot disagree.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rewriter.host.fs import atomic_write_text
from rewriter.targets.host_lookup import host_lookup
from rewriter.targets.tail import cpu_tail

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Sequence

    from rewriter.job.results import Attempt, Job
    from rewriter.job.stages import Deployment
    from rewriter.rewrite.planner import Plan
    from rewriter.rules.base import Applied
    from rewriter.targets import Target
    from rewriter.verify.metrics import Comparison

SCHEMA_VERSION = 1

#: Titles of the equivalence stages in report.md.
STAGE_TITLES = {"rewritten_tf": "Rewritten TF graph vs original",
                "artifact": "Exported artifact vs original"}


def build_report(job: Job) -> dict[str, Any]:
    """``report.json`` of a finished job, from its stages' results."""
    model, target, attempt = job.model, job.target, job.attempt
    report: dict[str, Any] = {
        "ok": job.ok, "target": target.name, "input": model.source.path,
        "format": model.source.format, "quantize": job.quantize,
        "artifact_format": target.artifact, "signature": model.signature_json(),
        "notes": list(model.source.notes), "warnings": job.warnings, "timings": job.timings,
        "placement_before": job.before.placement(), "data": job.data.to_json()}
    if job.retry is not None:
        report["retry"] = job.retry.to_json()
    if job.package is not None:
        report["memory"] = job.package.memory_json()
    if job.versus_plain is not None:
        report["versus_plain"] = job.versus_plain
    why = unfixable_why(attempt.plan, target)
    tail = cpu_tail(attempt.rewrite.model, attempt.graph_after)  # what rewriting left
    if tail is not None and not attempt.deployment.unsupported_ops():
        tail = None  # predicted, but the exported file runs it (ONNX Runtime runs NMS)
    if tail is not None:
        report["cpu_tail"] = tail.to_json()
        for op in tail.ops:  # the tail's ops: post-processing, not a missing rule
            why[op] = "post-processing in the CPU tail: " + tail.hint + " ends the model before it"
    lookup = host_lookup(attempt.rewrite.model, attempt.graph_after, target.name)
    if lookup is not None and not attempt.deployment.unsupported_ops():
        lookup = None
    if lookup is not None:
        report["host_lookup"] = lookup.to_json()
        why["GatherV2"] = why["GATHER"] = "run it on the host: " + lookup.describe()
    report["unsupported_before"] = with_fixes(job.before.unsupported_summary(),
                                              attempt.plan.rules_by_op(), why)
    report.update(_attempt_report(attempt, why))
    if job.precision is not None:
        report["precision"] = job.precision.to_json()
    if job.approximation is not None:
        report["approximation"] = job.approximation.to_json()
    if job.recovery is not None:
        report["recover"] = job.recovery.to_json()
        if job.recovery.kept:
            report["equivalence"]["recovered_tf"] = job.recovery.float_after.to_json()
    also = [job.recovery.describe()] if job.recovery is not None else []
    if job.recover_skipped:
        report["recover"] = {"tried": False, "why": job.recover_skipped}
        also.append(f"--recover not run: {job.recover_skipped}")
    also += [tail.describe()] if tail is not None else []
    also += [lookup.describe()] if lookup is not None else []
    report["summary"] = summary(report, attempt, job.data.verification.synthetic,
                                job.data.describe() if not job.data.verification.synthetic
                                else job.data.calibrated, also)
    over = job.package.overruns() if job.package is not None else []
    if over:
        report["summary"] = "OVER BUDGET: " + "; ".join(over) + "; " + report["summary"]
    return report


def _attempt_report(attempt: Attempt, why: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "plan": attempt.plan.to_json(),
        "rules_applied": rules_summary(attempt.rewrite.applied),
        "form_choices": attempt.plan.form_choices(),
        "rejected_matches": [r.to_json() for r in attempt.rewrite.rejected[:50]],
        "unsupported_rewritten_graph": with_fixes(attempt.graph_after.unsupported_summary(),
                                                  {}, why),
        "equivalence": {"rewritten_tf": attempt.tf.to_json()},
        "plots": attempt.diagnostics.to_json()}
    if attempt.artifact is not None:
        out["equivalence"]["artifact"] = attempt.artifact.to_json()
    out.update(_deployment_report(attempt.deployment, why))
    blocked = attempt.artifact.not_runnable if attempt.artifact is not None else None
    if blocked is not None and isinstance(out.get("unsupported_after"), list):
        out["unsupported_after"].append(dict(blocked))  # the target's runtime cannot run it
    if attempt.int8_layers is not None:
        out["int8_layers"] = attempt.int8_layers.to_json()
    return out


def _deployment_report(deployment: Deployment, why: dict[str, str]) -> dict[str, Any]:
    exported, verdict = deployment.exported, deployment.verdict
    out: dict[str, Any] = {"export": exported.to_json()}
    if exported.result is None or verdict is None:
        error = exported.error
        out["unsupported_after"] = [{"op": op, "count": 1, "reason": str(error), "fix": None}
                                    for op in ((error.ops if error else None) or ["?"])]
        out["artifact_ops"] = []
        return out
    out["artifact_ops"] = list(exported.result.ops)
    vela = verdict.vela_json()
    if vela is not None:
        out["vela"] = vela
    elif verdict.estimate is not None:  # the Edge TPU's documented model
        out["edgetpu_estimate"] = verdict.estimate
    out["unsupported_after"] = with_fixes(verdict.check.unsupported_summary(), {}, why)
    out["placement_after"] = verdict.check.placement()
    return out


def with_fixes(items: list[dict[str, Any]], planned: dict[str, str],
               why: dict[str, str]) -> list[dict[str, Any]]:
    """Unsupported-op groups with ``fix`` (the rule that fixed the op on this target, from
    ``planned``) or, for ops no rule could fix, ``fix: null`` and ``why`` (from the plan)."""
    out = []
    for item in items:
        item = {k: v for k, v in item.items() if k != "nodes"} | {
            "nodes": item.get("nodes", [])[:20]}
        item["fix"] = planned.get(item["op"])
        if item["fix"] is None and item["op"] in why:
            item["why"] = why[item["op"]]
        out.append(item)
    return out


def unfixable_why(the_plan: Plan, target: Target) -> dict[str, str]:
    """Why no rule fixed an op, keyed by TF op and by the target ops it becomes."""
    why: dict[str, str] = {}
    for u in the_plan.unfixable:
        text = u.why or "no rule fits this target"
        why[u.op] = text
        for target_op in target.lower(u.op) or ():
            why.setdefault(target_op, f"{u.op}: {text}")
    return why


def rules_summary(applied: Sequence[Applied]) -> list[dict[str, Any]]:
    """One entry per rule: matches, nodes replaced/created, and its exactness statement."""
    by_rule: dict[str, dict[str, Any]] = {}
    for a in applied:
        bound = a.bound.to_json() if a.bound else None
        entry = by_rule.setdefault(a.rule, {
            "rule": a.rule, "count": 0, "exact": a.exact, "bound": bound,
            "exactness": "exact" if a.exact else bound_text(bound),
            "roots": [], "nodes": [], "created": [], "bounds": []})
        entry["count"] += 1
        entry["roots"].append(a.root)
        entry["nodes"].extend(a.matched)
        entry["created"].extend(a.created)
        if bound:  # fitted rules state a bound per application: keep each, show the worst
            entry["bounds"].append({"root": a.root, **bound})
            if bound["max_abs_error"] > entry["bound"]["max_abs_error"]:
                entry["bound"] = bound
                entry["exactness"] = bound_text(bound)
    for entry in by_rule.values():
        if len({(b["max_abs_error"], tuple(b["input_range"])) for b in entry["bounds"]}) <= 1:
            del entry["bounds"]  # one bound for every application: the rule's own
    return list(by_rule.values())


def bound_text(bound: dict[str, Any] | None) -> str:
    if not bound:
        return "approximate"
    rng = bound.get("input_range")
    where = "for all x" if not rng or None in rng else f"for x in [{rng[0]:g}, {rng[1]:g}]"
    return f"max abs error {bound['max_abs_error']:.2g} {where}"


def summary(report: dict[str, Any], attempt: Attempt, synthetic: bool, data: str = "",
            also: list[str] | None = None) -> str:
    """The one-line verdict the CLI prints and report.md opens with; ``data`` says which data
    the verdict rests on and what calibrated (:meth:`rewriter.job.stages.JobData.describe`);
    ``also``: further parts (what ``--recover`` did, the CPU tail), last."""
    parts = []
    before = report.get("unsupported_before") or []
    after = report.get("unsupported_after")
    parts.append(f"{sum(u['count'] for u in before)} unsupported op(s) before rewriting"
                 f" ({', '.join(sorted({u['op'] for u in before})) or 'none'})")
    parts.append(f"{len(attempt.rewrite.applied)} rewrite(s) applied")
    if after is not None:
        parts.append(f"{sum(u['count'] for u in after)} unsupported op(s) in the artifact")
    vela = attempt.deployment.verdict.vela if attempt.deployment.verdict else None
    if vela is not None:
        est = attempt.deployment.verdict.estimate
        parts.append(f"Vela: {vela.npu_ops} NPU / {vela.cpu_ops} CPU operators" + (
            f", est. {est['npu_ms']:.3f} ms NPU + {est['host_ms']:.3f} ms host" if est else ""))
    parts.append(f"rewritten TF graph {'matches' if attempt.tf.ok else 'DOES NOT match'}"
                 + _nonfinite(attempt.tf, "rewritten graph")
                 + ("" if attempt.artifact is not None else _degenerate(attempt.tf)))
    if attempt.artifact is not None:
        from rewriter.job.stages import RUNTIME_TITLES

        art = attempt.artifact.comparison
        parts.append(f"artifact {'matches' if art.ok else 'DOES NOT match'} "
                     f"({_criteria(art)})" + _nonfinite(art, "artifact")
                     + _degenerate(art)
                     + (f" in {RUNTIME_TITLES[attempt.artifact.runtime]}, not in the target's "
                        "runtime" if attempt.artifact.fallback else ""))
    if synthetic:
        parts.append("verified on SYNTHETIC data only (give --data or --calibration)")
    if data:
        parts.append(data)
    return "; ".join([*parts, *(also or [])]) + "."


def _criteria(cmp: Comparison) -> str:
    """What the artifact's verdict rests on: ``min cosine 0.99422`` over the float outputs judged
    by cosine (a quantised file); the worst relative error against its tolerance over the float
    outputs judged element-wise (a float file: :func:`relative_text`); for an integer output
    (arg-max index map, ids) its index agreement over how many indices, and by which criterion
    (never its cosine); for classifier outputs their top-1 agreement (the criterion when
    ``--min-top1`` judged)."""
    parts = []
    floats = [o for o in cmp.outputs if not o.integer and o.min_top1 is None]
    by_cosine = [o for o in floats if o.min_cosine is not None]
    if by_cosine:
        parts.append(f"min cosine {min(o.cosine for o in by_cosine):.5f}")
    elementwise = [o for o in floats if o.min_cosine is None]
    if elementwise:
        parts.append(relative_text(max(elementwise, key=_closeness)))
    index = [o for o in cmp.outputs if o.integer and o.index_agreement is not None]
    if index:
        parts.append(index_text(min(index, key=lambda o: o.index_agreement or 0.0).to_json(),
                                cmp.samples))
    agree = [o for o in cmp.outputs if o.top1_agreement is not None]
    if agree:
        worst = min(agree, key=lambda o: o.top1_agreement or 0.0)
        judged = (f", the criterion: >= {worst.min_top1:g}; cosine not judged"
                  if worst.min_top1 is not None else "")
        parts.append(f"top-1 agreement {worst.top1_agreement:.3f}{judged}")
    return "; ".join(parts) or "no output compared"


def _closeness(o: Any) -> tuple[int, float]:
    """How near an element-wise judged output is to failing: values outside, then its max
    error over the tolerance at its largest value."""
    allowed = o.atol + o.rtol * o.ref_max_abs
    return (o.mismatched, o.max_abs_error / allowed if allowed > 0 else
            (0.0 if o.max_abs_error == 0 else math.inf))


def relative_text(o: Any) -> str:
    """``max relative error 0.00016 of scale (logits) vs the tolerance 0.00077 of scale +
    0.0001 x |value|, element-wise: 0 of 512 value(s) outside`` for a float output judged
    element-wise (|error| <= atol + rtol x |value| at every value; scale = max |reference|;
    cosine not judged)."""
    outside = f"element-wise: {o.mismatched} of {o.size} value(s) outside"
    if not o.ref_max_abs > 0:
        return (f"max abs error {o.max_abs_error:.2g} ({o.name}, reference all zero) vs the "
                f"tolerance {o.atol:.2g}, {outside}")
    return (f"max relative error {o.max_rel_error:.2g} of scale ({o.name}) vs the tolerance "
            f"{o.atol / o.ref_max_abs:.2g} of scale + {o.rtol:g} x |value|, {outside}")


def index_text(m: dict[str, Any], samples: int | str | None) -> str:
    """``index agreement of argmax 0.9902 over 512 indices of 8 input(s) (share of equal arg-max
    indices, the criterion: >= 0.99; cosine not judged)`` for one integer output's
    ``equivalence`` entry; judged element-wise (no cosine in the criterion, e.g. a float
    artifact), the criterion is every index equal, or the element-wise tolerance when that
    lets an index differ."""
    if m.get("min_index_agreement") is not None:
        criterion = f">= {m['min_index_agreement']:g}"
    elif _num_or(m.get("atol")) + _num_or(m.get("rtol")) * _num_or(m.get("ref_max_abs")) < 1:
        criterion = "every index equal, element-wise"
    else:
        criterion = (f"element-wise |difference| <= {_num(m.get('atol'))} + "
                     f"{_num(m.get('rtol'))} x |reference|")
    return (f"index agreement of {m['name']} {m['index_agreement']:.4f} over {m['size']} "
            f"indices of {samples} input(s) (share of equal arg-max indices, the criterion: "
            f"{criterion}; cosine not judged)")


def _num_or(v: Any) -> float:
    """A report number (JSON keeps inf as the string "inf") as a float; None as 0."""
    return 0.0 if v is None else float(v)


def _degenerate(cmp: Comparison) -> str:
    text = cmp.degenerate_text()
    return f" [note: {text}]" if text else ""


def _nonfinite(cmp: Comparison, who: str) -> str:
    text = cmp.nonfinite_text("original", who)
    return f" [NaN/Inf: {text}]" if text else ""


def write_reports(outdir: Path, report: dict[str, Any]) -> list[Path]:
    """Write report.json and report.md into ``outdir`` atomically; returns their paths."""
    report = {"schema": SCHEMA_VERSION, **report}
    paths = [
        atomic_write_text(outdir / "report.json", json.dumps(report, indent=2, default=str)),
        atomic_write_text(outdir / "report.md", render_markdown(report)),
    ]
    return paths


def render_markdown(r: dict[str, Any]) -> str:
    lines = [f"# rewrite report: {Path(str(r.get('input', '?'))).name} -> {r.get('target', '?')}",
             "", f"**Result: {'OK' if r.get('ok') else 'NOT OK'}**"]
    if r.get("summary"):
        lines += ["", r["summary"]]
    if r.get("explorer"):
        lines += ["", f"See it on the graph: `{r['explorer']['open']}` (Model Explorer; "
                  f"`{r['explorer']['needs']}`)."]
    sig = r.get("signature") or {}
    if sig:
        lines += ["", "## Signature", "", "| | name | shape | dtype |", "|---|---|---|---|"]
        for kind in ("inputs", "outputs"):
            for s in sig.get(kind, []):
                lines.append(f"| {kind[:-1]} | {s['name']} | {s['shape']} | {s['dtype']} |")
    for key, title in (("unsupported_before", "Unsupported before rewriting"),
                       ("unsupported_after", "Unsupported in the exported artifact")):
        if key in r:
            items = r[key] or []
            lines += ["", f"## {title}", ""]
            if not items:
                lines.append("None.")
            else:
                lines += ["| op | count | reason | fix |", "|---|---|---|---|"]
                for u in items:
                    lines.append(f"| {u.get('op')} | {u.get('count', '')} | "
                                 f"{_cell(u.get('reason'))} | {_fix_cell(u)} |")
    if r.get("rules_applied") is not None:
        lines += ["", "## Rules applied", ""]
        if not r["rules_applied"]:
            lines.append("None.")
        else:
            lines += ["| rule | matches | exactness |", "|---|---|---|"]
            for a in r["rules_applied"]:
                lines.append(f"| {a.get('rule')} | {a.get('count', len(a.get('nodes', [])))} | "
                             f"{a.get('exactness', 'exact' if a.get('exact') else a.get('bound'))}"
                             " |")
    from rewriter.report import forms

    lines += forms.markdown(r.get("form_choices"))
    if r.get("data"):
        lines += ["", "## Data", "", "| " + " | ".join(DATA_HEADER) + " |",
                  "|" + "---|" * len(DATA_HEADER)]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in data_rows(r["data"])]
        lines += [f"- {n}" for n in data_notes(r["data"])]
    eq = r.get("equivalence")
    if eq:
        lines += ["", "## Numeric equivalence", ""]
        for stage, cmp in eq.items():
            outs = (cmp or {}).get("outputs") or {}
            title = STAGE_TITLES.get(stage, stage)
            if cmp.get("runtime"):
                title += f" ({cmp['runtime']})"
            lines += [f"### {title}: {'OK' if cmp.get('ok') else 'MISMATCH'}, "
                      f"{cmp.get('samples', '?')} sample(s)", "",
                      "| output | max abs | max rel | cosine | L2 rel | atol | rtol | "
                      "needed atol | ok |", "|---|---|---|---|---|---|---|---|---|"]
            for name, m in outs.items():
                lines.append(f"| {name} | {_num(m.get('max_abs_error'))} | "
                             f"{_num(m.get('max_rel_error'))} | {_num(m.get('cosine'), 6)} | "
                             f"{_num(m.get('l2_rel_error'))} | {_num(m.get('atol'))} | "
                             f"{_num(m.get('rtol'))} | {_num(m.get('needed_atol'))} | "
                             f"{m.get('ok')} |")
            lines += [""] + [f"- {n}" for n in cmp.get("notes", [])]
            lines += [f"- {index_text({'name': k, **m}, cmp.get('samples', '?'))}"
                      for k, m in outs.items() if m.get("index_agreement") is not None] + [""]
    from rewriter.report.int8 import markdown

    lines += markdown(r.get("int8_layers"))
    div = (r.get("plots") or {}).get("divergence")
    if div:
        lines += ["", "## First divergence (intermediate tensors)", "", div["summary"] + "."]
    lines += _placement_md(r)
    from rewriter.tune.recover import markdown_lines

    rec = markdown_lines(r.get("recover"))
    lines += ["", "## Fine-tuning (--recover)", "", *(f"- {t}" for t in rec)] if rec else []
    lines += _vela_md(r.get("vela"))
    from rewriter.report import memory

    lines += memory.markdown(r.get("memory"))
    lines += _edgetpu_md(r.get("edgetpu_estimate"))
    if r.get("versus_plain"):
        from rewriter.targets.cost import versus_lines

        lines += ["", "## Estimated latency beside the plain converter's file", ""]
        lines += [f"- {line}" for line in versus_lines(r["versus_plain"])]
    if r.get("artifact_ops"):
        lines += ["", "## Ops in the exported artifact", "",
                  ", ".join(f"{k} x{v}" for k, v in _hist(r["artifact_ops"]).items())]
    if r.get("warnings") or r.get("notes"):
        lines += ["", "## Notes", ""]
        lines += [f"- warning: {w}" for w in r.get("warnings", [])]
        lines += [f"- {n}" for n in r.get("notes", [])]
    return "\n".join(lines) + "\n"


DATA_HEADER = ("used for", "source", "samples", "input", "shape", "min", "max", "NaN/Inf",
               "mapped")


def data_rows(data: dict[str, Any]) -> list[list[Any]]:
    """``report["data"]`` as table rows: one per role (calibration, verification) and input."""
    rows = []
    for role, d in data.items():
        for name, i in ((d or {}).get("inputs") or {}).items():
            rows.append([role, d["source"], d["samples"], name,
                         "x".join(str(v) for v in i["shape"]), i["min"], i["max"],
                         i["nonfinite"], i["mapping"]])
    return rows


def data_notes(data: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(n for d in data.values() for n in (d or {}).get("notes", [])))


def _placement_md(r: dict[str, Any]) -> list[str]:
    rows = [(label, r[key]) for key, label in (("placement_before", "original (predicted)"),
                                              ("placement_after", "exported artifact"))
            if r.get(key)]
    if not rows:
        return []
    label = rows[0][1].get("label", "ops on the accelerator")
    out = ["", "## Placement on the target", "", f"| model | {label} | cut |", "|---|---|---|"]
    for label, p in rows:
        cut = p.get("cut")
        cut_text = (f"at {cut.get('op')} ({cut.get('node', '')}): {cut.get('mapped_before')} "
                    f"ops mapped before it, {cut.get('cpu_after')} on the CPU"
                    if cut else "none")
        out.append(f"| {label} | {p['ops_on_accelerator']} of {p['ops_total']} "
                   f"({p['percent_on_accelerator']}%) | {_cell(cut_text)} |")
    warned = (r.get("placement_after") or {}).get("might_not_map") or []
    if warned:
        out += ["", "Mapped, but the target's documentation says they might not be:", ""]
        out += [f"- {w['count']} x {w['warning']}" for w in warned]
    return out


def _edgetpu_md(e: dict[str, Any] | None) -> list[str]:
    if not e:
        return []
    return ["", "## Edge TPU cost (documented model)", "",
            f"{e['ops_on_edgetpu']} ops on the Edge TPU, {e['ops_on_cpu']} on the CPU; parameters "
            f"of the mapped ops {e['parameter_bytes'] / 2**20:.2f} MiB against the "
            f"{e['parameter_cache_bytes'] / 2**20:.0f} MiB on-chip cache: "
            f"{e['streamed_bytes_per_inference'] / 2**20:.2f} MiB stream from the host per "
            f"inference ({e['model']})."]


def _vela_md(v: dict[str, Any] | None) -> list[str]:
    if not v:
        return []
    from rewriter.targets.vela import count_note, summary_rows

    rows = summary_rows(v.get("summary", {}))
    out = ["", f"## Vela ({v.get('config')})", "",
           "| NPU operators | CPU operators | " + " | ".join(label for label, _ in rows) + " |",
           "|---|---|" + "---|" * len(rows),
           f"| {v.get('npu_ops')} | {v.get('cpu_ops')} | "
           + " | ".join(value for _, value in rows) + " |"]
    note = count_note(v, v.get("file_ops"))
    if note:
        out += ["", f"Note: {note}."]
    from rewriter.targets.vela import estimate_lines

    est = estimate_lines(v)
    if est:
        out += [""] + [f"- {line}" for line in est]
    for c in v.get("cpu_reasons", []):
        out.append(f"- CPU: {c['op']} ({c.get('ofm')}): {'; '.join(c.get('reasons', []))}")
    for d in v.get("disagreements_with_table", []):
        out.append(f"- Vela and the op table disagree on {d['op']} ({d['node']}): table "
                   f"{d['table']}, Vela {d['vela']}")
    return out


def _fix_cell(u: dict[str, Any]) -> str:
    if u.get("fix"):
        return str(u["fix"])
    return "no rule" + (f" ({_cell(u['why'])})" if u.get("why") else "")


def _hist(ops: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for op in ops:
        out[op] = out.get(op, 0) + 1
    return out


def _cell(v: Any) -> str:
    return "" if v is None else str(v).replace("|", "\\|").replace("\n", " ")


def _num(v: Any, digits: int = 3) -> str:
    if isinstance(v, (int, float)):
        return f"{v:.{digits}g}"
    return "" if v is None else str(v)
