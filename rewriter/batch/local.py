"""Running the jobs of a batch: each one a ``rewrite run`` process, here or as a Ray task.

:func:`run_one` runs one job as ``python -m rewriter.cli run ... -o OUT -q`` (the console
script's supervised path: a native crash becomes exit 3 naming the stage) in a session of its
own, with its output in ``DIR/logs/<name>.log``; it measures the wall time and the peak memory of
the whole process tree (:class:`rewriter.host.procmem.TreeMeter`: the supervisor and the job, which
converts in-process, with Vela or TFLite Micro when they run) and reads the ``report.json`` the
job wrote. It returns a plain dict, so it is the same function on this machine
(:class:`LocalPool`, threads each waiting on one process; each job is started by
:func:`rewriter.host.child.start` in a process group of its own and dies with the batch) and on a Ray cluster
(:mod:`rewriter.batch.ray_pool`).

The local pool runs at most ``workers`` jobs at once and starts another only while the machine
has the memory a job is expected to need (``job_memory_mb``, raised to the largest peak seen so
far) or nothing else runs. Each job gets ``cores // workers`` TensorFlow threads unless the
environment sets them. An interrupt (Ctrl-C, SIGTERM) is passed to every running job as SIGINT
(each cleans up its staged output), and the jobs that finished stay as they are.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from rewriter.host import child
from rewriter.host.procmem import TreeMeter, available_mb

#: Environment variables that bound a job's threads (TensorFlow, oneDNN/OpenMP, BLAS).
THREAD_VARS = ("TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: How long an interrupted job gets to clean up before it is killed.
GRACE_SECONDS = 60.0


def job_spec(name: str, argv: list[str], outdir: Path, cwd: Path, log: Path,
             threads: int | None) -> dict[str, Any]:
    """What :func:`run_one` needs, as plain data (it may travel to a Ray worker)."""
    root = str(Path(__file__).resolve().parents[2])
    return {"name": name, "argv": argv, "outdir": str(outdir), "cwd": str(cwd), "log": str(log),
            "threads": threads, "root": root}


def job_env(spec: dict[str, Any]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (spec["root"], env.get("PYTHONPATH")) if p)
    for var in ("REWRITER_SUPERVISOR_DIR", "REWRITER_NO_SUPERVISOR"):
        env.pop(var, None)
    if spec.get("threads"):
        for var in THREAD_VARS:
            env.setdefault(var, str(spec["threads"]))
        env.setdefault("TF_NUM_INTEROP_THREADS", "1")
    return env


def run_one(spec: dict[str, Any], meter: TreeMeter | None = None,
            started: Callable[[subprocess.Popen], None] | None = None) -> dict[str, Any]:
    """Run one job to its end; its exit code, seconds, peak memory and report summary."""
    own_meter = meter is None
    meter = meter or TreeMeter()
    log = Path(spec["log"])
    log.parent.mkdir(parents=True, exist_ok=True)
    out = Path(spec["outdir"])
    cmd = [sys.executable, "-m", "rewriter.cli", "run", *spec["argv"], "-o", str(out), "-q"]
    start = time.perf_counter()
    with open(log, "wb") as fh:
        fh.write(("$ rewrite run " + " ".join(spec["argv"]) + f" -o {out} -q\n").encode())
        fh.flush()
        proc = child.start(cmd, new_group=True, cwd=spec["cwd"], env=job_env(spec),
                           stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT)
        meter.watch(proc.pid)
        if started is not None:
            started(proc)
        try:
            code = proc.wait()
        except BaseException:  # an interrupt of a Ray task: stop the job, then report it
            stop(proc)
            raise
        finally:
            peak = meter.done(proc.pid)
            if own_meter:
                meter.close()
    seconds = time.perf_counter() - start
    res: dict[str, Any] = {"exit_code": code, "seconds": round(seconds, 2),
                           "peak_rss_mb": peak.rss_mb, "peak_rss_hwm_mb": peak.hwm_mb,
                           "peak_mem_mb": peak.mem_mb, "ok": False, "summary": "", "error": "", "report_sha256": ""}
    if code < 0:  # the supervisor maps signals; only a kill of the supervisor itself lands here
        res["exit_code"] = 3 if -code not in (signal.SIGINT, signal.SIGTERM) else 2
        res["error"] = f"the job process died with signal {-code}"
    report = out / "report.json"
    if res["exit_code"] in (0, 1) and report.is_file():
        data = report.read_bytes()
        import hashlib

        res["report_sha256"] = hashlib.sha256(data).hexdigest()
        with contextlib.suppress(ValueError):
            rep = json.loads(data)
            res["ok"] = bool(rep.get("ok")) and res["exit_code"] == 0
            res["summary"] = str(rep.get("summary", ""))
    if not res["error"]:
        res["error"] = _last_error(log)
    return res


def _last_error(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errors = [ln for ln in lines if ln.startswith("error:")]
    return errors[-1][len("error:"):].strip() if errors else ""


def stop(proc: subprocess.Popen, grace: float = GRACE_SECONDS) -> None:
    """SIGINT to the job's process group (it removes its staging directory), then SIGKILL."""
    child.stop(proc, grace=max(grace, 0.01), first=signal.SIGINT)


class LocalPool:
    """Jobs as processes on this machine, at most ``workers`` at once, within its memory."""

    def __init__(self, workers: int, job_memory_mb: float) -> None:
        self.workers = max(1, workers)
        self.job_memory_mb = job_memory_mb
        self.meter = TreeMeter()
        self._running: dict[str, subprocess.Popen | None] = {}  # None: reserved, not started
        self._stopping = threading.Event()
        self._memory = threading.Condition()  # guards _running

    def run(self, specs: list[dict[str, Any]],
            on_done: Callable[[dict[str, Any], dict[str, Any]], None]) -> None:
        """Run ``specs``; ``on_done(spec, result)`` in this thread as each ends. On an interrupt
        the running jobs are stopped and reported, then KeyboardInterrupt is raised again."""
        futures: dict[Future, dict[str, Any]] = {}
        reported: set[Future] = set()
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="job")
        previous = signal.getsignal(signal.SIGTERM)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            for spec in specs:
                futures[pool.submit(self._one, spec)] = spec
            todo = set(futures)
            while todo:
                done, todo = wait(todo, timeout=0.5, return_when=FIRST_COMPLETED)
                for f in done:
                    reported.add(f)
                    res = f.result()
                    if res is not None:
                        on_done(futures[f], res)
        except KeyboardInterrupt:
            self._interrupt({f: s for f, s in futures.items() if f not in reported}, on_done)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            self.meter.close()
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, previous)

    def _interrupt(self, futures: dict[Future, dict[str, Any]],
                   on_done: Callable[[dict[str, Any], dict[str, Any]], None]) -> None:
        self._stopping.set()
        with self._memory:
            self._memory.notify_all()
        for f in futures:
            f.cancel()
        with self._memory:
            running = [p for p in self._running.values() if p is not None]
        for proc in running:
            child.send(proc, signal.SIGINT)
        deadline = time.monotonic() + GRACE_SECONDS
        for f, spec in futures.items():
            if f.cancelled():
                continue
            try:
                res = f.result(timeout=max(0.1, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - still running after the grace period
                res = None
            if res is None:
                with self._memory:
                    proc = self._running.get(spec["name"])
                if proc is not None:
                    stop(proc, grace=0)
                continue
            res["interrupted"] = res["exit_code"] not in (0, 1) or not res["report_sha256"]
            on_done(spec, res)

    def _one(self, spec: dict[str, Any]) -> dict[str, Any] | None:
        with self._memory:  # wait for the memory a job needs, unless nothing else runs
            while not self._stopping.is_set() and self._running and not self._fits():
                self._memory.wait(timeout=2.0)
            if self._stopping.is_set():
                return None
            self._running[spec["name"]] = None
        try:
            def started(proc: subprocess.Popen) -> None:
                with self._memory:
                    self._running[spec["name"]] = proc
                if self._stopping.is_set():
                    stop(proc, grace=GRACE_SECONDS)

            res = run_one(spec, self.meter, started)
            self.job_memory_mb = max(self.job_memory_mb, res["peak_rss_mb"])
            return res
        finally:
            with self._memory:
                self._running.pop(spec["name"], None)
                self._memory.notify_all()

    def _fits(self) -> bool:
        free = available_mb()
        return free is None or free >= self.job_memory_mb


def _raise_interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def default_workers(njobs: int, job_memory_mb: float) -> int:
    """As many jobs at once as there are cores and memory for (at least 1)."""
    cores = os.cpu_count() or 1
    free = available_mb()
    by_memory = int(free // job_memory_mb) if free else cores
    return max(1, min(cores, by_memory, njobs))
