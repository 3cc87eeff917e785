"""Where a TF1 checkpoint's files are: its prefix from any way a person names it.

A checkpoint is a prefix ``P`` with ``P.index``, ``P.data-*`` and, when the graph was saved,
``P.meta``. People name it by the prefix, by one of those files, or by its directory (with or
without the ``checkpoint`` state file that records the latest prefix). Published checkpoints
break the usual readers in two ways handled here: the prefix may be empty (the files are
``DIR/.index``, ``DIR/.meta``: ``P`` is ``DIR/``), and the ``checkpoint`` file names the author's
absolute paths (``/home/author/run3/model.ckpt-1000``). When the recorded path does not exist,
the checkpoint beside the state file with the same file name is used, else the only (or the
most trained) checkpoint in the directory, and a note says so in one line. The state file is
parsed here, not by ``tf.train.latest_checkpoint``, which logs an ERROR line of its own.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from rewriter.errors import UserError

_DATA = re.compile(r"\.data-\d+-of-\d+$")
_STATE = re.compile(r'^\s*model_checkpoint_path\s*:\s*"((?:[^"\\]|\\.)*)"', re.MULTILINE)


def is_checkpoint_path(path: str) -> bool:
    """True when ``path`` names a TF1 checkpoint (prefix, its files, or its directory)."""
    p = Path(path)
    if p.is_dir():
        return (p / "checkpoint").is_file() or bool(_prefixes(p))
    name = p.name
    if name.endswith((".meta", ".index")) or _DATA.search(name):
        return p.is_file()
    return Path(path + ".index").is_file() or Path(path + ".meta").is_file()


def checkpoint_prefix(path: str) -> tuple[str, str | None]:
    """The checkpoint prefix ``path`` names, and a one-line note when it was not the one the
    ``checkpoint`` file records (None otherwise). UserError when there is none."""
    p = Path(path)
    if p.is_dir():
        return _directory_prefix(p)
    for suffix in (".meta", ".index"):
        if path.endswith(suffix):
            return path[: -len(suffix)], None
    return _DATA.sub("", path), None


def _directory_prefix(d: Path) -> tuple[str, str | None]:
    found = _prefixes(d)
    state = d / "checkpoint"
    recorded = _recorded(state) if state.is_file() else None
    if recorded is not None:
        full = recorded if os.path.isabs(recorded) else str(d / recorded)
        if _complete(full):
            return full, None
        beside = str(d / Path(recorded).name) if Path(recorded).name else f"{d}{os.sep}"
        if _complete(beside):
            return beside, (f"{state} names {recorded}, which does not exist here; using the "
                            f"checkpoint beside it, {beside}")
    if not found:
        what = f"its checkpoint file names {recorded}, which does not exist, and it" \
            if recorded is not None else "it"
        raise UserError(f"{d}: {what} holds no checkpoint (no .index file); give the "
                        "checkpoint's prefix or its .meta file")
    chosen = max(found, key=_step)
    if recorded is None:
        note = None if len(found) == 1 else (
            f"{d} holds {len(found)} checkpoints; using the most trained, {chosen}")
        return chosen, note
    return chosen, (f"{state} names {recorded}, which does not exist here; using "
                    f"{'the only' if len(found) == 1 else 'the most trained'} checkpoint "
                    f"beside it, {chosen}")


def _prefixes(d: Path) -> list[str]:
    """Prefixes of the checkpoints in ``d`` (``.index`` files; ``DIR/`` for ``.index``)."""
    out = []
    for index in sorted(d.glob("*.index")) + ([d / ".index"] if (d / ".index").is_file() else []):
        prefix = str(index)[: -len(".index")]
        out.append(prefix if index.name != ".index" else f"{d}{os.sep}")
    return sorted(set(out))


def _complete(prefix: str) -> bool:
    return os.path.isfile(prefix + ".index")


def _step(prefix: str) -> tuple[int, float]:
    """Training step of a prefix (``model.ckpt-1000`` -> 1000), then its time, for ordering."""
    m = re.search(r"-(\d+)$", prefix)
    return (int(m.group(1)) if m else -1, os.path.getmtime(prefix + ".index"))


def _recorded(state: Path) -> str | None:
    """``model_checkpoint_path`` of a ``checkpoint`` state file (text proto), or None."""
    try:
        text = state.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = _STATE.search(text)
    if m is None:
        return None
    return m.group(1).encode("latin-1", "backslashreplace").decode("unicode_escape")
