"""The header every benchmark results file carries, and whether a results file is stale.

A results file records the commit, date, machine, tool versions and the exact command that
wrote it (:func:`header`). It is *stale* when the code it describes changed since that commit:
``git diff --quiet COMMIT HEAD -- rewriter op_tables benchmarks/SCRIPT`` fails (:func:`stale`).
No TensorFlow import: versions come from the installed distributions' metadata.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
# The code every results file describes, besides the benchmark script itself.
CODE = ("rewriter", "op_tables")
TOOLS = ("tensorflow", "keras", "tf-keras", "ethos-u-vela", "ai-edge-litert", "tflite-runtime",
         "tf2onnx", "onnx2tf", "onnx", "onnxruntime", "numpy", "edgetpu-compiler")
MARK = "<!-- stamp: "


def _git(*args: str, root: Path = ROOT) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def versions() -> dict[str, str]:
    found = {}
    for name in TOOLS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    compiler = _edgetpu_compiler_version()
    if compiler:
        found["edgetpu_compiler"] = compiler
    return found


def _edgetpu_compiler_version() -> str | None:
    try:
        out = subprocess.run(["edgetpu_compiler", "--version"], capture_output=True, text=True,
                             check=False, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"version\s+(\S+)", out)
    return match.group(1) if match else None


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, {cpu}"


def header(command: str, script: str | None = None, root: Path = ROOT) -> dict:
    """The stamp of a results file written now by ``command`` from checkout ``root``."""
    dirty = _git("status", "--porcelain", "--", *CODE, *([f"benchmarks/{script}"] if script else []),
                 root=root)
    return {
        "commit": _git("rev-parse", "HEAD", root=root),
        "dirty": bool(dirty),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "python": platform.python_version(),
        "versions": versions(),
        "script": script,
        "command": command,
    }


def command_line(script: str, argv: list[str] | None = None) -> str:
    """The command that ran ``benchmarks/SCRIPT`` with ``argv`` (default: this process's)."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join(["PYTHONPATH=. python", f"benchmarks/{script}", *args])


def markdown_header(head: dict) -> str:
    """Human lines plus one machine-readable comment line (``<!-- stamp: {json} -->``)."""
    vers = ", ".join(f"{k} {v}" for k, v in head.get("versions", {}).items())
    commit = (head.get("commit") or "unknown")[:12] + (" (with uncommitted changes)"
                                                       if head.get("dirty") else "")
    return "\n".join([
        f"Commit {commit}, {head.get('date')}, {head.get('machine')}, Python {head.get('python')}.",
        f"Versions: {vers}.",
        f"Command: `{head.get('command')}`",
        "",
        MARK + json.dumps(head, sort_keys=True) + " -->",
    ])


def read(path: Path) -> dict | None:
    """The stamp of a results file (.json: its ``stamp`` key or top level; .md: the comment)."""
    path = Path(path)
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if isinstance(data, dict):
            head = data.get("stamp", data)
            return head if isinstance(head, dict) and "commit" in head else None
        return None
    for line in text.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):].rsplit("-->", 1)[0])
    return None


def stale(head: dict | None, script: str | None = None, root: Path = ROOT) -> str | None:
    """Why a results file with stamp ``head`` is stale for HEAD's code, or None if it is not."""
    if not head or not head.get("commit"):
        return "no stamp (commit, date, command)"
    if head.get("dirty"):
        return f"written from uncommitted changes on {head['commit'][:12]}"
    if _git("cat-file", "-e", head["commit"] + "^{commit}", root=root) is None:
        return f"commit {head['commit'][:12]} is not in this repository"
    # A stamp may name the code it describes ("paths"; the slow suite: the tests too).
    paths = [*head.get("paths", CODE), *([f"benchmarks/{script or head.get('script')}"]
                                         if (script or head.get("script")) else [])]
    try:
        code = subprocess.run(["git", "-C", str(root), "diff", "--quiet", head["commit"], "HEAD",
                               "--", *paths], check=False, timeout=60).returncode
    except (OSError, subprocess.TimeoutExpired):
        return "git diff failed"
    if code == 0:
        return None
    return f"{' '.join(paths)} changed since {head['commit'][:12]}"


def _stamp_md(path: Path, head: dict) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    # Drop an earlier stamp block (its lines start at "Commit " and end at the comment).
    if any(line.startswith(MARK) for line in lines):
        end = next(i for i, line in enumerate(lines) if line.startswith(MARK))
        start = max(i for i in range(end + 1) if lines[i].startswith("Commit "))
        del lines[start:end + 2 if end + 1 < len(lines) and not lines[end + 1] else end + 1]
    at = 1 if lines and lines[0].startswith("#") else 0
    block = ([""] if at else []) + markdown_header(head).splitlines() + [""]
    if at and len(lines) > 1 and not lines[1]:
        block = block[1:]
        at = 2
    lines[at:at] = block
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _stamp_json(path: Path, head: dict) -> None:
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    if isinstance(data, dict):
        data["stamp"] = head
        lines = text.splitlines()
        indent = (len(lines[1]) - len(lines[1].lstrip(" "))) if len(lines) > 1 else None
        path.write_text(json.dumps(data, indent=indent or None) + "\n", encoding="utf-8")
    # A list (rows) keeps its shape: its stamp is the .md's of the same name.


def stamp_files(paths: list[Path] | list[str], script: str, argv: list[str] | None = None,
                command: str | None = None, root: Path = ROOT) -> dict:
    """Write the stamp into each results file (.md: after its title; .json dict: ``stamp``).

    ``root``: the checkout whose code was measured (its commit is stamped)."""
    head = header(command or command_line(script, argv), script=script, root=root)
    for path in map(Path, paths):
        if not path.exists():
            continue
        if path.suffix == ".md":
            _stamp_md(path, head)
        elif path.suffix == ".json":
            _stamp_json(path, head)
    return head


def stamp_of(stem: Path) -> dict | None:
    """The stamp of a results file ``stem``: its own, its .md/.json twin's, or a sidecar
    ``STEM.stamp.json`` (for files whose format holds no stamp, or that another script owns)."""
    stem = Path(stem)
    sidecar = stem.with_suffix(".stamp.json")
    for path in (stem, stem.with_suffix(".md"), stem.with_suffix(".json"), sidecar):
        if path.suffix in (".md", ".json"):
            head = read(path)
            if head:
                return head
    return None
