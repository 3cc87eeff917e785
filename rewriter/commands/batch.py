"""``rewrite batch MANIFEST.toml -o DIR``: many main jobs, in parallel processes or on Ray.

See :mod:`rewriter.batch.run` for the manifest and what ``DIR`` holds. Exit 0 when every job is OK,
1 when a job's result is not acceptable or a job failed (each job's exit code is in
``batch.json``), 2 for a bad manifest or usage, or an interrupt (finished jobs stay).
"""

from __future__ import annotations

import argparse
import os
import textwrap
from typing import Any

from rewriter.errors import UserError

HELP = "run many jobs from a manifest (TOML [[job]] entries), resumable, in parallel or on Ray"
#: What one job is expected to need at most when no job has run yet (MB); raised as jobs end.
DEFAULT_JOB_MEMORY_MB = 3000.0

#: Every refusal the manifest and DIR can give (exit 2, nothing runs), as ``--help`` and the
#: README list them (tests/test_faults.py keeps the three in step).
REFUSALS = (
    "the manifest is missing, a directory, or not valid TOML",
    "a table other than [[job]] and [defaults]",
    "no [[job]] entry",
    "a job without `model = \"path\"`, or whose model does not exist (paths are relative to "
    "the manifest)",
    "a job without `target = \"name\"` or a list of names, or naming an unknown target",
    "two jobs writing one directory (the same model stem and target): give one of them a "
    "`name`",
    "`name` with more than one target, or a `name` that cannot be a directory (empty, with a "
    "`/`, starting with `.`, or `logs`)",
    "a key that is not a long option of `rewrite run`, or one the batch sets itself (`out`, "
    "`json`, `quiet`, `help`)",
    "a flag that is not true/false, a list for an option that is not repeatable, a value that "
    "is not a string or a number, or a value `rewrite run` itself refuses",
    "-o DIR that is or holds an input, or holds files no `rewrite batch` wrote",
    "--workers below 1 or --job-memory not positive",
)
EPILOG = "\n".join([
    textwrap.fill("manifest keys per [[job]] (or in [defaults]): model, target (a name or a list: "
                  "one job per target), name (the job's directory; default <model "
                  "stem>-<target>), and any long option of `rewrite run` (`-` or `_` alike; true "
                  "for flags, a list for repeatable options).", 78),
    "", "refused before any job runs (exit 2, naming the job):",
    *(textwrap.fill(r, 78, initial_indent="  * ", subsequent_indent="    ") for r in REFUSALS)])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", help="TOML file with [[job]] entries: model, target, and any "
                        "option of `rewrite run` (e.g. calibration, pixel_range, input_shape, "
                        "quantize); an optional [defaults] table applies to every job")
    parser.add_argument("-o", "--out", required=True,
                        help="batch directory: one DIR/<model stem>-<target>/ per job, "
                        "batch.json, batch.md, logs/")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="jobs at once (default: as many as there are cores and memory for)")
    parser.add_argument("--job-memory", type=float, default=DEFAULT_JOB_MEMORY_MB / 1000,
                        metavar="GB", help="memory one job is expected to need (default "
                        f"{DEFAULT_JOB_MEMORY_MB / 1000:g}; raised to the largest peak seen): "
                        "a job starts only while the machine has that much free, and it is "
                        "the memory each Ray task requests")
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="run the jobs as Ray tasks: a cluster address, `auto`, or `local` "
                        "(a Ray instance for this batch); paths must be shared by the nodes")
    parser.add_argument("--rerun", action="store_true",
                        help="run every job again, also those unchanged since they finished")
    parser.add_argument("--json", action="store_true", help="print batch.json to stdout")


def run(args: argparse.Namespace, ui: Any) -> int:
    import json

    from rewriter.batch.local import LocalPool, default_workers
    from rewriter.batch.run import BATCH_JSON, BATCH_MD, check_outdir, load_manifest, run_batch
    from rewriter.host.fs import output_lock

    if args.workers is not None and args.workers < 1:
        raise UserError("--workers must be at least 1")
    if args.job_memory <= 0:
        raise UserError("--job-memory must be positive (GB)")
    manifest = load_manifest(args.manifest)
    outdir = check_outdir(args.out, manifest)
    memory_mb = args.job_memory * 1000
    if args.ray:
        from rewriter.batch.ray_pool import RayPool

        pool: Any = RayPool(args.ray, memory_mb)
        threads = None
        how = f"on Ray ({args.ray})"
    else:
        workers = args.workers or default_workers(len(manifest.jobs), memory_mb)
        pool = LocalPool(workers, memory_mb)
        threads = max(1, (os.cpu_count() or 1) // workers)
        how = f"{workers} at once"
    total = len(manifest.jobs)
    ui.info(f"{total} jobs from {args.manifest} into {args.out}, {how}")
    with output_lock(outdir, args.out), ui.bar("batch", total) as advance:
        def done(rec: Any, n: int, _total: int) -> None:
            status = "OK" if rec.ok else f"NOT OK (exit {rec.exit_code})"
            if rec.skipped:
                cost = f"skipped: unchanged since its run ({rec.seconds:.1f} s)"
            elif rec.interrupted:
                status, cost = "interrupted", f"{rec.seconds:.1f} s"
            else:
                cost = (f"{rec.seconds:.1f} s, peak {rec.peak_rss_mb:.0f} MB RSS "
                        f"({rec.peak_mem_mb:.0f} MB footprint)")
            what = rec.summary or rec.error
            ui.info(f"[{n}/{total}] {rec.name}: {status}, {cost}" + (f": {what}" if what else ""))
            advance(1, rec.name)

        result = run_batch(manifest, outdir, pool, threads, args.rerun, done)
    if ui.json_mode:
        ui.json(json.loads((outdir / BATCH_JSON).read_text()))
    else:
        ok = sum(r.ok for r in result.records)
        skipped = sum(r.skipped for r in result.records)
        ui.out(f"{'OK' if result.ok else 'NOT OK'}: {ok} of {total} jobs OK ({skipped} skipped "
               f"as unchanged) in {result.seconds:.1f} s; {args.out.rstrip('/')}/{BATCH_MD}")
        for r in result.records:
            if not r.ok:
                ui.out(f"  {r.name}: exit {r.exit_code}: {r.summary or r.error} "
                       f"(log: {r.log})")
    return 0 if result.ok else 1
