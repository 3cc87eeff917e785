"""The baselines' outputs, kept across commits: they do not depend on our code.

The plain TFLite converter, tf2onnx and onnx2tf run on the user's own model file
(``benchmarks/zoo_tools.py``); what they write depends on that file, the calibration data, the
tools' versions and the exact baseline command, never on ``rewriter/`` or ``op_tables/``. So a
finished baseline is stored under a key hashing exactly those, and a later run (at another
commit) with the same key copies its files back instead of converting again:

* key = sha256 of: the kind (``plain-tflite``, ``plain-onnx``, ``onnx2tf``), the sha256 of every
  input file (model, calibration data, the tf2onnx file onnx2tf reads), the baseline command
  with its directories as placeholders (``<case>``, ``<out>``), the sha256 of the script that
  runs it (``benchmarks/zoo_tools.py``: the converter calls are there), and the tool versions.
* Where: ``$REWRITER_BASELINE_CACHE`` (default ``~/.cache/rewriter/baselines``, or under
  ``$XDG_CACHE_HOME``); ``REWRITER_BASELINE_CACHE=off`` turns it off. Outside the repository.
* Stored: a baseline that finished, with its file, or that failed with the tool's own error (an
  exception it raised, a non-zero exit: the same inputs and versions fail the same way); a
  crash by a signal or a timeout is never stored (it may be the machine's), it runs again.
* The result keeps what the original run measured (wall seconds, peak memory) and says where it
  came from: ``baseline_cache`` = {hit, key, measured (UTC date), commit}; the results files
  state it, so a time or memory ratio against a cached baseline names the run that measured it.

What judges a baseline file through our stages (op table, cut, Vela placement) is our code and
runs every time; :func:`cached` is only for the tools' own work and measurements of a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV = "REWRITER_BASELINE_CACHE"
ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path | None:
    """The cache directory, or None when ``REWRITER_BASELINE_CACHE=off``."""
    value = os.environ.get(ENV, "")
    if value.lower() in ("off", "0", "no", "false"):
        return None
    if value:
        return Path(value).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "rewriter" / "baselines"


def file_hash(path: Path) -> str:
    """sha256 of a file's content; of a Keras file (``.keras``, ``.h5``), of what defines the
    model: its architecture and its weight arrays, not the save date and HDF5 bookkeeping that
    differ between two saves of the same model."""
    path = Path(path)
    if path.suffix in (".keras", ".h5", ".hdf5"):
        try:
            return _keras_hash(path)
        except (OSError, ValueError, KeyError, ImportError):
            pass
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _h5_hash(h5: Any, digest: Any) -> None:
    import numpy as np

    def visit(name: str, obj: Any) -> None:
        if hasattr(obj, "shape") and hasattr(obj, "dtype"):
            arr = np.asarray(obj[()])
            digest.update(f"{name}|{arr.dtype}|{arr.shape}".encode())
            digest.update(np.ascontiguousarray(arr).tobytes())

    names: list[str] = []
    h5.visit(names.append)
    for name in sorted(names):
        visit(name, h5[name])
    for key in sorted(h5.attrs):
        if key != "keras_version":
            digest.update(f"attr {key}={h5.attrs[key]!r}".encode())


def _canonical_config(data: bytes) -> bytes:
    """A Keras config with its ``shared_object_id`` values (Python ``id()``s, different in
    every process) renumbered in order of appearance."""
    ids: dict[Any, int] = {}

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: (ids.setdefault(v, len(ids)) if k == "shared_object_id" else walk(v))
                    for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return json.dumps(walk(json.loads(data)), sort_keys=True).encode()


def _keras_hash(path: Path) -> str:
    import io
    import zipfile

    import h5py

    digest = hashlib.sha256(b"keras-content-v1")
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            for name in sorted(zf.namelist()):
                if name == "metadata.json":  # Keras version and save date
                    continue
                data = zf.read(name)
                digest.update(name.encode())
                if name.endswith(".h5"):
                    with h5py.File(io.BytesIO(data), "r") as h5:
                        _h5_hash(h5, digest)
                elif name.endswith(".json"):
                    digest.update(_canonical_config(data))
                else:
                    digest.update(data)
    else:
        with h5py.File(path, "r") as h5:
            _h5_hash(h5, digest)
    return digest.hexdigest()


def tool_versions(names: tuple[str, ...]) -> dict[str, str]:
    """The installed versions of ``names`` (distribution names), from their metadata."""
    from importlib import metadata

    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def _placeholders(text: str, dirs: dict[str, Path]) -> str:
    # Longest first: a directory inside another gets its own name.
    for name, d in sorted(dirs.items(), key=lambda kv: -len(str(kv[1]))):
        text = text.replace(str(d), f"<{name}>")
    return text


def _restore(text: str, dirs: dict[str, Path]) -> str:
    for name, d in dirs.items():
        text = text.replace(f"<{name}>", str(d))
    return text


def key(kind: str, inputs: list[Path], command: list[str], tools: dict[str, str],
        dirs: dict[str, Path], script: Path = ROOT / "benchmarks" / "zoo_tools.py") -> str:
    parts = {"kind": kind, "inputs": [file_hash(p) for p in inputs],
             "command": [_placeholders(c, dirs) for c in command],
             "script": file_hash(script), "tools": tools}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _commit() -> str | None:
    from benchmarks import stamp

    return stamp._git("rev-parse", "--short=12", "HEAD")


def cached(kind: str, inputs: list[Path], command: list[str], tools: dict[str, str],
           outputs: list[Path] | Callable[[dict[str, Any]], list[Path]], dirs: dict[str, Path],
           run: Callable[[], dict[str, Any]],
           finished: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """``run()``'s result, or the stored result of the same baseline with its output files
    copied back. ``outputs``: the files it writes (or a function of its result giving them);
    ``dirs``: the directories the command and the result name ({name: path}; the outputs lie
    inside them), stored as placeholders. ``finished(result)``: the baseline finished, or failed
    by the tool's own error (not a signal, not a timeout): store it."""
    root = cache_dir()
    if root is None or not all(p.exists() for p in inputs):
        return run()
    k = key(kind, inputs, command, tools, dirs)
    entry = root / kind / k
    if (entry / "result.json").exists() and (entry / "outputs.json").exists():
        names = json.loads((entry / "outputs.json").read_text())
        if all((entry / "files" / str(i)).exists() for i in range(len(names))):
            for i, name in enumerate(names):
                path = Path(_restore(name, dirs))
                path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(entry / "files" / str(i), path)
            res = json.loads(_restore((entry / "result.json").read_text(), dirs))
            res["baseline_cache"] = dict(res.get("baseline_cache") or {}, hit=True)
            return res
    res = run()
    files = outputs(res) if callable(outputs) else outputs
    if finished(res) and all(p.exists() for p in files):
        res["baseline_cache"] = {"hit": False, "key": k, "commit": _commit(), "tools": tools,
                                 "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        tmp = entry.with_name(k + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "files").mkdir(parents=True)
        for i, path in enumerate(files):
            shutil.copyfile(path, tmp / "files" / str(i))
        (tmp / "outputs.json").write_text(json.dumps([_placeholders(str(p), dirs)
                                                      for p in files]))
        (tmp / "result.json").write_text(_placeholders(json.dumps(res, default=str), dirs))
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
    return res


def cached_bytes(kind: str, parts: dict[str, Any], tools: dict[str, str],
                 convert: Callable[[], bytes]) -> tuple[bytes, dict[str, Any] | None]:
    """An in-process baseline (a converter called on a model built in this process): its bytes
    and where they came from, by a key of ``parts`` (hashes of the model's architecture and
    weights, the data, the converter call's source) and the tool versions. A raised exception
    is not stored (it propagates)."""
    root = cache_dir()
    if root is None:
        return convert(), None
    k = hashlib.sha256(json.dumps({"kind": kind, "parts": parts, "tools": tools},
                                  sort_keys=True, default=str).encode()).hexdigest()[:32]
    entry = root / kind / k
    if (entry / "file").exists() and (entry / "result.json").exists():
        info = json.loads((entry / "result.json").read_text())
        return (entry / "file").read_bytes(), dict(info, hit=True)
    data = convert()
    info = {"hit": False, "key": k, "commit": _commit(), "tools": tools,
            "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    tmp = entry.with_name(k + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "file").write_bytes(data)
    (tmp / "result.json").write_text(json.dumps(info))
    shutil.rmtree(entry, ignore_errors=True)
    os.replace(tmp, entry)
    return data, info


def array_hash(*arrays: Any) -> str:
    """sha256 of arrays' dtypes, shapes and bytes (a Keras model's weights, data)."""
    import numpy as np

    digest = hashlib.sha256()
    for arr in arrays:
        arr = np.ascontiguousarray(arr)
        digest.update(f"{arr.dtype}|{arr.shape}".encode())
        digest.update(arr.tobytes())
    return digest.hexdigest()


def note(infos: list[dict[str, Any] | None]) -> str | None:
    """One sentence for a results file: how many baselines came from the cache (``infos``: the
    results' ``baseline_cache`` entries), measured when."""
    hits = [h for h in infos if isinstance(h, dict) and h.get("hit")]
    if not hits:
        return None
    dates = sorted({h.get("measured", "?") for h in hits})
    return (f"{len(hits)} baseline conversion(s) reused from the baseline cache "
            f"(`benchmarks/baseline_cache.py`: same model, calibration data, tool versions "
            f"and command), with what was measured of them when they ran ({dates[0]}"
            + (f" to {dates[-1]}" if len(dates) > 1 else "") + ").")


def code_key(paths: tuple[str, ...] = ("rewriter", "op_tables", "benchmarks"),
             root: Path = ROOT) -> str:
    """A hash of the code a job or a judge depends on (the git trees of ``paths`` at the HEAD
    of checkout ``root``, plus the diff of uncommitted changes)."""
    from benchmarks import stamp

    trees = stamp._git("ls-tree", "HEAD", "--", *paths, root=root) or ""
    diff = stamp._git("diff", "HEAD", "--", *paths, root=root) or ""
    return hashlib.sha256((trees + "\n" + diff).encode()).hexdigest()[:16]


def fresh_for_code(workdir: Path, stale: list[str], root: Path = ROOT) -> bool:
    """A work directory kept between runs holds results of our code (jobs, judges): when it was
    last used with other code, delete them (``stale``: globs under ``workdir``) so they run
    again; the models and baselines stay. True when something was deleted."""
    mark = workdir / "code.key"
    now = code_key(root=root)
    old = mark.read_text().strip() if mark.exists() else None
    removed = False
    if old != now:
        for pattern in stale:
            for path in workdir.glob(pattern):
                removed = True
                shutil.rmtree(path) if path.is_dir() else path.unlink()
    workdir.mkdir(parents=True, exist_ok=True)
    mark.write_text(now + "\n")
    return removed
