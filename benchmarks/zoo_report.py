"""``benchmarks/RESULTS.md`` and ``benchmarks/results/zoo.svg`` from ``results/zoo.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

KINDS = (("plain_tflite", "plain converter"), ("onnx2tf", "onnx2tf"), ("rewrite", "rewrite"))


# ----------------------------------------------------------------------------- figures
def placement(res: dict[str, Any] | None, target: str) -> dict[str, Any]:
    """``{"placed": float | None, "text": str, "vela_ms": float | None}`` from a judge result
    (baselines) or a report summary (``rewrite``)."""
    if not res:
        return {"placed": None, "text": "n/a", "vela_ms": None}
    vela = res.get("vela")
    if vela:
        total = vela["npu_ops"] + vela["cpu_ops"]
        return {"placed": 100.0 * vela["npu_ops"] / total if total else None,
                "text": f"{vela['npu_ops']} NPU / {vela['cpu_ops']} CPU",
                "vela_ms": vela.get("inference_ms")}
    if "ops_on_accelerator" in res:  # a judge result
        on, total, cut = res["ops_on_accelerator"], res["ops_counted"], res.get("cut")
        warned = res.get("might_not_map")
    else:  # a report summary
        p = res.get("placement_after") or {}
        on, total, cut = p.get("ops_on_accelerator"), p.get("ops_total"), p.get("cut")
        warned = p.get("might_not_map")
    if on is None or not total:
        return {"placed": None, "text": "n/a", "vela_ms": None}
    text = f"{on}/{total}"
    may_not = None
    if target == "edgetpu":
        text += f" (cut at {cut.get('op')})" if cut else " (no cut)"
        if warned is not None:  # older records did not keep the count: say nothing then
            by_op: dict[str, int] = {}  # one entry per (op, warning): summed per op
            for w in warned:
                by_op[w["op"]] = by_op.get(w["op"], 0) + int(w.get("count", 0))
            may_not = sum(by_op.values())
            # judged before 3363423+1, the list also held ops after the cut (on the CPU): a
            # count larger than the mapped ops is that, and is left out
            if may_not and cut and may_not > on:
                may_not = None
            if may_not:
                text += f", {may_not} might not be mapped (" + ", ".join(
                    f"{op} x{n}" for op, n in by_op.items()) + ")"
    return {"placed": 100.0 * on / total, "text": text, "vela_ms": None,
            "might_not_map": may_not}


def figures(case: dict[str, Any], target: str) -> dict[str, dict[str, Any]]:
    """Per kind (plain converter, onnx2tf, rewrite): placement, Vela ms, cosine or error."""
    out: dict[str, dict[str, Any]] = {}
    job = case.get("jobs", {}).get(target) or {}
    rep = job.get("report") or {}
    art = rep.get("artifact") or {}
    out["rewrite"] = {**placement(rep if rep.get("placement_after") else None, target),
                      "cosine": art.get("cosine"), "max_rel_error": art.get("max_rel_error"),
                      "exit": job.get("exit_code"), "ok": job.get("ok")}
    if target == "onnx":
        base = case.get("plain_onnx") or {}
        judge = base.get("judge") or {}
        acc = judge.get("accuracy") or {}
        ok = (base.get("result") or {}).get("ok")
        bad = ((judge.get("targets") or {}).get("onnx") or {}).get("unsupported") or []
        text = ("exported" if ok else "export failed: "
                + str((base.get("result") or {}).get("error", "?"))[:80])
        if ok and bad:  # written, but not a model the runtimes load
            text = "exported with non-ONNX op(s) " + ", ".join(
                f"{u['op']} x{u['count']}" for u in bad)
        out["plain_tflite"] = {"placed": None, "vela_ms": None, "cosine": acc.get("cosine"),
                               "max_rel_error": acc.get("max_rel_error"), "text": text}
        return out
    for kind in ("plain_tflite", "onnx2tf"):
        base = case.get(kind) or {}
        judge = base.get("judge") or {}
        t = (judge.get("targets") or {}).get(target)
        acc = judge.get("accuracy") or {}
        out[kind] = {**placement(t if t and "error" not in t else None, target),
                     "cosine": acc.get("cosine"), "max_rel_error": acc.get("max_rel_error")}
        if kind == "onnx2tf" and not base:
            onnx = case.get("plain_onnx") or {}
            out[kind]["text"] = ("not run (tf2onnx wrote no file" + _why(onnx) + ")"
                                 if onnx and not finished(onnx) else "not run")
        elif not judge:
            out[kind]["text"] = status(base)
        elif kind == "onnx2tf" and base.get("backend") == "tf_converter":
            out[kind]["text"] += " [-tb tf_converter; the default backend failed]"
    return out


def finished(base: dict[str, Any] | None) -> bool:
    """Did the baseline finish: its process exited 0 and it wrote its file? (A baseline record
    is ``measured``'s: ``exit``, ``result`` = the tool's JSON line; onnx2tf's has ``file``.)"""
    if not base or base.get("exit") not in (0, "0"):
        return False
    if "file" in base:  # onnx2tf: the command line's own exit, and the file it wrote
        return bool(base["file"])
    if "quantise" in base:  # onnx2tf before 6dc84f8: its float export, then our quantisation
        return base["quantise"].get("exit") in (0, "0")
    return bool((base.get("result") or {}).get("ok"))


def status(base: dict[str, Any] | None) -> str:
    """``finished``, or how it ended: ``died with SIGSEGV``, ``failed: <why>``."""
    if finished(base):
        return "finished"
    why = _why(base or {})
    if why.startswith(": died with"):
        return why[2:]
    return "failed" + (why or " (no record)" if not base else why)


def _why(base: dict[str, Any]) -> str:
    """``: <why the failing step failed>`` (shortened), or nothing: the signal that killed it,
    else its first ``...Error: ...`` line, else its exit code (benchmarks/failure.py: never a
    line of its log)."""
    from benchmarks import failure

    steps = base.get("attempts") or [base]
    if len(steps) > 1:  # onnx2tf: why each backend failed
        parts = [f"{s.get('backend')}{_why(dict(s, attempts=None))}" for s in steps]
        return ": " + "; ".join(parts)
    for step in steps:
        code = step.get("exit")
        err = (step.get("result") or {}).get("error")
        if code in (0, "0") and err:  # the tool ran to the end and said why it failed
            return ": " + failure.clean(err)[:120]
        if code in (0, None, "0"):
            continue
        try:
            code = int(code)
        except (TypeError, ValueError):
            code = 1
        if code < 0:
            return ": " + failure.describe(code)
        if step.get("errors"):  # the first error line of its whole stderr (zoo.measured)
            return ": " + failure.clean(step["errors"][0])[:120]
        text = failure.describe(code, str(step.get("stderr") or ""))
        return ": " + text[:120].replace("|", "/")
    return ""


def costs(case: dict[str, Any], target: str) -> dict[str, Any]:
    """The job's wall time and peak memory against the plain converter's of the same kind."""
    job = case.get("jobs", {}).get(target) or {}
    base = case.get("plain_onnx" if target == "onnx" else "plain_tflite") or {}
    res: dict[str, Any] = {"job_s": job.get("seconds"), "job_mb": job.get("peak_rss_mb"),
                           "job_hwm_mb": job.get("peak_rss_hwm_mb"),
                           "job_footprint_mb": job.get("peak_mem_mb"),
                           "plain_s": base.get("seconds"), "plain_mb": base.get("peak_rss_mb"),
                           "plain_status": status(base)}
    if not finished(base):  # no ratio against a baseline that crashed or failed
        return res
    if res["job_s"] and res["plain_s"]:
        res["time_ratio"] = res["job_s"] / res["plain_s"]
    if res["job_mb"] and res["plain_mb"]:
        res["mem_ratio"] = res["job_mb"] / res["plain_mb"]
    if res["job_footprint_mb"] and res["plain_mb"]:
        res["footprint_ratio"] = res["job_footprint_mb"] / res["plain_mb"]
    return res


# ----------------------------------------------------------------------------- markdown
def _f(x: Any, fmt: str) -> str:
    return format(x, fmt) if isinstance(x, (int, float)) else "n/a"


def _ratio(x: Any, c: dict[str, Any]) -> str:
    return _f(x, ".2f") if c["plain_status"] == "finished" else "no ratio"


def render_md(doc: dict[str, Any]) -> str:
    meta, results = doc["meta"], doc["results"]
    m = meta["machine"]
    lines = [
        "# Benchmarks: the model zoo", "",
        f"Regenerate: `{meta['command']}` (the onnx2tf venv: see `benchmarks/zoo.py`).", "",
        f"Run {meta['date_utc']}" + (f" at commit {meta['commit']}" if meta.get("commit")
                                       else "") + ", "
        + ("resumed from a work directory holding earlier results (each job's and baseline's "
           "own wall time is in the tables)" if meta.get("resumed")
           else f"{meta['total_s']:.0f} s in all") + f", on {m['cpu']} "
        f"({m['cores']} cores, {m['memory_gb']} GB; {m['os']}, Python {m['python']}); load "
        f"average {m['load_average_at_start'][0]:.1f} at the start and "
        f"{m['load_average_at_end'][0]:.1f} at the end: the machine is shared, so wall times "
        "and memory are also given as **ratios to the plain converter measured in the same "
        "run**. Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()) + ".",
        "",
        f"Models run: {', '.join(results)}"
        + ("." if meta.get("full") else " (the reduced zoo; `--full` runs the whole list of "
           "`benchmarks/zoo.py` at 96x96; only what ran is published here).")
        + f" Inputs {meta['size']}x{meta['size']} for the image models; "
        f"`rewrite batch --workers {meta['workers']}` runs the jobs. Per model, the baselines "
        "as their users run them, from the user's own model file (Keras 3 `.keras` by keras, "
        "Keras 2 `.h5` by tf_keras): the plain TFLite converter (full int8, int8 I/O, no "
        "rewriting), tf2onnx by its documented API (`tf2onnx.convert.from_keras`), and onnx2tf's "
        "command line on tf2onnx's file (`" + " ".join(meta["onnx2tf_flags"]) + "`: input shape "
        "kept, the ops the Edge TPU lacks replaced, full int8 with int8 I/O on the same "
        "calibration data; its default backend, then `-tb tf_converter` if that fails). Each is "
        "judged like the job judges its own artifact: ops on the accelerator by the target's op "
        "table (Edge TPU: ops before the first unsupported one, where the compiler cuts, and "
        "how many of them the table says *might not be mapped*), Vela for Ethos-U (NPU/CPU "
        "operators, estimated inference time), and int8 cosine to the original float model on "
        "the same 8 verification samples (min over outputs).", ""]
    from benchmarks import baseline_cache

    cached = baseline_cache.note([(case.get(k) or {}).get("baseline_cache")
                                  for case in results.values()
                                  for k in ("plain_tflite", "plain_onnx", "onnx2tf")])
    if cached:  # their wall time and memory come from the run that measured them
        lines += [cached + " The time and memory ratios against them compare two runs "
                  "(`REWRITER_BASELINE_CACHE=off` measures every baseline in this run).", ""]
    lines += ["## Ops placed, Vela's estimate, int8 cosine", "",
              "| model | target | plain converter | onnx2tf | rewrite | cosine: plain / onnx2tf "
              "/ rewrite | rewrite exit |", "|---|---|---|---|---|---|---|"]
    for name, case in results.items():
        for target in meta["targets"]:
            f = figures(case, target)
            if target == "onnx":
                p, r = f["plain_tflite"], f["rewrite"]
                lines.append(f"| {name} | onnx | tf2onnx: {p['text']} (max rel err "
                             f"{_f(p['max_rel_error'], '.1e')}) | | ONNX Runtime max rel err "
                             f"{_f(r['max_rel_error'], '.1e')} | | {r['exit']} |")
                continue
            cells = []
            for kind, _ in KINDS:
                k = f[kind]
                cell = k["text"]
                if k.get("vela_ms") is not None:
                    cell += f", {k['vela_ms']:.2f} ms"
                cells.append(cell)
            cos = " / ".join(_f(f[k]["cosine"], ".4f") for k, _ in KINDS)
            lines.append(f"| {name} | {target} | " + " | ".join(cells)
                         + f" | {cos} | {f['rewrite']['exit']} |")
    lines += ["", "## Wall time and peak memory against the plain converter", "",
              "Peak memory is that of the whole process tree (the job's supervisor, the job and "
              "the conversion it runs in-process; sampled every 0.1 s): the largest sum of their RSS (each "
              "process counts TensorFlow's ~400 MB of shared libraries again) and the "
              "footprint (private pages of every process, shared file pages once). The plain "
              "converter runs in one process (RSS = footprint); for the ONNX target the baseline "
              "is tf2onnx. onnx2tf's pipeline is tf2onnx then onnx2tf. A ratio is given only "
              "against a baseline that finished: where it crashed or failed, the cell says so "
              "and gives its time and memory until then.", "",
              "| model | target | plain: s, MB | rewrite: s, RSS MB, footprint MB | time ratio "
              "| **RSS ratio** | footprint ratio | onnx2tf pipeline: s, MB |",
              "|---|---|---|---|---|---|---|---|"]
    worst: tuple[float, str] = (0.0, "")
    unrated = 0
    for name, case in results.items():
        o2t = case.get("onnx2tf") or {}
        for target in meta["targets"]:
            c = costs(case, target)
            unrated += c["plain_status"] != "finished"
            ratio = c.get("mem_ratio")
            if ratio is not None and ratio > worst[0]:
                worst = (ratio, f"{name} / {target}")
            o = ""
            if target != "onnx" and o2t:
                o = (f"{_f(o2t.get('pipeline_seconds'), '.1f')}, "
                     f"{_f(o2t.get('pipeline_peak_rss_mb'), '.0f')}" if finished(o2t)
                     else status(o2t).split(":")[0])
            plain = f"{_f(c['plain_s'], '.1f')}, {_f(c['plain_mb'], '.0f')}"
            if c["plain_status"] != "finished":  # a crash is a crash: no ratio against it
                plain = f"**{c['plain_status'].split(':')[0]}** (after {plain})"
            lines.append(f"| {name} | {target} | {plain} | {_f(c['job_s'], '.1f')}, "
                         f"{_f(c['job_mb'], '.0f')}, {_f(c['job_footprint_mb'], '.0f')} | "
                         f"{_ratio(c.get('time_ratio'), c)} | {_ratio(ratio, c)} | "
                         f"{_ratio(c.get('footprint_ratio'), c)} | {o} |")
    lines += ["", f"Largest RSS ratio: **{worst[0]:.2f}** ({worst[1]}); the goal is 1.5"
              + (f" ({unrated} job(s) have no ratio: their baseline did not finish)."
                 if unrated else ".") if worst[1] else "",
              "", "Chart: [results/zoo.svg](results/zoo.svg); data: "
              "[results/zoo.json](results/zoo.json).", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- chart
def render_svg(doc: dict[str, Any]) -> str:
    """Two panels: Edge TPU ops placed (%) per model and kind; the job's peak memory ratio to
    the plain converter per model (largest over targets), with the 1.5 line."""
    results = doc["results"]
    names = list(results)
    colors = {"plain_tflite": "#9e9e9e", "onnx2tf": "#f0a030", "rewrite": "#2a7ab0"}
    w, row, left = 760, 22, 150
    h1 = 40 + row * len(names)
    h = 2 * h1 + 60
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           'font-family="sans-serif" font-size="11">',
           f'<text x="10" y="16" font-size="13">Edge TPU: ops before the cut (%) — '
           f'{doc["meta"]["size"]}x{doc["meta"]["size"]} inputs</text>']
    scale = (w - left - 60) / 100.0
    for i, name in enumerate(names):
        y = 30 + i * row
        out.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{name}</text>')
        f = figures(results[name], "edgetpu") if "edgetpu" in doc["meta"]["targets"] else {}
        for j, (kind, _) in enumerate(KINDS):
            v = (f.get(kind) or {}).get("placed")
            if v is None:
                continue
            out.append(f'<rect x="{left}" y="{y + j * 6}" width="{v * scale:.1f}" height="5" '
                       f'fill="{colors[kind]}"/>')
    for j, (kind, label) in enumerate(KINDS):
        out.append(f'<rect x="{left + j * 130}" y="{h1 - 2}" width="10" height="10" '
                   f'fill="{colors[kind]}"/><text x="{left + j * 130 + 14}" y="{h1 + 7}">'
                   f'{label}</text>')
    y0 = h1 + 30
    out.append(f'<text x="10" y="{y0}" font-size="13">Peak RSS of a job\'s process tree / the '
               'plain converter\'s (largest over targets); line at 1.5</text>')
    ratios = {n: max((costs(results[n], t).get("mem_ratio") or 0)
                     for t in doc["meta"]["targets"]) for n in names}
    top = max([2.0, *ratios.values()])
    scale2 = (w - left - 60) / top
    for i, name in enumerate(names):
        y = y0 + 14 + i * row
        out.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{name}</text>')
        r = ratios[name]
        out.append(f'<rect x="{left}" y="{y + 3}" width="{r * scale2:.1f}" height="12" '
                   f'fill="{colors["rewrite"]}"/><text x="{left + r * scale2 + 4:.1f}" '
                   f'y="{y + 13}">{r:.2f}</text>')
    x15 = left + 1.5 * scale2
    out.append(f'<line x1="{x15:.1f}" y1="{y0 + 10}" x2="{x15:.1f}" y2="{h - 10}" '
               'stroke="#c03030" stroke-dasharray="4,3"/>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def render_all(doc: dict[str, Any], bench_dir: Path) -> None:
    (bench_dir / "RESULTS.md").write_text(render_md(doc))
    (bench_dir / "results").mkdir(parents=True, exist_ok=True)
    (bench_dir / "results" / "zoo.svg").write_text(render_svg(doc))
