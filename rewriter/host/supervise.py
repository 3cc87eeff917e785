"""No run ends in a signal or in silence: exit codes for every failure, and a supervising parent.

Exit codes (as pytest uses them): 0 success; 1 the job ran and the result is not acceptable;
2 bad usage or input (or the environment: a full or read-only disk, an interrupt), with one line
``error: ...`` saying what to do; 3 internal error, with one line naming the stage and the path of
a kept log. :func:`exit_code_for` maps an exception to that line and code; the CLI prints it.

TensorFlow, the TFLite converter, LiteRT and ONNX Runtime are native code that can die by a
signal (SIGSEGV, SIGABRT) on inputs nobody validated. So the ``rewrite`` console script
(:func:`rewriter.cli.main` called without arguments) does not do the work itself: it starts
``python -m rewriter.cli`` as a child and waits (:func:`supervise`). The child (:func:`attach`)
sends native output (fd 2: TF logs, ``Check failed`` aborts, faulthandler's stack dump) to a log
and keeps Python's ``sys.stderr`` on the terminal; every ``ui.step`` records its description as
the current stage (:func:`track_stages`). A child that dies by a signal becomes ``error: internal
error: ... died with SIGSEGV while <stage>; log kept at <path>`` and exit 3 (an interrupt is
exit 2). Calls of ``main(argv)`` from Python (the tests) run in-process, unsupervised.

Because the child is supervised, it runs the converters in-process (:func:`supervised`,
:func:`rewriter.host.isolate.in_process`): a converter crash ends the child, and the parent reports it
naming the conversion stage; the child's other ``*.log`` files (the converter's diagnostics, in
:func:`work_dir`) are appended to the kept log.
"""

from __future__ import annotations

import contextlib
import errno
import faulthandler
import os
import shutil
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rewriter.errors import InternalError, UserError, first_line

#: Set in the child's environment: the directory holding its stage file and native log.
ENV_DIR = "REWRITER_SUPERVISOR_DIR"
_STAGE = "stage"
_NATIVE_LOG = "native.log"
_INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_state: dict[str, Any] = {"stage_file": None, "log": None, "stage": "starting"}


# ----------------------------------------------------------------------------- parent side
def should_supervise() -> bool:
    """True for the console script's own process (not yet a supervised child)."""
    return ENV_DIR not in os.environ and os.environ.get("REWRITER_NO_SUPERVISOR") != "1"


def supervise(argv: list[str]) -> int:
    """Run ``rewrite ARGV`` in a child process and turn a death by signal into exit 2 or 3.

    The child dies with this process (:func:`rewriter.host.child.start`): after ``kill -9`` of
    ``rewrite`` nothing of the job runs on, and nothing is swapped into OUT."""
    from rewriter.host import child

    work = tempfile.mkdtemp(prefix="rewriter-run-")
    env = child.python_env()
    env[ENV_DIR] = work
    # The terminal sends Ctrl-C to both; the child handles it. SIGTERM and SIGHUP are passed on.
    # A signal that comes before the child exists is held and passed on once it does (SIG_IGN
    # cannot be set before: the child would inherit it).
    with child.forwarding((signal.SIGINT, signal.SIGTERM, signal.SIGHUP)) as forward:
        proc = child.start([sys.executable, "-m", "rewriter.cli", *argv], env=env)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        forward.attach(proc)
        code = proc.wait()
    if code >= 0:
        shutil.rmtree(work, ignore_errors=True)
        return code
    return _report_signal(-code, Path(work))


def _report_signal(sig: int, work: Path) -> int:
    stage = _read(work / _STAGE) or "starting"
    name = _signal_name(sig)
    if sig in _INTERRUPTS:
        shutil.rmtree(work, ignore_errors=True)
        print(f"error: interrupted ({name}) while {stage}", file=sys.stderr)
        return 2
    log = keep_log(f"rewrite died with {name} while {stage}\n\n" + _read(work / _NATIVE_LOG)
                   + _other_logs(work), "crash")
    shutil.rmtree(work, ignore_errors=True)
    hint = " (often the out-of-memory killer)" if sig == signal.SIGKILL else ""
    print(f"error: internal error: rewrite died with {name}{hint} while {stage}; "
          f"log kept at {log}", file=sys.stderr)
    return 3


def _other_logs(work: Path) -> str:
    """The logs the child left in its directory besides the native log (what a converter it
    ran in-process said before it died: :func:`rewriter.host.isolate.call`)."""
    logs = ((p, _read(p)) for p in sorted(work.rglob("*.log")) if p.name != _NATIVE_LOG)
    return "".join(f"\n=== {p.relative_to(work)}\n{text}\n" for p, text in logs if text)


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def keep_log(text: str, kind: str) -> str:
    """Write ``text`` to a log file that outlives the run; its path."""
    fd, path = tempfile.mkstemp(prefix=f"rewriter-{kind}-", suffix=".log")
    with os.fdopen(fd, "w", errors="replace") as f:
        f.write(text)
    return path


# ----------------------------------------------------------------------------- child side
def attach() -> None:
    """In a supervised child: native fd 2 and fatal-signal stack dumps go to the log, Python's
    ``sys.stderr`` stays on the terminal, stages go to the stage file."""
    import rewriter.host.child  # noqa: F401 - takes its parent's pid out of the environment

    work = Path(os.environ.pop(ENV_DIR))
    log = open(work / _NATIVE_LOG, "ab", buffering=0)  # noqa: SIM115 - lives as long as the run
    sys.stderr.flush()
    terminal = os.dup(2)
    os.dup2(log.fileno(), 2)
    sys.stderr = os.fdopen(terminal, "w", buffering=1, errors="backslashreplace")
    faulthandler.enable(file=log, all_threads=True)
    _state.update(stage_file=work / _STAGE, log=log)
    set_stage("starting")
    # SIGTERM and SIGHUP end the job as Ctrl-C does: the staging directory and the lock beside
    # OUT are removed and children are stopped on the way out (exit 2, "interrupted").
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)


def _interrupt(sig: int, _frame: Any) -> None:
    raise KeyboardInterrupt(_signal_name(sig))


def supervised() -> bool:
    """True in a supervised child (after :func:`attach`): a death by signal here ends as exit 3
    naming the stage, with the log kept, reported by the parent."""
    return _state["stage_file"] is not None


def work_dir() -> Path | None:
    """The supervised child's directory (removed by the parent when the child ends; its
    ``*.log`` files are kept with the native log if the child dies by a signal), else None."""
    path = _state["stage_file"]
    return None if path is None else Path(path).parent


def set_stage(text: str) -> None:
    """Record what the run is doing now (named in the error if the process dies)."""
    _state["stage"] = text
    path = _state["stage_file"]
    if path is not None:
        with contextlib.suppress(OSError):
            path.write_text(text)


def current_stage() -> str:
    return str(_state["stage"])


def track_stages(ui: Any) -> None:
    """Make every ``ui.step(description)`` the current stage while it runs."""
    step: Callable[[str], Any] = ui.step

    @contextlib.contextmanager
    def tracked(description: str) -> Iterator[None]:
        before = current_stage()
        set_stage(description)
        try:
            with step(description):
                yield
        finally:
            set_stage(before)

    ui.step = tracked


# ----------------------------------------------------------------------------- exit codes
#: OSError numbers that mean "the environment or the paths given", not a bug.
_ENV_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
               errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENOENT, errno.EFBIG,
               errno.ENAMETOOLONG, errno.EMFILE, errno.ENFILE, errno.ELOOP, errno.EBUSY,
               errno.EXDEV, errno.ENOTEMPTY, errno.ETXTBSY}
#: Texts of native write failures (TF's C++ file system reports them as OpErrors).
_ENV_TEXTS = ("No space left on device", "Read-only file system", "Permission denied",
              "Disk quota exceeded", "File too large", "Not a directory")


def exit_code_for(exc: BaseException) -> tuple[int, str]:
    """``(exit code, one-line message)`` for an exception that ended a command."""
    if isinstance(exc, UserError):
        return 2, _one_line(str(exc))
    if isinstance(exc, InternalError):
        return 3, _one_line(f"internal error: {exc}")
    if isinstance(exc, KeyboardInterrupt):
        return 2, f"interrupted while {current_stage()}"
    if isinstance(exc, BrokenPipeError):  # `rewrite ... | head`: stop writing, quietly
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 2, "the output was closed before rewrite finished (broken pipe)"
    if isinstance(exc, OSError) and exc.errno in _ENV_ERRNOS:
        where = f"{exc.filename}: " if exc.filename else ""
        return 2, _one_line(f"{where}{exc.strerror or exc}{_os_hint(exc.errno)}")
    if isinstance(exc, MemoryError):
        return 2, (f"out of memory while {current_stage()}: give a smaller --input-shape or "
                   "fewer --samples, or run on a machine with more memory")
    text = str(exc)
    if _is_tf_error(exc) and any(t in text for t in _ENV_TEXTS):
        return 2, _one_line(f"cannot write while {current_stage()}: {first_line(text)}")
    if isinstance(exc, SystemExit):
        code = exc.code if isinstance(exc.code, int) else 3
        return (code, "") if code in (0, 1, 2, 3) else (3, f"internal error: exit {code}")
    log = keep_log("".join(traceback.format_exception(exc)), "internal")
    return 3, _one_line(f"internal error while {current_stage()}: {type(exc).__name__}: "
                        f"{first_line(text)} (a bug in rewriter; traceback kept at {log})")


def _os_hint(code: int | None) -> str:
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return " (free some space or choose another -o)"
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return " (choose a directory you can write with -o)"
    return ""


def _is_tf_error(exc: BaseException) -> bool:
    tf = sys.modules.get("tensorflow")
    errors = getattr(tf, "errors", None)
    return errors is not None and isinstance(exc, errors.OpError)


def _one_line(text: str) -> str:
    return " ".join(text.split())
