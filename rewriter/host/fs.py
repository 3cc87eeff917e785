"""Outputs appear whole or not at all, never mixed, never over an input, with the user's umask.

* Files: :func:`atomic_write_bytes` (a temporary file beside the target, then ``os.replace``).
* Output directories: :func:`staged_output`. Every command that writes an output directory
  stages the whole run in ``.OUT.staging-*`` next to ``OUT`` and swaps it in at the end (an
  atomic exchange on Linux, ``renameat2(RENAME_EXCHANGE)``), so ``OUT`` holds one complete run or
  the previous one. A lock (``flock`` on ``.OUT.lock``, released by the kernel if the process
  dies) refuses a second writer; ``OUT`` is created only when the run finishes, and directories
  created on the way are removed again when it fails; a job whose supervising ``rewrite``
  process has died swaps nothing in. ``-o`` equal to, inside or containing an
  input is refused, and so is an existing directory holding files rewriter did not write.
* Modes follow the umask (``mkstemp``/``mkdtemp`` alone would make them 0600/0700).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import fnmatch
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewriter.errors import UserError

#: File left in every finished output directory: proof that rewriter wrote it.
MARKER = ".rewriter.json"
_RENAME_EXCHANGE = 2


def umask() -> int:
    """The process umask (read without changing it for longer than the call)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    return 0o666 & ~umask()


def dir_mode() -> int:
    return 0o777 & ~umask()


def make_temp_dir(parent: str | os.PathLike, prefix: str) -> str:
    """``tempfile.mkdtemp`` in ``parent`` with the umask's mode instead of 0700."""
    path = tempfile.mkdtemp(prefix=prefix, dir=parent)
    os.chmod(path, dir_mode())
    return path


def apply_umask(tree: str | os.PathLike) -> None:
    """Give every directory and file under ``tree`` (itself included) the umask's mode."""
    os.chmod(tree, dir_mode())
    for root, dirs, files in os.walk(tree):
        for name in dirs:
            os.chmod(os.path.join(root, name), dir_mode())
        for name in files:
            os.chmod(os.path.join(root, name), file_mode())


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def replace_dir(tmp_dir: str | os.PathLike, target: str | os.PathLike) -> str:
    """Move a finished directory into place, replacing an older one at ``target``."""
    target = Path(target)
    if target.exists():
        exchange(tmp_dir, target)
        shutil.rmtree(tmp_dir, ignore_errors=True)
    else:
        os.replace(tmp_dir, target)
    return str(target)


def exchange(a: str | os.PathLike, b: str | os.PathLike) -> None:
    """Swap two existing paths atomically (Linux ``renameat2``); elsewhere two renames."""
    a, b = os.fspath(a), os.fspath(b)
    libc = _libc()
    if libc is not None:
        at_fdcwd = -100
        if libc.renameat2(at_fdcwd, a.encode(), at_fdcwd, b.encode(), _RENAME_EXCHANGE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), b)
    aside = f"{b}.old-{os.getpid()}"
    os.replace(b, aside)
    os.replace(a, b)
    os.replace(aside, a)


def _libc() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                   ctypes.c_uint]
        return libc
    except (OSError, AttributeError):
        return None


# ----------------------------------------------------------------------------- output dirs
@dataclass
class StagedOutput:
    """Where a run writes (``path``, the staging directory) and where it ends up (``final``)."""

    path: Path
    final: Path
    shown: str  # OUT as the user gave it
    created: list[Path] = field(default_factory=list)  # parents made for it, deepest last
    discarded: bool = False

    def discard(self) -> None:
        """Write nothing: OUT stays as it was (e.g. ``restore --strict`` found gaps)."""
        self.discarded = True

    def relocate(self, value: Any) -> Any:
        """``value`` (a path, string, or JSON-like structure) with staging paths made final."""
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if isinstance(value, str):
            for old in (str(self.path), os.path.abspath(self.path)):
                if value == old or value.startswith(old + os.sep):
                    return self.shown + value[len(old):]
            return value
        if isinstance(value, dict):
            return {k: self.relocate(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self.relocate(v) for v in value)
        return value


def check_output_path(out: str | os.PathLike, inputs: Iterable[Any] = ()) -> Path:
    """The directory ``out`` resolved; UserError when it cannot be an output directory."""
    shown = os.fspath(out)
    if not shown:
        raise UserError("give the output directory with -o")
    path = Path(shown)
    for parent in [path, *path.parents]:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                what = "is an existing file" if parent == path else f"is below the file {parent}"
                raise UserError(f"-o {shown} {what}; give a directory with -o")
            break
    final = path.resolve()
    refuse_inputs(final, shown, inputs)
    return final


def refuse_inputs(final: Path, shown: str, inputs: Iterable[Any]) -> None:
    """UserError when the output ``final`` is, is inside, or contains one of ``inputs``."""
    for item in inputs:
        if item is None or os.fspath(item) == "":
            continue
        src = Path(os.fspath(item)).resolve()
        if final == src:
            how = "is the input"
        elif src in final.parents:
            how = "is inside the input"
        elif final in src.parents:
            how = "contains the input"
        else:
            continue
        raise UserError(f"-o {shown} {how} {os.fspath(item)}; inputs are never outputs: "
                        "choose another path")


@contextlib.contextmanager
def staged_output(out: str | os.PathLike, inputs: Iterable[Any] = (),
                  owned: Iterable[str] = (), command: str = "") -> Iterator[StagedOutput]:
    """Stage a run's output directory and swap it in as ``out`` when the block ends normally.

    ``owned`` are file-name patterns this command writes: an existing ``out`` that is not empty
    is replaced only when it holds the :data:`MARKER` or nothing but such names.
    """
    final = check_output_path(out, inputs)
    shown = os.fspath(out)
    _check_replaceable(final, shown, tuple(owned))
    created = _make_parents(final.parent)
    stage: StagedOutput | None = None
    try:
        with _lock(final, shown):
            _clean_stale(final)
            stage = StagedOutput(Path(make_temp_dir(final.parent, f".{final.name}.staging-")),
                                 final, shown, created)
            yield stage
            if stage.discarded:
                raise _Discarded
            _write_marker(stage.path, command)
            _check_replaceable(final, shown, tuple(owned))  # still true under the lock
            _check_parent(shown)
            replace_dir(stage.path, final)
    except BaseException as exc:
        if stage is not None:
            shutil.rmtree(stage.path, ignore_errors=True)
        for parent in reversed(created):
            with contextlib.suppress(OSError):
                parent.rmdir()
        if not isinstance(exc, _Discarded):
            raise


def _check_parent(shown: str) -> None:
    """A job whose supervisor is gone (killed: its result is no longer wanted) swaps nothing
    into OUT; checked right before the swap (:func:`rewriter.host.child.parent_gone`)."""
    from rewriter.host.child import parent_gone

    if parent_gone():
        raise UserError(f"the rewrite process that started this job is gone: -o {shown} is "
                        "left as it was")


class _Discarded(Exception):
    """Ends a staged run that chose to write nothing."""


def _check_replaceable(final: Path, shown: str, owned: tuple[str, ...]) -> None:
    if not final.is_dir():
        return
    names = sorted(os.listdir(final))
    if not names or MARKER in names:
        return
    foreign = [n for n in names if not any(fnmatch.fnmatch(n, p) for p in owned)]
    if foreign:
        listed = ", ".join(foreign[:4]) + (" ..." if len(foreign) > 4 else "")
        raise UserError(f"-o {shown} already holds files rewriter did not write ({listed}); "
                        "choose a new or empty directory")


def _make_parents(parent: Path) -> list[Path]:
    missing = []
    p = parent
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(mode=0o777)  # mkdir applies the umask itself
    return list(reversed(missing))


def output_lock(final: Path, shown: str) -> contextlib.AbstractContextManager[None]:
    """The lock :func:`staged_output` takes, for a command that writes into an output directory
    piece by piece (``rewrite batch``: each job's directory is staged by the job itself)."""
    return _lock(final, shown)


@contextlib.contextmanager
def _lock(final: Path, shown: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``.NAME.lock`` beside ``final``; a second writer is refused."""
    path = final.parent / f".{final.name}.lock"
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, file_mode())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise UserError(f"-o {shown} is being written by another rewrite (pid {holder}); "
                            "wait for it to finish or choose another -o") from None
        try:  # the file may have been unlinked by the holder we waited for: lock the new one
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)


def _clean_stale(final: Path) -> None:
    """Remove staging directories of runs that died (we hold the lock, so none is live)."""
    for entry in final.parent.glob(f".{final.name}.staging-*"):
        shutil.rmtree(entry, ignore_errors=True)
    for entry in final.parent.glob(f"{final.name}.old-*"):  # a fallback swap cut in half
        if not final.exists():
            os.replace(entry, final)
        else:
            shutil.rmtree(entry, ignore_errors=True)


def _write_marker(directory: Path, command: str) -> None:
    from rewriter import __version__

    info = {"written_by": f"rewriter {__version__}", "command": command,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    atomic_write_text(directory / MARKER, json.dumps(info, indent=2) + "\n")
