"""Speed on Ethos-U: Vela's own estimate for the plain converter's file and the job's artifact.

    PYTHONPATH=. python benchmarks/speed.py [--models grouped_conv_stack,RegNetX002,ConvNeXtTiny]
        [--size 96] [--configs ethos-u55-128,ethos-u65-256]
        [--system-configs ethos-u55-128:Ethos_U55_High_End_Embedded,...]
        [--workdir /tmp/rewriter_speed] [--onnx2tf /work/venv-onnx2tf/bin/onnx2tf]

One command. Per model (``benchmarks/zoo_build.py`` cases, plus ``grouped_conv_stack``: a Keras 3
stack of four ``Conv2D(32, 3, groups=4)`` on 32x32x32, built here): the plain TFLite converter
(``benchmarks/zoo_tools.py plain-tflite``: full int8, int8 I/O) and the job (``rewrite MODEL
--target ethos-u55-128`` with the case's calibration and verification data; the U55 and U65 share
the op table, so one artifact serves both), then each file through Vela for every accelerator
config and its system config (``rewriter.targets.vela.run_vela`` with ``--verbose-performance``,
estimated by ``rewriter.targets.cost``): NPU ms from Vela's per-layer cycles, host ms for the ops
Vela leaves on the CPU (a lower bound, see ``rewriter/targets/cost.py``), NPU/CPU op counts.

Results: ``benchmarks/results/speed.md`` and ``speed.json``, stamped (``benchmarks/stamp.py``).

``--workdir`` keeps each case's model and job output (a rerun skips a job whose report.json
exists): use a fresh one for each commit measured, or the job's artifacts are an older commit's
(the plain converter's file comes from ``benchmarks/baseline_cache.py``, keyed by its inputs). Wall time:
NASNetMobile alone (build, plain converter, job, Vela on both configs) took 22 min at 6ee5b80 on
the shared 2-core machine under load 8.7; the whole zoo is estimated at about 4 hours there
(``benchmarks/regenerate.py``'s plan says 240 min).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: The grouped-conv stack, then the zoo of benchmarks/zoo.py, cheapest first.
MODELS = ("grouped_conv_stack", "fer_emotion", "kws", "transformer", "detector",
          "MobileNetV3Small", "MobileNet", "MobileNetV2", "RegNetX002", "EfficientNetB0",
          "MobileNetV3Large", "EfficientNetV2B0", "NASNetMobile", "DenseNet121", "ConvNeXtTiny",
          "ResNet50", "InceptionV3", "Xception")
CONFIGS = ("ethos-u55-128", "ethos-u65-256")
#: Vela's default system config per accelerator family (what it picks when none is given).
SYSTEM = {"ethos-u55": "Ethos_U55_High_End_Embedded", "ethos-u65": "Ethos_U65_High_End"}
OUT = ROOT / "benchmarks" / "results"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}


def build_stack(case_dir: Path) -> None:
    """Keras 3: four Conv2D(32, 3, groups=4, relu) on 32x32x32; seeded data in [-1, 1]."""
    code = (
        "import keras, numpy as np, sys, json\n"
        "from pathlib import Path\n"
        "d = Path(sys.argv[1]); keras.utils.set_random_seed(0)\n"
        "x = inp = keras.Input((32, 32, 32))\n"
        "for _ in range(4):\n"
        "    x = keras.layers.Conv2D(32, 3, padding='same', groups=4, activation='relu')(x)\n"
        "keras.Model(inp, x).save(d / 'model.keras')\n"
        "rng = np.random.default_rng(0)\n"
        "np.save(d / 'calibration.npy', rng.uniform(-1, 1, (16, 32, 32, 32)).astype('f4'))\n"
        "np.save(d / 'data.npy', rng.uniform(-1, 1, (8, 32, 32, 32)).astype('f4'))\n"
        "json.dump({'name': 'grouped_conv_stack', 'model': 'model.keras', 'calibration': "
        "'calibration.npy', 'data': 'data.npy', 'note': 'Keras 3, 4 x Conv2D(32, 3, groups=4)'},"
        " open(d / 'case.json', 'w'))\n")
    case_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", code, str(case_dir)], check=True, env=_env(),
                   capture_output=True)


def build(name: str, size: int, workdir: Path) -> Path:
    case = workdir / name
    if (case / "case.json").exists():
        return case
    if name == "grouped_conv_stack":
        build_stack(case)
    else:
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "zoo_build.py"), str(workdir),
                        "--size", str(size), "--models", name], check=True, env=_env(),
                       capture_output=True)
    return case


def _inputs(case: Path) -> list[Path]:
    info = json.loads((case / "case.json").read_text())
    return [case / info["model"], case / info["calibration"]]


def plain(case: Path) -> dict[str, Any]:
    """The plain converter's file (zoo_tools plain-tflite), from the baseline cache when the
    same model, calibration data, tool versions and command already gave it
    (``benchmarks/baseline_cache.py``)."""
    from benchmarks import baseline_cache as bc

    out = case / "plain_int8.tflite"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "zoo_tools.py"), "plain-tflite", str(case),
           str(out)]

    return bc.cached("plain-tflite", _inputs(case), cmd[1:], bc.tool_versions(PLAIN_TOOLS),
                     lambda r: [out] if r.get("ok") else [], {"case": case},
                     lambda: _tool(cmd, out), _finished)


def _tool(cmd: list[str], out: Path) -> dict[str, Any]:
    out.unlink(missing_ok=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**_env(), "ZOO_QUIET": "1"})
    return {**_result(proc), "exit": proc.returncode}


def _finished(res: dict[str, Any]) -> bool:
    """zoo_tools exits 0 with its result (a converter's exception included); a signal or
    another exit is a crash, never kept in the baseline cache."""
    return res.get("exit") == 0


PLAIN_TOOLS = ("tensorflow", "keras", "tf-keras", "numpy")
ONNX_TOOLS = (*PLAIN_TOOLS, "tf2onnx", "onnx")


def _result(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """zoo_tools' JSON line, or what the dead tool did (``died with SIGSEGV``, its exception
    line; benchmarks/failure.py), never the tail of its log."""
    from benchmarks import failure

    lines = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and lines:
        try:
            res = json.loads(lines[-1])
        except ValueError:
            res = None
        if isinstance(res, dict):
            return res if res.get("ok") else {**res, "error": failure.clean(res.get("error"))}
    return {"ok": False, "error": failure.describe(proc.returncode, proc.stderr)}


def onnx2tf(case: Path, exe: str) -> dict[str, Any]:
    """onnx2tf (benchmarks/zoo.py's way: tf2onnx's file, then onnx2tf's full-int8 command line
    with our calibration data, its default backend then ``-tb tf_converter``); tf2onnx's and
    onnx2tf's files come from the baseline cache when they finished before on the same inputs
    (``benchmarks/baseline_cache.py``)."""
    from benchmarks import baseline_cache as bc
    from benchmarks import zoo

    out = case / "onnx2tf"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "zoo_tools.py"), "plain-onnx", str(case),
           str(out / "plain.onnx")]
    exported = bc.cached(
        "plain-onnx", _inputs(case), cmd[1:], bc.tool_versions(ONNX_TOOLS),
        lambda r: [out / "plain.onnx"] if r.get("ok") else [], {"case": case},
        lambda: _tool(cmd, out / "plain.onnx"), _finished)
    if not exported.get("ok"):
        return {"ok": False, "error": f"tf2onnx: {exported.get('error')}",
                "baseline_cache": exported.get("baseline_cache")}
    run = bc.cached("onnx2tf", [*_inputs(case), out / "plain.onnx"], zoo.onnx2tf_way(exe),
                    {"onnx2tf": zoo.versions(exe).get("onnx2tf", "absent")},
                    lambda r: [Path(r["file"])] if r.get("file") else [], {"case": case},
                    lambda: zoo._onnx2tf(exe, case, out, exported, _env()),
                    zoo.onnx2tf_finished)
    res = ({"ok": True, "path": run["file"], "backend": run["backend"]} if run["file"] else
           {"ok": False, "error": "onnx2tf: " + "; ".join(run.get("errors") or ["failed"])})
    return {**res, "baseline_cache": run.get("baseline_cache"),
            "tf2onnx_cache": exported.get("baseline_cache")}


def job(case: Path, target: str) -> dict[str, Any]:
    info = json.loads((case / "case.json").read_text())
    out = case / f"job_{target}"
    if not (out / "report.json").exists():
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "rewriter.cli", "run", str(case / info["model"]),
                               "--target", target, "--calibration", str(case / info["calibration"]),
                               "--data", str(case / info["data"]), "-o", str(out), "-q",
                               "--no-vela"], capture_output=True, text=True, env=_env())
        if proc.returncode not in (0, 1):
            from benchmarks import failure

            return {"ok": False, "error": failure.describe(proc.returncode, proc.stderr)}
        seconds = round(time.perf_counter() - start, 1)
    else:
        seconds = None
    report = json.loads((out / "report.json").read_text())
    equiv = (report.get("equivalence") or {}).get("artifact") or {}
    cos = min((o.get("cosine") or 1.0 for o in (equiv.get("outputs") or {}).values()),
              default=None)
    return {"ok": report.get("ok"), "path": str(out / "model.tflite"), "seconds": seconds,
            "rules": sorted({a["rule"] for a in report.get("rules_applied", [])}),
            "artifact_cosine": cos}


def judge(path: str, config: str, system: str) -> dict[str, Any]:
    from rewriter.rules import all_rules
    from rewriter.targets.cost import estimate
    from rewriter.targets.vela import run_vela

    res = run_vela(path, config, system_config=system)
    est = estimate(res, path, [r.name for r in all_rules()]) or {}
    return {"npu_ops": res.npu_ops, "cpu_ops": res.cpu_ops, "npu_ms": est.get("npu_ms"),
            "host_ms": est.get("host_ms"), "total_ms": est.get("total_ms"),
            "memory_mode": est.get("memory_mode"),
            "npu_by_op": {k: v["ms"] for k, v in list(est.get("npu", {}).get("by_op", {})
                                                      .items())[:5]},
            "host_by_op": {k: v["ms"] for k, v in est.get("host", {}).get("by_op", {}).items()}}


def render(rows: list[dict[str, Any]]) -> str:
    """The results table. A side that has no file (a converter that crashed or failed) shows
    the reason in its ops cell and ``-`` for its time; no ratio is taken against it."""
    from benchmarks import failure

    lines = ["# Speed on Ethos-U: the plain converter's file and the job's artifact, by Vela", "",
             "NPU ms: Vela's per-layer cycles at the system config's clock (they add up to its "
             "`inference_time`). Host ms: the ops Vela leaves on the CPU, a lower bound at the "
             "Cortex-M55's peak (rewriter/targets/cost.py). Ratio: the job's NPU ms over the plain "
             "file's; total: NPU + host.", "",
             "Goal (issue 29): total ratio <= 1, and NPU ratio <= 1.05 where the plain file "
             "has no CPU op.", "",
             "| model | accelerator | system config | plain: NPU/CPU ops | plain: NPU + host ms "
             "| job: NPU/CPU ops | job: NPU + host ms | NPU ratio | total ratio | goal "
             "| job rules |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    if any(r.get("onnx2tf") is not None for r in rows):
        head = lines[-2].split(" | job: NPU/CPU ops")
        lines[-2] = head[0] + " | onnx2tf: NPU/CPU ops | onnx2tf: NPU + host ms | job: NPU/CPU ops" + head[1]
        lines[-1] += "---|---|"
    for r in rows:
        p, j = r.get("plain") or {}, r.get("job") or {}

        def cell(d: dict[str, Any]) -> tuple[str, str]:
            if d.get("npu_ms") is None:  # no file or no estimate: the reason, never a log
                return failure.clean(d.get("error") or "no estimate"), "-"
            return (f"{d['npu_ops']} / {d['cpu_ops']}",
                    f"{d['npu_ms']:.3f} + {d['host_ms']:.3f} = {d['total_ms']:.3f}")
        pc, jc = cell(p), cell(j)
        o = r.get("onnx2tf")
        oc = " | ".join(cell(o)) + " | " if o is not None else ""
        ratio = (f"{j['npu_ms'] / p['npu_ms']:.2f}" if p.get("npu_ms") and j.get("npu_ms")
                 else "n/a")
        total = (f"{j['total_ms'] / p['total_ms']:.2f}" if p.get("total_ms") and j.get("total_ms")
                 else "n/a")
        lines.append(f"| {r['model']} | {r['config']} | {r['system']} | {pc[0]} | {pc[1]} | {oc}"
                     f"{jc[0]} | {jc[1]} | {ratio} | {total} | {goal(p, j)} | "
                     f"{', '.join(r['rules']) or '-'} |")
    return "\n".join(lines) + "\n"


def goal(p: dict[str, Any], j: dict[str, Any]) -> str:
    """Issue 29's bar: total <= plain's, NPU <= 1.05x plain's where plain has no CPU op."""
    if p.get("total_ms") is None:
        return "n/a (no plain file)" if p.get("error") else "n/a"
    if j.get("total_ms") is None:
        return "n/a"
    ok = j["total_ms"] <= p["total_ms"] * 1.0005  # Vela prints to the microsecond
    if not p.get("cpu_ops"):
        ok = ok and j["npu_ms"] <= 1.05 * p["npu_ms"]
    return "met" if ok else "**missed**"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--system-configs", default="",
                    help="CONFIG:SYSTEM,... (default: Vela's default per family)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/rewriter_speed"))
    ap.add_argument("--out", type=Path, default=OUT / "speed")
    ap.add_argument("--onnx2tf", default="",
                    help="onnx2tf's executable: add its full-int8 file (benchmarks/zoo.py's way)")
    args = ap.parse_args(argv)
    systems = dict(item.split(":", 1) for item in args.system_configs.split(",") if item)
    from benchmarks import baseline_cache as bc

    # The job artifacts kept in the work directory are our code's: rerun them for other code.
    bc.fresh_for_code(args.workdir, ["*/job_*"])
    rows: list[dict[str, Any]] = []
    names = args.models.split(",")
    configs = args.configs.split(",")
    for i, name in enumerate(names):
        try:
            case = build(name, args.size, args.workdir)
        except subprocess.CalledProcessError as exc:
            from benchmarks import failure

            why = failure.describe(exc.returncode, (exc.stderr or b"").decode(errors="replace"))
            rows.extend({"model": name, "config": c, "system": "-", "rules": [],
                         "plain": {"error": f"build {why}"}, "job": {}} for c in configs)
            md, js = write(rows, names[i + 1:], args, argv)
            continue
        base = plain(case)
        art = job(case, "ethos-u55-128")
        other = onnx2tf(case, args.onnx2tf) if args.onnx2tf else None
        print(f"{name}: plain {base.get('ok')}, job {art.get('ok')} {art.get('rules')}",
              flush=True)
        for config in configs:
            system = systems.get(config) or SYSTEM[config.rsplit("-", 1)[0]]
            row = {"model": name, "config": config, "system": system,
                   "rules": art.get("rules", []), "artifact_cosine": art.get("artifact_cosine"),
                   "job_seconds": art.get("seconds"),
                   "baseline_cache": [c for c in (base.get("baseline_cache"),
                                                  (other or {}).get("tf2onnx_cache"),
                                                  (other or {}).get("baseline_cache")) if c]}
            row["plain"] = judge(base["path"], config, system) if base.get("ok") else base
            row["job"] = judge(art["path"], config, system) if art.get("path") else art
            if other is not None:
                row["onnx2tf"] = (judge(other["path"], config, system) if other.get("ok")
                                  else other)
            rows.append(row)
            print(f"  {config} {system}: plain {row['plain'].get('npu_ms')} + "
                  f"{row['plain'].get('host_ms')} ms, job {row['job'].get('npu_ms')} + "
                  f"{row['job'].get('host_ms')} ms", flush=True)
        md, js = write(rows, names[i + 1:], args, argv)  # after every model: a stopped run counts
    print(f"wrote {md} and {js}")
    return 0


def write(rows: list[dict[str, Any]], not_run: list[str], args: argparse.Namespace,
          argv: list[str] | None) -> tuple[Path, Path]:
    """The results so far, stamped; models not reached are listed as not run."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    md, js = args.out.with_suffix(".md"), args.out.with_suffix(".json")
    text = render(rows)
    from benchmarks import baseline_cache as bc

    cached = bc.note([c for r in rows for c in r.get("baseline_cache", [])
                      if r["config"] == rows[0]["config"]])
    if cached:
        text += f"\n{cached}\n"
    if not_run:
        text += f"\nNot run (the run stopped or was stopped first): {', '.join(not_run)}.\n"
    md.write_text(text)
    js.write_text(json.dumps({"size": args.size, "rows": rows, "not_run": not_run}, indent=1)
                  + "\n")
    from benchmarks import stamp

    stamp.stamp_files([md, js], "speed.py", argv if argv is not None else sys.argv[1:])
    return md, js


if __name__ == "__main__":
    raise SystemExit(main())
