"""One way to run a child process: it dies with its parent, it can be stopped with its own
children, it has a timeout, and a death by signal is said by name.

Every child rewriter starts (the supervised job, the converter worker, the jobs of a batch,
TFLite Micro, Vela) is started by :func:`start` (or :func:`run`, which waits for it):

* **It never outlives its parent.** The child is started through ``python -S -m
  rewriter.host._launch PID -- ARGV``: that small launcher sets ``PR_SET_PDEATHSIG`` (``prctl``
  through ctypes: the kernel sends SIGKILL to the child when the thread that started it dies,
  ``kill -9`` included), checks that its parent is still ``PID`` (a parent that died before the
  ``prctl`` is not noticed by the kernel), and ``exec``\\ s ``ARGV``; the setting survives the
  ``exec``. Setting it in ``preexec_fn`` instead would run Python between ``fork`` and ``exec``
  in a process with TensorFlow's threads, which can deadlock. A chain of such children (batch
  -> supervisor -> job -> Vela) dies from the top down. Not on Linux: no ``prctl``; the
  launcher only checks its parent.
* **It can be stopped with its children**: ``new_group=True`` puts it in a process group of its
  own, which :func:`stop` signals as a whole (first ``first``, then SIGKILL after ``grace``).
* **A timeout or an interrupt stops it**: :func:`run` stops the child's group when the timeout
  passes or when the waiting thread is interrupted (KeyboardInterrupt, SIGTERM made one), then
  re-raises.
* **Its end is said**: :func:`describe` turns a return code into ``exited with code 3`` or
  ``died with SIGSEGV``.

On the child's side, :func:`parent_gone` says whether the process that started this one has
died (its parent is now someone else): a job checks it right before it swaps its output into
place (:mod:`rewriter.host.fs`).

Libraries weighed: ``concurrent.futures.ProcessPoolExecutor`` and ``pebble`` run pickled Python
functions in multiprocessing workers, not commands (Vela, the job's own CLI), and neither ties a
worker's life to its parent's (pebble reports a worker's death, not its signal's name in a log
we keep); ``psutil`` walks process trees but guarantees nothing when the parent is killed. Each
would be a dependency doing part of this; the kernel's ``prctl`` plus ``subprocess`` does it all
in one module.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewriter.host._launch import ENV_PARENT

_ROOT = str(Path(__file__).resolve().parents[2])


def python_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with rewriter's root first on ``PYTHONPATH``, so a
    ``python -m rewriter...`` child imports the same code as this process."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
    return env


def guarded(argv: Sequence[str]) -> list[str]:
    """``argv`` behind the launcher that ties its life to this process."""
    return [sys.executable, "-S", "-m", "rewriter.host._launch", str(os.getpid()), "--",
            *map(str, argv)]


def start(argv: Sequence[str], *, new_group: bool = False, env: dict[str, str] | None = None,
          **popen: Any) -> subprocess.Popen:
    """Start ``argv`` as a child that dies with this process (``popen``: the rest of
    :class:`subprocess.Popen`'s arguments). ``new_group``: a process group of its own, which
    :func:`stop` signals whole (the terminal's Ctrl-C then no longer reaches it directly)."""
    env = python_env(env)  # the launcher (``python -S``: no site) finds rewriter by PYTHONPATH
    env[ENV_PARENT] = str(os.getpid())
    return subprocess.Popen(guarded(argv), env=env, start_new_session=new_group, **popen)


@dataclass
class Finished:
    """How a child started by :func:`run` ended."""

    returncode: int
    stdout: Any
    stderr: Any
    timed_out: bool = False

    def describe(self) -> str:
        return describe(self.returncode)


def run(argv: Sequence[str], *, timeout: float | None, input: Any = None,
        capture: bool = True, text: bool = True, **popen: Any) -> Finished:
    """Run ``argv`` to its end (in a group of its own, dying with this process); on a timeout
    the group is killed and ``timed_out`` set; an interrupt of the waiting thread kills it too
    and is raised again."""
    if capture:
        popen.setdefault("stdout", subprocess.PIPE)
        popen.setdefault("stderr", subprocess.PIPE)
    if input is not None:
        popen["stdin"] = subprocess.PIPE
    proc = start(argv, new_group=True, text=text, **popen)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(proc, grace=0)
        out, err = proc.communicate()
        return Finished(proc.returncode, out, err, timed_out=True)
    except BaseException:
        stop(proc, grace=0)
        raise
    return Finished(proc.returncode, out, err)


def stop(proc: subprocess.Popen, grace: float = 0.0, first: int = signal.SIGINT) -> int:
    """Stop ``proc`` and, when it leads a group of its own, its whole group: ``first`` (unless
    ``grace`` is 0), then SIGKILL once ``grace`` seconds pass. Its return code."""
    if proc.poll() is not None:
        return int(proc.returncode)
    if grace > 0:
        send(proc, first)
        try:
            return int(proc.wait(timeout=grace))
        except subprocess.TimeoutExpired:
            pass
    send(proc, signal.SIGKILL)
    return int(proc.wait())


def send(proc: subprocess.Popen, sig: int) -> None:
    """``sig`` to ``proc``'s group when it leads one of its own, else to ``proc``; nothing
    when it has ended."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if _leads_group(proc.pid):
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)


def _leads_group(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except (ProcessLookupError, PermissionError):
        return False


class Forwarder:
    """Passes the signals that reach this process on to one child (:func:`forwarding`)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.pending: list[int] = []

    def __call__(self, sig: int, _frame: Any) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        else:
            self.pending.append(sig)

    def attach(self, proc: subprocess.Popen) -> None:
        """From now on signals go to ``proc``; those that came before are sent now."""
        self.proc = proc
        for sig in self.pending:
            proc.send_signal(sig)
        self.pending.clear()


@contextlib.contextmanager
def forwarding(signals: Sequence[int]) -> Iterator[Forwarder]:
    """Pass ``signals`` on to the child given to ``Forwarder.attach``; one that comes before
    the child exists is held until it does. The previous handlers come back at the end."""
    previous = {s: signal.getsignal(s) for s in signals}
    forwarder = Forwarder()
    for sig in signals:
        signal.signal(sig, forwarder)
    try:
        yield forwarder
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def describe(returncode: int) -> str:
    """``exited with code N`` or ``died with SIGNAME``."""
    if returncode < 0:
        return f"died with {signal_name(-returncode)}"
    return f"exited with code {returncode}"


# ----------------------------------------------------------------------------- the child's side
#: Who started this process (popped: a grandchild started otherwise must not inherit it).
_started_by = os.environ.pop(ENV_PARENT, None)


def parent_gone() -> bool:
    """True when this process was started by :func:`start` and that parent has died (this
    process then has another parent: init or a subreaper)."""
    return _started_by is not None and str(os.getppid()) != _started_by
