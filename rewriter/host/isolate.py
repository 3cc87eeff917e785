"""Crash-prone native work (the TFLite converter and int8 quantizer, tf2onnx) in a child process.

The TFLite converter dies by SIGSEGV/SIGABRT on some inputs (measured on TF 2.21: an Inf or a
~1e38 weight, an Inf in calibration data), and a signal cannot be caught in the process it
kills. So the converters run in a worker: ``python -m rewriter.host.isolate LOG`` (spawned, never
forked: TensorFlow is not fork-safe; started by :func:`rewriter.host.child.start`, so it dies
with its parent), started on first use and reused for the rest of the process
(TensorFlow is imported once). :func:`call` writes a request directory (``payload.json`` and
files), sends its path to the worker, and the worker runs ``module:function(directory)`` and
answers with one JSON line. The worker's stdout/stderr (converter diagnostics) and faulthandler's
stack dump go to its log.

What comes back: the function's JSON result; a :class:`~rewriter.errors.UserError` it raised,
re-raised here; any other exception, or the worker dying by a signal, as an
:class:`~rewriter.errors.InternalError` naming the stage, with the log kept (exit 3). A dead
worker is replaced on the next call.

In a supervised child (the ``rewrite`` console script's work process, :mod:`rewriter.host.supervise`)
there is no worker: :func:`call` runs the same request in-process (:func:`in_process`). The
supervisor already turns a death by signal into exit 3 (``error: internal error: rewrite died
with SIGSEGV while TFLite conversion (int8); log kept at ...``, the log holding the stack dump and
what the converter wrote, since the request directory lies in the supervisor's directory), and a
second TensorFlow process costs the job's peak memory its libraries and runtime again: measured
by ``benchmarks/memory_ratio.py``, see the README's memory section. The worker stays for
unsupervised callers (``main(argv)`` from Python, the tests, the library), whose process must
survive a converter crash.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

from rewriter.errors import InternalError, UserError
from rewriter.host import child

_lock = threading.Lock()
_worker: _Worker | None = None


class _Worker:
    """One child process serving requests, one at a time."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="rewriter-worker-"))
        self.log = self.dir / "worker.log"
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        env.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
        env.pop("REWRITER_SUPERVISOR_DIR", None)
        self.proc = child.start(  # dies with this process, even mid-conversion
            [sys.executable, "-m", "rewriter.host.isolate", str(self.log)], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1)
        self.calls = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def request(self, target: str, directory: Path, stage: str) -> dict[str, Any]:
        self.calls += 1
        line = json.dumps({"target": target, "dir": str(directory), "stage": stage})
        try:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            answer = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            answer = ""
        if not answer:
            raise self._died(stage)
        return json.loads(answer)

    def _died(self, stage: str) -> InternalError:
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = child.stop(self.proc)
        how = child.describe(code)
        log = _keep(self.log, f"the {stage} worker {how}")
        shutil.rmtree(self.dir, ignore_errors=True)
        return InternalError(f"{stage} {how} (a crash in the converter, not in your model's "
                             "data: weights and data were checked first)", log)

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def _keep(log: Path, headline: str) -> str:
    from rewriter.host.supervise import keep_log

    try:
        text = log.read_text(errors="replace")
    except OSError:
        text = ""
    return keep_log(f"{headline}\n\n{text}", "crash")


def in_process() -> bool:
    """True when :func:`call` converts in this process: in a supervised child
    (:func:`rewriter.host.supervise.supervised`), where a converter crash already ends as exit 3
    naming the stage with the log kept, and a second TensorFlow process would only add its
    memory to the job's peak."""
    from rewriter.host.supervise import supervised

    return supervised()


def prestart() -> None:
    """Start the worker now (its TensorFlow import overlaps with the caller's work); nothing
    when :func:`in_process`."""
    if in_process():
        return
    with _lock:
        _get()


def _get() -> _Worker:
    global _worker
    if _worker is None or not _worker.alive():
        _worker = _Worker()
    return _worker


@atexit.register
def shutdown() -> None:
    """Stop the worker (at exit, or in tests)."""
    global _worker
    with _lock:
        if _worker is not None:
            _worker.close()
            _worker = None


def call(stage: str, target: str, payload: dict[str, Any],
         files: dict[str, bytes] | None = None) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Run ``target`` (``"module:function"``) in the worker on a request directory holding
    ``payload.json`` and ``files``; returns its JSON result and the files it wrote to ``out/``.
    """
    from rewriter.host.supervise import work_dir

    here = in_process()
    request = Path(tempfile.mkdtemp(prefix="rewriter-request-", dir=work_dir() if here else None))
    try:
        (request / "payload.json").write_text(json.dumps(payload))
        for name, data in (files or {}).items():
            (request / name).write_bytes(data)
        (request / "out").mkdir()
        with _lock:
            if here:
                reply = _call_here(stage, target, request)
            else:
                try:
                    reply = _get().request(target, request, stage)
                except InternalError as exc:  # keep what the converter said before it died
                    _append_logs(exc.log, request)
                    raise
        if "user_error" in reply:
            raise UserError(reply["user_error"])
        if "exception" in reply:
            from rewriter.host.supervise import keep_log

            log = keep_log(reply.get("traceback", ""), "internal")
            raise InternalError(f"{stage} failed: {reply['exception']}", log)
        outputs = {p.name: p.read_bytes() for p in (request / "out").iterdir() if p.is_file()}
        return reply["result"], outputs
    finally:
        shutil.rmtree(request, ignore_errors=True)


def _call_here(stage: str, target: str, request: Path) -> dict[str, Any]:
    """Run the request in this (supervised) process, as the worker would: the memory the job
    no longer holds is given back first, ``stage`` is the stage the parent names if the
    converter kills the process, and the converter's stdout goes to a log in the request
    directory (which the parent keeps with the native log after a crash) rather than to the
    user's terminal."""
    from rewriter.host.procmem import release
    from rewriter.host.supervise import current_stage, set_stage

    release()
    before = current_stage()
    set_stage(stage)
    sys.stdout.flush()
    saved = os.dup(1)
    out = os.open(request / "stdout.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(out, 1)
        return _handle({"target": target, "dir": str(request), "stage": stage})
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(out)
        set_stage(before)
        release()


def _append_logs(kept: str | None, request: Path) -> None:
    if not kept:
        return
    with open(kept, "a", errors="replace") as f:
        for log in sorted(request.glob("*.log")):
            f.write(f"\n=== {log.name}\n{log.read_text(errors='replace')}")


# ----------------------------------------------------------------------------- worker side
def _serve(log_path: str) -> None:
    """The worker's loop: one JSON request per stdin line, one JSON answer per stdout line."""
    import faulthandler
    import warnings

    from rewriter.host.procmem import release

    answers = os.fdopen(os.dup(1), "w", buffering=1)
    log = open(log_path, "ab", buffering=0)  # noqa: SIM115 - lives as long as the worker
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = os.fdopen(os.dup(log.fileno()), "w", buffering=1)
    faulthandler.enable(file=log, all_threads=True)
    warnings.filterwarnings("ignore")
    with contextlib.suppress(ImportError):
        import tensorflow as tf

        tf.get_logger().setLevel("ERROR")
    for line in sys.stdin:
        request = json.loads(line)
        print(f"=== {request['stage']}: {request['target']}", flush=True)
        answer = json.dumps(_handle(request))
        release()  # what the converter freed goes back to the system before the job goes on
        answers.write(answer + "\n")
    # stdin closed: the parent is done (or gone without cleaning up): nobody needs the log
    shutil.rmtree(Path(log_path).parent, ignore_errors=True)


def _handle(request: dict[str, Any]) -> dict[str, Any]:
    module, _, name = request["target"].partition(":")
    try:
        if not module.startswith("rewriter."):
            raise UserError(f"refusing to run {request['target']!r} in the worker")
        fn = getattr(importlib.import_module(module), name)
        return {"result": fn(Path(request["dir"]))}
    except UserError as exc:
        return {"user_error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - reported to the parent as an internal error
        return {"exception": f"{type(exc).__name__}: {str(exc)[:300]}",
                "traceback": traceback.format_exc()}


if __name__ == "__main__":  # pragma: no cover - the worker process
    _serve(sys.argv[1])
