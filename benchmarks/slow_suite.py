"""Run the slow test suite (``pytest -m slow``) in shards and record it beside the benchmark results.

    PYTHONPATH=. python benchmarks/slow_suite.py [--repo CHECKOUT] [--only-files F,...] [--resume]
                                                 [--out DIR] [-- PYTEST_ARGS]
    PYTHONPATH=. python benchmarks/slow_suite.py --summarize [--repo CHECKOUT]

Runs ``python -m pytest -m slow`` in ``--repo`` (default: this checkout; a detached worktree of
a fixed commit keeps the run independent of later edits). The plugin ``benchmarks/slow_record.py``
logs each test as it ends into a *shard*, ``OUT/slow_suite_shards/COMMIT-DATE.jsonl`` (first
line: the shard's commit, code key, date, command), so an interrupted run is still recorded.
The *code key* hashes the git trees of ``rewriter``, ``op_tables`` and ``tests`` at the commit:
shards recorded at different commits with the same code (e.g. a README-only commit between
them) add up. ``slow_suite.md`` / ``slow_suite.json`` in ``--out`` (default benchmarks/results)
merge every shard with HEAD's code key (the latest record of a test wins): commit, date,
machine, the shards, pass/fail per test, every failure's last line, and the tests no shard ran.

A session may not hold the ~2 hours of slow tests on 2 shared cores: run a shard
(``--only-files tests/test_fuzz.py,...`` or ``-- -k EXPR``), or ``--resume`` (skip the tests
already recorded at this code), commit the shard and the summary; the next session resumes.
``--summarize`` only rewrites the summary from the shards. The test files run cheapest first;
the real architectures last.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from benchmarks import stamp  # noqa: E402

# Roughly cheapest first, so an interrupted run has recorded the most tests.
ORDER = [
    "tests/test_results_claims.py", "tests/test_batch.py", "tests/test_contract.py",
    "tests/test_check_cli.py", "tests/test_fuzz.py", "tests/test_activations.py",
    "tests/test_planner_agreement.py", "tests/test_families.py", "tests/test_unfreeze.py",
    "tests/rules/test_activation_rules_real_architectures.py",
    "tests/rules/test_norm_rules_real_architectures.py", "tests/test_real_architectures.py",
]
PATHS = [*stamp.CODE, "tests"]  # the code a slow-suite record describes
SHARDS = "slow_suite_shards"


def _collect(repo: Path, env: dict) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "slow", "--collect-only", "-q"],
        cwd=repo, env=env, capture_output=True, text=True, check=False).stdout
    return [line.strip() for line in out.splitlines() if "::" in line]


def code_key(repo: Path) -> str:
    """A hash of the git trees of :data:`PATHS` at ``repo``'s HEAD, with ``-dirty-`` and a hash
    of the diff when they have uncommitted changes."""
    trees = stamp._git("ls-tree", "HEAD", "--", *PATHS, root=repo) or ""
    key = hashlib.sha1(trees.encode()).hexdigest()[:16]
    diff = stamp._git("diff", "HEAD", "--", *PATHS, root=repo)
    if diff:  # uncommitted changes: the same changes (tracked files) give the same key
        key += "-dirty-" + hashlib.sha1(diff.encode()).hexdigest()[:8]
    return key


def shards(out: Path, key: str) -> list[tuple[dict, list[dict]]]:
    """(head, rows) of each shard in ``out`` recorded at code ``key``, oldest first."""
    found = []
    for path in sorted((out / SHARDS).glob("*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if lines and lines[0].get("shard", {}).get("code") == key:
            found.append((dict(lines[0]["shard"], file=path.name), lines[1:]))
    return sorted(found, key=lambda s: (s[0].get("date", ""), s[0]["file"]))


def merged(found: list[tuple[dict, list[dict]]]) -> dict[str, dict]:
    """{test: row}: a later shard's record of a test replaces an earlier one; within a shard a
    failed setup/teardown after a passed call counts as failed."""
    by_test: dict[str, dict] = {}
    for head, rows in found:
        mine: dict[str, dict] = {}
        for row in rows:
            prev = mine.get(row["test"])
            if prev is None or row["outcome"] != "passed":
                mine[row["test"]] = dict(row, shard=head["file"])
        by_test.update(mine)
    return by_test


def summarize(repo: Path, out: Path, collected: list[str], command: str) -> dict:
    key = code_key(repo)
    found = shards(out, key)
    wanted = set(collected)
    by_test = {t: r for t, r in merged(found).items() if t in wanted}
    not_run = [t for t in collected if t not in by_test]
    counts: dict[str, int] = {}
    for row in by_test.values():
        counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
    header = dict(stamp.header(command, root=repo), paths=PATHS, code=key)
    walls = [h.get("wall_seconds") for h, _ in found]
    result = {
        **header,
        "wall_seconds": round(sum(w for w in walls if w), 1) if any(walls) else None,
        "shards": [h for h, _ in found],
        "collected": len(collected),
        "counts": counts,
        "not_run": not_run,
        "tests": sorted(by_test.values(), key=lambda r: r["test"]),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "slow_suite.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        "# Slow suite (`pytest -m slow`)", "",
        stamp.markdown_header(header), "",
        f"{len(collected)} tests collected; " + ", ".join(
            f"{n} {k}" for k, n in sorted(counts.items())) + f"; {len(not_run)} not run"
        + (f"; {result['wall_seconds']:.0f} s wall" if result["wall_seconds"] else "")
        + f"; {len(found)} shard(s) at code {key}", "",
        "## Shards (same code: `rewriter`, `op_tables`, `tests` trees)", "",
        "| shard | commit | started | tests | wall s | command |", "|---|---|---|---:|---:|---|",
    ]
    lines += [f"| {h['file']} | {h['commit'][:12]} | {h['date']} | {len(rows)} | "
              f"{h.get('wall_seconds') or '-'} | `{h['command']}` |" for h, rows in found]
    lines.append("")
    failed = [r for r in result["tests"] if r["outcome"] == "failed"]
    if failed:
        lines += ["## Failures", "", "| test | phase | last line |", "|---|---|---|"]
        lines += [f"| `{r['test']}` | {r['when']} | {r.get('message', '').replace('|', '/')} |"
                  for r in failed]
        lines.append("")
    if not_run:
        lines += ["## Not run by any shard at this code (yet)", ""]
        lines += [f"- `{t}`" for t in not_run] + [""]
    lines += ["## Every test", "", "| test | outcome | s |", "|---|---|---:|"]
    lines += [f"| `{r['test']}` | {r['outcome']} | {r['seconds']:.1f} |" for r in result["tests"]]
    (out / "slow_suite.md").write_text("\n".join(lines) + "\n")
    return result


def _public(argv: list[str]) -> list[str]:
    """``argv`` without ``--repo``/``--out`` and their values (local paths)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--repo", "--out"):
            skip = True
        elif not arg.startswith(("--repo=", "--out=")):
            kept.append(arg)
    return kept


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=HERE.parent, help="the checkout whose tests run")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--only-files", default=None,
                    help="comma-separated test files: run only their slow tests (a shard)")
    ap.add_argument("--resume", action="store_true",
                    help="skip the tests a shard at this code already recorded")
    ap.add_argument("--summarize", action="store_true",
                    help="only rewrite the summary from the shards at this code")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    repo, out = args.repo.resolve(), args.out.resolve()
    env = dict(os.environ, PYTHONPATH=f"{repo}{os.pathsep}{HERE}", TF_CPP_MIN_LOG_LEVEL="3")
    collected = _collect(repo, env)
    if not collected:
        print(f"error: no slow tests collected in {repo}; is it a rewriter checkout?",
              file=sys.stderr)
        return 2
    command = " ".join(["PYTHONPATH=. python benchmarks/slow_suite.py", *_public(argv)])
    if args.summarize:
        summarize(repo, out, collected, command)
        return 0
    files = [f for f in ORDER if any(t.startswith(f + "::") for t in collected)]
    files += sorted({t.split("::")[0] for t in collected} - set(files))
    if args.only_files:
        wanted = [f.strip() for f in args.only_files.split(",") if f.strip()]
        unknown = [f for f in wanted if f not in files]
        if unknown:
            print(f"error: no slow tests in {unknown}; the files with slow tests: "
                  f"{', '.join(files)}", file=sys.stderr)
            return 2
        files = [f for f in files if f in wanted]
    targets: list[str] = files
    if args.resume:
        done = merged(shards(out, code_key(repo)))
        targets = [t for f in files for t in collected
                   if t.split("::")[0] == f and t not in done]
        if not targets:
            result = summarize(repo, out, collected, command)
            print(f"nothing left to run at this code; {result['counts']} of {len(collected)}")
            return 0
    head = {"commit": stamp._git("rev-parse", "HEAD", root=repo), "code": code_key(repo),
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "machine": stamp.machine(), "command": command}
    when = time.strftime("%Y%m%d%H%M%S", time.gmtime())
    log = out / SHARDS / f"{(head['commit'] or 'unknown')[:12]}-{when}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(json.dumps({"shard": head}) + "\n")
    cmd = [sys.executable, "-m", "pytest", "-m", "slow", "-p", "slow_record", "-q",
           *targets, *extra]
    start = time.time()
    code = subprocess.run(cmd, cwd=repo, env=dict(env, SLOW_SUITE_LOG=str(log)),
                          check=False).returncode
    rows = log.read_text().splitlines()
    head["wall_seconds"] = round(time.time() - start, 1)
    log.write_text("\n".join([json.dumps({"shard": head}), *rows[1:]]) + "\n")
    result = summarize(repo, out, collected, command)
    print(f"{result['counts']} of {len(collected)} at this code; shard {log.name}; "
          f"summary in {out}/slow_suite.md")
    return 0 if code in (0, 5) else 1


if __name__ == "__main__":
    sys.exit(main())
