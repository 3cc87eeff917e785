"""Peak memory of a process *and its children*, measured from outside.

A job is more than one process: the ``rewrite`` console script supervises a child that does the
work (converting in-process; unsupervised callers convert in a worker process of their own:
:mod:`rewriter.host.supervise`, :mod:`rewriter.host.isolate`). The memory a job needs is what all of them
hold at the same time, so :class:`TreeMeter` samples the resident set size (``VmRSS``) of the
process and all its descendants from ``/proc`` every ``interval`` seconds and keeps the largest
sum (``rss_mb``). Sampling can miss a peak shorter than the interval, so it also keeps each
process's own high-water mark (``VmHWM``, kept by the kernel) as last seen: their sum
(``hwm_mb``) is an upper bound (the processes' peaks need not coincide).

A sum of RSS counts every shared page once per process that maps it: each TensorFlow process
maps the same ~400 MB of TensorFlow's libraries (``RssFile``), which the kernel holds once. So
``mem_mb``, the tree's *footprint*, is the largest sampled sum of each process's anonymous and
shared-memory pages (``RssAnon + RssShmem``, private to the tree) plus the file-backed pages of
the process with the most (``RssFile``), counted once. For one process it equals its RSS. Linux
only; elsewhere all stay 0.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_PROC = Path("/proc")


_FIELDS = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem")


def _status_kb(pid: int, fields: tuple[str, ...] = _FIELDS) -> dict[str, int]:
    """Memory fields of ``/proc/PID/status`` in kB ({} when the process is gone)."""
    out: dict[str, int] = {}
    try:
        with open(_PROC / str(pid) / "status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in fields:
                    out[key] = int(value.split()[0])
    except (OSError, ValueError, IndexError):
        return {}
    return out


def _children() -> dict[int, list[int]]:
    """ppid -> pids of every process visible in /proc."""
    kids: dict[int, list[int]] = {}
    try:
        entries = os.listdir(_PROC)
    except OSError:
        return kids
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(_PROC / name / "stat") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1:
            kids.setdefault(int(fields[1]), []).append(int(name))
    return kids


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants alive now."""
    kids = _children()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


class TreeMeter:
    """Samples the memory of process trees in a background thread (one thread for all)."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self._roots: dict[int, _Peak] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, pid: int) -> None:
        """Start measuring the tree rooted at ``pid``."""
        with self._lock:
            self._roots[pid] = _Peak()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rss-meter", daemon=True)
                self._thread.start()
        self.sample([pid])

    def done(self, pid: int) -> TreePeak:
        """Stop measuring ``pid``'s tree; its peaks in MB (10^6 bytes)."""
        with self._lock:
            peak = self._roots.pop(pid, _Peak())
        mb = 1024 / 1e6
        return TreePeak(round(peak.rss_kb * mb, 1), round(sum(peak.hwm_kb.values()) * mb, 1),
                        round(peak.mem_kb * mb, 1))

    def sample(self, roots: Iterable[int] | None = None) -> None:
        with self._lock:
            pids = list(self._roots) if roots is None else [r for r in roots if r in self._roots]
        if not pids:
            return
        kids = _children()
        for root in pids:
            total = private = shared = 0
            seen: dict[int, int] = {}
            todo = [root]
            while todo:
                p = todo.pop()
                st = _status_kb(p)
                if st:
                    total += st.get("VmRSS", 0)
                    private += st.get("RssAnon", 0) + st.get("RssShmem", 0)
                    shared = max(shared, st.get("RssFile", 0))
                    seen[p] = st.get("VmHWM", 0)
                todo.extend(kids.get(p, ()))
            with self._lock:
                peak = self._roots.get(root)
                if peak is not None:
                    peak.rss_kb = max(peak.rss_kb, total)
                    peak.mem_kb = max(peak.mem_kb, private + shared)
                    for p, hwm in seen.items():
                        peak.hwm_kb[p] = max(peak.hwm_kb.get(p, 0), hwm)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()


class _Peak:
    def __init__(self) -> None:
        self.rss_kb = 0
        self.mem_kb = 0
        self.hwm_kb: dict[int, int] = {}


@dataclass
class TreePeak:
    """Peaks of a process tree in MB: ``rss_mb`` (largest sampled sum of RSS), ``hwm_mb`` (sum
    of each process's own high-water mark: an upper bound), ``mem_mb`` (largest sampled
    footprint: private pages of every process, shared file pages once)."""

    rss_mb: float
    hwm_mb: float
    mem_mb: float


def available_mb() -> float | None:
    """``MemAvailable`` of the machine in MB, or None where /proc/meminfo is absent."""
    try:
        with open(_PROC / "meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except (OSError, ValueError, IndexError):
        return None
    return None


def release() -> None:
    """Give memory freed by Python and native code back to the system: a garbage collection
    (TensorFlow functions and graphs sit in reference cycles), then glibc's ``malloc_trim``
    (without it, freed heap pages stay in the process's RSS). A no-op where there is no glibc."""
    import gc

    gc.collect()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


_trim_fn: list[Any] = []


def _malloc_trim() -> Any:
    if not _trim_fn:
        try:
            import ctypes

            fn = ctypes.CDLL(None).malloc_trim
            fn.argtypes = [ctypes.c_size_t]
            _trim_fn.append(fn)
        except (OSError, AttributeError):
            _trim_fn.append(None)
    return _trim_fn[0]
