"""Peak memory of one `rewrite` job, stage by stage: where a job's memory goes.

    PYTHONPATH=. python benchmarks/stage_memory.py [--root CHECKOUT] -- MODEL --target T [...]

Runs the main job in this process (the arguments after ``--`` are ``rewrite``'s) with a thread
sampling the process's RSS every 20 ms, and prints, for loading and for every timed step of the
job (``rewriter.job.stages.Steps``: the keys of ``report.json``'s ``timings``), the RSS when it
starts and the peak reached during it (and, as ``(after STEP)``, the peak between two steps
when it rose more than 50 MB there). The TFLite converter runs in this process too, as in a
supervised job (``rewriter.host.isolate.in_process``), so the peaks are those ``rewrite batch``
measures for the job, less the supervisor (``benchmarks/memory_ratio.py`` measures the whole process tree against the plain
converter). ``--root`` runs another checkout's code (to compare before and after a change).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _rss_mb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


class Sampler:
    """RSS sampled every ``interval`` s; :meth:`section` returns the peak since the last one."""

    def __init__(self, interval: float = 0.02) -> None:
        self.peak = _rss_mb()
        self.rows: list[tuple[str, int, int]] = []
        self._interval = interval
        self._lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            rss = _rss_mb()
            with self._lock:
                self.peak = max(self.peak, rss)
            time.sleep(self._interval)

    def section(self, name: str, start_rss: int) -> None:
        with self._lock:
            self.rows.append((name, start_rss, max(self.peak, _rss_mb())))
            self.peak = _rss_mb()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    job = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose code runs")
    ap.add_argument("--out", help="also write OUT.md and OUT.json (stamped, benchmarks/stamp.py)")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if not job:
        ap.error("give the job's arguments after --")
    sys.path.insert(0, str(args.root.resolve()))
    import rewriter.host.isolate as isolate
    import rewriter.job.stages as stages
    from rewriter.cli import main as rewrite

    isolate.in_process = lambda: True  # convert here, as a supervised job does

    sampler = Sampler()
    steps_call = stages.Steps.__call__
    gap = {"name": "load (and data)", "start": _rss_mb()}

    @contextlib.contextmanager
    def timed(self: stages.Steps, key: str, message: str | None = None) -> Iterator[None]:
        sampler.section(gap["name"], gap["start"])  # what ran since the last step ended
        start = _rss_mb()
        with steps_call(self, key, message):
            yield
        sampler.section(key, start)
        gap.update(name=f"(after {key})", start=_rss_mb())

    stages.Steps.__call__ = timed
    t0 = time.perf_counter()
    code = rewrite(job)
    seconds = time.perf_counter() - t0
    print(f"rewrite {' '.join(job)}\nexit {code}, {seconds:.1f} s, code of "
          f"{args.root.resolve()} (rewriter {os.path.dirname(stages.__file__)})")
    print(f"{'stage':<22} {'RSS at start':>13} {'peak':>8}")
    rows = [(name, start, peak) for name, start, peak in sampler.rows
            if not name.startswith("(") or peak > start + 50]  # a gap between steps that did work
    for name, start, peak in rows:
        print(f"{name:<22} {start:>10} MB {peak:>5} MB")
    job_peak = max(p for _, _, p in sampler.rows)
    print(f"{'job':<22} {'':>13} {job_peak:>5} MB")
    if args.out:
        _write(args.out, argv, job, code, seconds, rows, job_peak, args.root.resolve())
    return 0


def _write(out: str, argv: list[str], job: list[str], code: int, seconds: float,
           rows: list[tuple[str, int, int]], job_peak: int, root: Path) -> None:
    from benchmarks import stamp

    result = {"job": job, "exit": code, "seconds": round(seconds, 1), "job_peak_mb": job_peak,
              "stages": [{"stage": n, "rss_start_mb": s, "peak_mb": p} for n, s, p in rows]}
    lines = ["# Peak memory of one job, stage by stage", "",
             f"`rewrite {' '.join(job)}`: exit {code}, {seconds:.1f} s, job peak **{job_peak} MB**"
             " (in-process, RSS sampled every 20 ms).", "",
             "| stage | RSS at start, MB | peak, MB |", "|---|---:|---:|"]
    lines += [f"| {n} | {s} | {p} |" for n, s, p in rows]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out + ".json").write_text(json.dumps(result, indent=1) + "\n")
    Path(out + ".md").write_text("\n".join(lines) + "\n")
    # The commit stamped is the one whose code ran (--root).
    stamp.stamp_files([out + ".md", out + ".json"], "stage_memory.py", argv, root=root)


if __name__ == "__main__":
    sys.exit(main())
