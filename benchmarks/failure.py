"""Why a baseline or a child process failed, in a few words fit for a results table.

A results table states the fact ("died with SIGSEGV", worded as ``rewriter.host.child`` does;
the exception's one line; "exit 3"), never the tail of a log: TensorFlow writes its start-up lines (``cudart_stub.cc:31] Could not find cuda
drivers ...``, ``WARNING: All log messages before absl::InitializeLog() ...``) to stderr, and a
child that dies by a signal leaves only those. :func:`describe` turns an exit code and stderr
into that fact; :func:`clean` keeps a recorded reason free of log lines (older results files
hold such tails); :func:`crashed` says whether a reason is a crash.
"""

from __future__ import annotations

import re

from rewriter.host.child import signal_name

#: TF / absl / glog lines: ``I0000 00:00:...``, ``2026-... W tensorflow/...``,
#: ``<anything> file.cc:31] message`` (also cut at the start, as a log's tail is), the absl notice.
LOG_LINE = re.compile(r"^[IWEF]\d{4} |\S+\.(cc|h|cpp|py):\d+\] |^WARNING: All log messages"
                      r"|^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
#: A Python exception line (``ValueError: ...``, ``...ConverterError: ...``) or this project's
#: one-line ``error: ...`` (exit 2 and 3).
ERROR_LINE = re.compile(r"\w+(Error|Exception|Fault): |^error: ")
WIDTH = 160


def describe(returncode: int | None, stderr: str = "") -> str:
    """What a failed child did, in one line: ``died with SIGSEGV`` when a signal killed it
    (a negative code, or 128+N from a shell), else its first exception line (or this project's
    ``error: ...`` line), else ``exit N``."""
    if returncode is not None and (returncode < 0 or 128 < returncode < 160):
        return f"died with {signal_name(-returncode if returncode < 0 else returncode - 128)}"
    found = [ln.strip() for ln in (stderr or "").splitlines()
             if ERROR_LINE.search(ln.strip()) and not LOG_LINE.search(ln.strip())]
    if found:
        return found[0][:WIDTH]
    return f"exit {returncode}" if returncode is not None else "failed"


def clean(reason: object) -> str:
    """A recorded reason fit for a table cell: its first line that is not a log line, without
    ``|``, at most :data:`WIDTH` characters; ``failed`` when nothing but log lines is left."""
    lines = [ln.strip() for ln in str(reason or "").splitlines()
             if ln.strip() and not LOG_LINE.search(ln.strip())]
    return lines[0][:WIDTH].replace("|", "/") if lines else "failed"

