"""Peak memory of `rewrite` jobs against the plain converter on the same model (issue 12's goal:
a job's peak at most 1.5x the plain converter's).

    PYTHONPATH=. python benchmarks/memory_ratio.py [--models MobileNetV3Small,ResNet50]
        [--targets edgetpu,ethos-u55-128,tflm,onnx] [--size 64] [--workdir /tmp/rewriter_mem]
        [--root CHECKOUT]

Builds the models as ``benchmarks/zoo.py`` does (``benchmarks/zoo_build.py``), runs every
(model, target) job through ``rewrite batch --workers 1`` (one job at a time; ``batch.json``
records each job's peak RSS summed over its process tree and its footprint, see
:mod:`rewriter.host.procmem`), and measures the baselines of ``benchmarks/zoo_tools.py`` the same way
(the plain TFLite converter, full int8 with int8 I/O, for the TFLite targets; plain tf2onnx for
``onnx``). Prints one line per job: the job's peak RSS and footprint, the baseline's RSS, and
their ratios. ``--root`` runs the jobs of another checkout (to compare before and after a
change); the baselines are cached in the work directory, the batch directory is per root.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    from benchmarks.zoo import _cached, build, manifest, measured

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="MobileNetV3Small,ResNet50")
    ap.add_argument("--targets", default="edgetpu,ethos-u55-128,tflm,onnx")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/rewriter_mem"))
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose jobs run")
    ap.add_argument("--out", help="also write OUT.md and OUT.json (stamped, benchmarks/stamp.py)")
    args = ap.parse_args(argv)
    models, targets = args.models.split(","), args.targets.split(",")
    root = args.root.resolve()
    from benchmarks import baseline_cache

    # `rewrite batch` skips the jobs its directory holds: not those of other code.
    baseline_cache.fresh_for_code(args.workdir, ["batch-*", "zoo.toml"], root=root)
    cases = build(args.workdir, args.size, models)
    batch_dir = args.workdir / f"batch-{hashlib.sha256(str(root).encode()).hexdigest()[:8]}"
    env = dict(os.environ, PYTHONPATH=str(root))
    subprocess.call([sys.executable, "-m", "rewriter.cli", "batch",
                     str(manifest(args.workdir, cases, targets)), "-o", str(batch_dir),
                     "--workers", "1"], env=env, cwd=args.workdir)
    jobs = {j["name"]: j for j in json.loads((batch_dir / "batch.json").read_text())["jobs"]}
    tools = str(ROOT / "benchmarks" / "zoo_tools.py")
    base_env = dict(os.environ, PYTHONPATH=str(ROOT), ZOO_QUIET="1")
    print(f"jobs of {root} (batch: {batch_dir})")
    print("model | target | exit | job RSS MB | job footprint MB | plain RSS MB | RSS ratio | "
          "footprint ratio")
    rows = []
    for name in models:
        case, out = args.workdir / "models" / name, args.workdir / "baselines" / name
        out.mkdir(parents=True, exist_ok=True)
        for t in targets:
            kind = "plain_onnx" if t == "onnx" else "plain_tflite"
            file = "plain.onnx" if t == "onnx" else "plain_int8.tflite"
            cmd = [sys.executable, tools, kind.replace("_", "-"), str(case), str(out / file)]
            base = _cached(out / f"{kind}.json", lambda cmd=cmd: measured(cmd, env=base_env))
            job = jobs.get(f"{name}-{t}", {})
            rss, mem, plain = job.get("peak_rss_mb"), job.get("peak_mem_mb"), base["peak_rss_mb"]
            print(f"{name} | {t} | {job.get('exit_code')} | {rss} | {mem} | {plain} | "
                  f"{rss / plain:.2f} | {mem / plain:.2f}" if rss and plain else
                  f"{name} | {t} | {job.get('exit_code')} | {rss} | {mem} | {plain} | - | -")
            rows.append({"model": name, "target": t, "exit": job.get("exit_code"),
                         "job_rss_mb": rss, "job_footprint_mb": mem, "plain_rss_mb": plain,
                         "plain_exit": base.get("exit"),
                         # a ratio only against a baseline that finished
                         "rss_ratio": round(rss / plain, 2)
                         if rss and plain and base.get("exit") == 0 else None})
    if args.out:
        _write(args.out, rows, args.size, root, argv)
    return 0


def _write(out: str, rows: list[dict], size: int, root: Path, argv: list[str] | None) -> None:
    from benchmarks import stamp

    lines = ["# Peak memory: `rewrite batch` jobs against the plain converter", "",
             f"{size}x{size}; each job through `rewrite batch --workers 1`, peak RSS summed over "
             "its process tree; the plain converter (plain tf2onnx for onnx) in its own process.",
             "", "| model | target | exit | job RSS MB | job footprint MB | plain RSS MB | "
             "RSS ratio |", "|---|---|---|---:|---:|---:|---:|"]
    lines += [f"| {r['model']} | {r['target']} | {r['exit']} | {r['job_rss_mb']} | "
              f"{r['job_footprint_mb']} | {r['plain_rss_mb']} | "
              f"{'-' if r['rss_ratio'] is None else format(r['rss_ratio'], '.2f')} |" for r in rows]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out + ".json").write_text(json.dumps({"size": size, "rows": rows}, indent=1) + "\n")
    Path(out + ".md").write_text("\n".join(lines) + "\n")
    stamp.stamp_files([out + ".md", out + ".json"], "memory_ratio.py", argv, root=root)


if __name__ == "__main__":
    raise SystemExit(main())
