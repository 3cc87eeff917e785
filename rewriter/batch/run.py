"""``rewrite batch MANIFEST.toml -o DIR``: many main jobs from one manifest, resumable.

The manifest is TOML: ``[[job]]`` tables with ``model``, ``target`` (a name, or a list of names:
one job each) and any option of the main job (``rewrite run --help``) under its long name,
``-`` or ``_`` alike (``input_shape = ["x:1,64,64,3"]``, ``pixel_range = "0,1"``,
``exact_only = true``); an optional ``[defaults]`` table gives options to every job, and
``name`` overrides a job's directory name. Each job is turned into the arguments of ``rewrite
run`` and parsed by the main job's own parser (:func:`rewriter.job.options.run_parser`, built
from the options declared once in :mod:`rewriter.job.options`), so batch options cannot drift
from the main job's; a job the parser refuses stops the batch before anything runs (exit 2,
naming the job and the key). Relative paths are relative to the manifest's directory.

Each job runs as its own ``rewrite run ... -o DIR/<model stem>-<target>`` process
(:mod:`rewriter.batch.local`; TensorFlow is not fork-safe), so its directory is exactly what the
main job writes, staged and swapped in whole. ``DIR/batch.json`` lists every job (``model``,
``target``, ``ok``, ``exit_code``, ``outdir``, ``seconds``, ``peak_rss_mb``, ...) and is rewritten
after every finished job; ``DIR/batch.md`` is the same as a table. Each finished job's record is
also kept on its own in ``DIR/logs/<job>.json``, so a job finished under another manifest (a zoo
grown one model at a time, a manifest split in two) is found again. A job is *skipped* on a later
run when its key (the content hash of every input file it names, its arguments, the rewriter
version and the content of the rewriter code and op tables that run it) equals the recorded one
and the report it wrote is still there, unchanged.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rewriter.errors import UserError

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

#: Keys of a ``[[job]]`` table that are not options of ``rewrite run``.
_JOB_KEYS = ("model", "target", "name")
#: Options the batch decides itself.
_RESERVED = {"out": "the batch gives each job DIR/<model stem>-<target>",
             "json": "the batch reads each job's report.json",
             "quiet": "jobs always run with -q (their output goes to DIR/logs/)",
             "help": "not an option of a job"}
BATCH_JSON = "batch.json"
BATCH_MD = "batch.md"
LOGS = "logs"


@dataclass
class BatchJob:
    """One ``rewrite run`` of the batch."""

    name: str  # the job's directory under DIR
    model: str  # as the manifest wrote it
    target: str
    argv: list[str]  # ``rewrite run`` arguments, without -o
    inputs: list[Path]  # files and directories whose content decides the result
    key: str = ""  # content hash of the inputs + argv + rewriter version


@dataclass
class Manifest:
    path: Path
    base: Path  # relative paths in the manifest are relative to this directory
    jobs: list[BatchJob]


@dataclass
class JobRecord:
    """One line of ``batch.json``."""

    model: str
    target: str
    ok: bool
    exit_code: int
    outdir: str
    seconds: float
    peak_rss_mb: float
    name: str = ""
    key: str = ""
    skipped: bool = False
    peak_rss_hwm_mb: float = 0.0  # sum of each process's own high-water mark (upper bound)
    peak_mem_mb: float = 0.0  # footprint: private pages of each process, shared files once
    summary: str = ""
    error: str = ""
    log: str = ""
    report_sha256: str = ""
    interrupted: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BatchResult:
    records: list[JobRecord] = field(default_factory=list)
    interrupted: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.interrupted and all(r.ok for r in self.records)


# ----------------------------------------------------------------------------- the manifest
def load_manifest(path: str | os.PathLike) -> Manifest:
    """Read and check a manifest; every job parsed by the main job's parser (UserError)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"manifest {path} does not exist") from None
    except IsADirectoryError:
        raise UserError(f"manifest {path} is a directory; give a .toml file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"manifest {path} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"job", "defaults"})
    if unknown:
        raise UserError(f"manifest {path}: unknown table(s) {', '.join(unknown)}; it holds "
                        "[[job]] entries and an optional [defaults] table")
    entries = data.get("job", [])
    defaults = data.get("defaults", {})
    if not isinstance(entries, list) or not entries or not isinstance(defaults, dict):
        raise UserError(f"manifest {path} holds no [[job]] entries (each: model = \"...\", "
                        "target = \"...\")")
    base = path.resolve().parent
    from rewriter.job.options import run_parser

    parser = run_parser()
    jobs: list[BatchJob] = []
    for i, entry in enumerate(entries, 1):
        jobs.extend(_expand(i, {**defaults, **entry}, base, parser))
    seen: dict[str, int] = {}
    for job in jobs:
        if job.name in seen:
            raise UserError(f"manifest {path}: two jobs write {job.name}/ (model {job.model}, "
                            f"target {job.target}); give one of them a `name`")
        seen[job.name] = 1
    for job in jobs:
        job.key = job_key(job)
    return Manifest(path, base, jobs)


def _expand(i: int, entry: dict[str, Any], base: Path,
            parser: argparse.ArgumentParser) -> list[BatchJob]:
    model, targets = entry.get("model"), entry.get("target")
    where = f"job {i}" + (f" ({model})" if isinstance(model, str) else "")
    if not isinstance(model, str) or not model:
        raise UserError(f"manifest {where}: give the model as model = \"path\"")
    if isinstance(targets, str):
        targets = [targets]
    if not (isinstance(targets, list) and targets and all(isinstance(t, str) for t in targets)):
        raise UserError(f"manifest {where}: give target = \"name\" or a list of names")
    model_path = base / model
    if not _exists(model_path):
        raise UserError(f"manifest {where}: model {model_path} does not exist")
    if "name" in entry and len(targets) > 1:
        raise UserError(f"manifest {where}: `name` needs a single target")
    options = _option_argv(where, {k: v for k, v in entry.items() if k not in _JOB_KEYS}, parser)
    from rewriter.targets import load_target

    jobs = []
    for target in targets:
        try:
            load_target(target)
        except UserError as exc:
            raise UserError(f"manifest {where}: {exc}") from None
        argv = [model, "--target", target, *options]
        try:
            parser.parse_args([*argv, "-q"])
        except UserError as exc:
            raise UserError(f"manifest {where}, target {target}: {exc}") from None
        name = str(entry.get("name") or f"{model_stem(model)}-{target}")
        if not name or "/" in name or name in (".", "..", LOGS) or name.startswith("."):
            raise UserError(f"manifest {where}: {name!r} cannot be a job directory name")
        inputs = [p for p in (base / a for a in argv if not a.startswith("-")) if _exists(p)]
        jobs.append(BatchJob(name, model, target, argv, inputs))
    return jobs


def _option_argv(where: str, options: dict[str, Any], parser: argparse.ArgumentParser
                 ) -> list[str]:
    """``{"input_shape": ["x:1,2"], "exact_only": True}`` -> ``--input-shape x:1,2
    --exact-only``, checked against the parser's own options."""
    actions = {s: a for a in parser._actions for s in a.option_strings if s.startswith("--")}
    argv: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if key.replace("_", "-") in _RESERVED:
            raise UserError(f"manifest {where}: `{key}` cannot be set per job: "
                            f"{_RESERVED[key.replace('_', '-')]}")
        action = actions.get(flag)
        if action is None:
            raise UserError(f"manifest {where}: `{key}` is not an option of `rewrite run` "
                            "(see `rewrite run --help`)")
        if isinstance(action, argparse._StoreTrueAction):
            if not isinstance(value, bool):
                raise UserError(f"manifest {where}: `{key}` is true or false")
            argv += [flag] if value else []
        elif isinstance(value, list):
            if not isinstance(action, argparse._AppendAction):
                raise UserError(f"manifest {where}: `{key}` takes one value, not a list")
            for v in value:
                argv += [flag, _scalar(where, key, v)]
        else:
            argv += [flag, _scalar(where, key, value)]
    return argv


def _scalar(where: str, key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UserError(f"manifest {where}: `{key}` = {value!r} is not a string or a number")
    return str(value)


def model_stem(model: str) -> str:
    """``models/a.keras`` -> ``a``; a SavedModel directory -> its name; ``x/model.ckpt`` ->
    ``model``."""
    p = Path(model.rstrip("/"))
    name = p.name
    for suffix in (".keras", ".h5", ".hdf5", ".pbtxt", ".pb", ".ckpt", ".meta", ".index"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _exists(path: Path) -> bool:
    """A file or directory, or a TF1 checkpoint prefix (``model.ckpt`` of ``model.ckpt.*``)."""
    return path.exists() or any(path.parent.glob(path.name + ".*")) if path.name else False


# ----------------------------------------------------------------------------- keys
def job_key(job: BatchJob) -> str:
    """What decides a job's result: every input's content, its arguments, the code."""
    from rewriter import __version__

    h = hashlib.sha256()
    h.update(json.dumps({"argv": job.argv, "version": __version__,
                         "code": code_fingerprint()}).encode())
    for path in job.inputs:
        h.update(str(path).encode())
        h.update(content_hash(path).encode())
    return h.hexdigest()


@functools.cache
def code_fingerprint() -> str:
    """SHA-256 over the rewriter code and op tables that run the jobs: a checkout edited since a
    job ran (the version string unchanged) reruns it."""
    from rewriter.host.resources import op_tables_dir

    package = Path(__file__).resolve().parents[1]  # the rewriter package
    h = hashlib.sha256()
    for root, pattern in ((package, "*.py"), (op_tables_dir(), "*.toml")):
        for p in sorted(root.rglob(pattern)):
            h.update(str(p.relative_to(root)).encode() + b"\0")
            h.update(p.read_bytes())
    return h.hexdigest()


def content_hash(path: Path) -> str:
    """SHA-256 over a file, a directory's files (by relative path), or a checkpoint prefix's
    files."""
    h = hashlib.sha256()
    if path.is_file():
        files = [(path.name, path)]
    elif path.is_dir():
        files = sorted((str(p.relative_to(path)), p) for p in path.rglob("*") if p.is_file())
    else:
        files = sorted((p.name, p) for p in path.parent.glob(path.name + ".*") if p.is_file())
    for rel, p in files:
        h.update(rel.encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


# ----------------------------------------------------------------------------- records
def previous_records(outdir: Path) -> dict[str, JobRecord]:
    """The records of earlier runs in ``outdir`` by job name: ``batch.json``'s, then each job's
    own ``logs/<job>.json`` (which outlives a run of another manifest); {} when none can be
    read."""
    records: dict[str, JobRecord] = {}
    try:
        data = json.loads((outdir / BATCH_JSON).read_text())
        for r in data.get("jobs", []):
            rec = _record(r)
            if rec is not None:
                records[rec.name] = rec
    except (OSError, ValueError, AttributeError):
        pass
    for path in sorted((outdir / LOGS).glob("*.json")):
        try:
            rec = _record(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
        if rec is not None and rec.name == path.stem:
            records[rec.name] = rec
    return records


def _record(data: Any) -> JobRecord | None:
    names = JobRecord.__dataclass_fields__
    try:
        rec = JobRecord(**{k: v for k, v in data.items() if k in names})
    except (TypeError, AttributeError):
        return None
    return rec if rec.name else None


def record_path(outdir: Path, name: str) -> Path:
    """Where a finished job's own record is kept."""
    return outdir / LOGS / f"{name}.json"


def reusable(job: BatchJob, previous: JobRecord | None, outdir: Path) -> bool:
    """True when ``previous`` finished this very job (same key, a report, still unchanged)."""
    if previous is None or previous.key != job.key or previous.exit_code not in (0, 1):
        return False
    report = outdir / job.name / "report.json"
    return bool(previous.report_sha256) and file_sha256(report) == previous.report_sha256


def write_records(outdir: Path, result: BatchResult, manifest: Manifest,
                  pending: Iterable[BatchJob] = ()) -> None:
    """``batch.json`` and ``batch.md`` (atomically), in manifest order."""
    from rewriter.host.fs import atomic_write_text

    order = {j.name: i for i, j in enumerate(manifest.jobs)}
    records = sorted(result.records, key=lambda r: order.get(r.name, len(order)))
    doc = {"manifest": str(manifest.path), "ok": result.ok, "interrupted": result.interrupted,
           "seconds": round(result.seconds, 2), "jobs": [r.to_json() for r in records],
           "pending": [j.name for j in pending]}
    atomic_write_text(outdir / BATCH_JSON, json.dumps(doc, indent=1) + "\n")
    atomic_write_text(outdir / BATCH_MD, render_md(doc))


def render_md(doc: dict[str, Any]) -> str:
    jobs = doc["jobs"]
    ok = sum(1 for j in jobs if j["ok"])
    lines = [f"# rewrite batch: {doc['manifest']}", "",
             f"{len(jobs)} jobs: {ok} ok, {len(jobs) - ok} not ok, "
             f"{sum(1 for j in jobs if j['skipped'])} skipped (unchanged since their run)"
             + (f", {len(doc['pending'])} not run (interrupted)" if doc["pending"] else ""),
             "", "| job | model | target | ok | exit | seconds | peak RSS MB | footprint MB | "
             "summary |", "|---|---|---|---|---|---|---|---|---|"]
    for j in jobs:
        status = "yes" if j["ok"] else "**no**"
        text = (j["summary"] or j["error"]).replace("|", "\\|")
        lines.append(f"| [{j['name']}]({j['name']}/report.md) | {j['model']} | {j['target']} | "
                     f"{status}{' (skipped)' if j['skipped'] else ''} | {j['exit_code']} | "
                     f"{j['seconds']:.1f} | {j['peak_rss_mb']:.0f} | {j.get('peak_mem_mb', 0):.0f} "
                     f"| {text} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- the run
class Pool(Protocol):
    """Where jobs run: :class:`rewriter.batch.local.LocalPool` or
    :class:`rewriter.batch.ray_pool.RayPool`."""

    def run(self, specs: list[dict[str, Any]],
            on_done: Callable[[dict[str, Any], dict[str, Any]], None]) -> None: ...


def check_outdir(out: str | os.PathLike, manifest: Manifest) -> Path:
    """``DIR`` resolved; UserError when it is or holds an input, or holds files of no batch."""
    from rewriter.host.fs import check_output_path

    final = check_output_path(out, [manifest.path, *(p for j in manifest.jobs
                                                      for p in j.inputs)])
    if final.is_dir() and any(final.iterdir()) and not (final / BATCH_JSON).exists():
        raise UserError(f"-o {os.fspath(out)} already holds files that no `rewrite batch` "
                        "wrote; choose a new or empty directory")
    return final


def run_batch(manifest: Manifest, outdir: Path, pool: Pool, threads: int | None = None,
              rerun: bool = False, on_done: Callable[[JobRecord, int, int], None] | None = None
              ) -> BatchResult:
    """Run the jobs of ``manifest`` into ``outdir`` (resolved, see :func:`check_outdir`);
    finished unchanged jobs are skipped unless ``rerun``. ``on_done(record, done, total)`` as
    each job ends. An interrupt ends the run with the finished jobs recorded, then re-raises."""
    import time

    from rewriter.batch.local import job_spec

    start = time.perf_counter()
    outdir.mkdir(parents=True, exist_ok=True)
    previous = previous_records(outdir)
    result = BatchResult()
    total = len(manifest.jobs)
    by_name = {j.name: j for j in manifest.jobs}
    todo: list[BatchJob] = []
    for job in manifest.jobs:
        prev = previous.get(job.name)
        if not rerun and prev is not None and reusable(job, prev, outdir):
            prev.skipped = True
            result.records.append(prev)
            if on_done:
                on_done(prev, len(result.records), total)
        else:
            todo.append(job)
    pending = {j.name for j in todo}

    def done(spec: dict[str, Any], res: dict[str, Any]) -> None:
        job = by_name[spec["name"]]
        pending.discard(job.name)
        rec = JobRecord(model=job.model, target=job.target, outdir=spec["outdir"],
                        name=job.name, key=job.key if res.get("report_sha256") else "",
                        log=spec["log"], **{k: v for k, v in res.items()
                                            if k in JobRecord.__dataclass_fields__})
        result.records.append(rec)
        result.seconds = time.perf_counter() - start
        if not rec.interrupted:
            from rewriter.host.fs import atomic_write_text

            path = record_path(outdir, job.name)
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(rec.to_json(), indent=1) + "\n")
        write_records(outdir, result, manifest, [by_name[n] for n in sorted(pending)])
        if on_done:
            on_done(rec, len(result.records), total)

    write_records(outdir, result, manifest, todo)
    specs = [job_spec(j.name, j.argv, outdir / j.name, manifest.base,
                      outdir / LOGS / f"{j.name}.log", threads) for j in todo]
    try:
        if specs:
            pool.run(specs, done)
    except KeyboardInterrupt:
        result.interrupted = True
        raise
    finally:
        result.seconds = time.perf_counter() - start
        write_records(outdir, result, manifest, [by_name[n] for n in sorted(pending)])
    return result
