"""Run the slow test suite (``pytest -m slow``) and record it beside the benchmark results.

    PYTHONPATH=. python benchmarks/slow_suite.py [--repo CHECKOUT] [--out DIR] [-- PYTEST_ARGS]
    PYTHONPATH=. python benchmarks/slow_suite.py --summarize LOG.jsonl --repo CHECKOUT

Runs ``python -m pytest -m slow --junitxml`` in ``--repo`` (default: this checkout; a detached
worktree of a fixed commit keeps the run independent of later edits) and writes
``slow_suite.md`` / ``slow_suite.json`` in ``--out`` (default benchmarks/results): the commit
the tests ran at, date, machine, durations, pass/fail per test and every failure's last line.
The plugin ``benchmarks/slow_record.py`` logs each test as it ends, so an interrupted run is
still summarized (``--summarize`` rewrites the summary from that log; tests collected but never
run are listed as not run). The test files run cheapest first; the real architectures last.
"""

from __future__ import annotations

import argparse
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
    "tests/test_batch.py", "tests/test_prequant.py", "tests/test_contract.py",
    "tests/test_check_cli.py", "tests/test_fuzz.py", "tests/test_activations.py",
    "tests/test_planner_agreement.py", "tests/test_families.py", "tests/test_unfreeze.py",
    "tests/rules/test_activation_rules_real_architectures.py",
    "tests/rules/test_norm_rules_real_architectures.py", "tests/test_real_architectures.py",
]


def _collect(repo: Path, env: dict) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "slow", "--collect-only", "-q"],
        cwd=repo, env=env, capture_output=True, text=True, check=False).stdout
    return [line.strip() for line in out.splitlines() if "::" in line]


def summarize(log: Path, repo: Path, out: Path, collected: list[str], command: str,
              seconds: float | None) -> dict:
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    by_test: dict[str, dict] = {}
    for row in rows:  # a failed teardown after a passed call counts as failed
        prev = by_test.get(row["test"])
        if prev is None or row["outcome"] != "passed":
            by_test[row["test"]] = row
    not_run = [t for t in collected if t not in by_test]
    counts: dict[str, int] = {}
    for row in by_test.values():
        counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
    # The code the run describes: the package and the tests, at the commit of --repo.
    header = dict(stamp.header(command, root=repo), paths=[*stamp.CODE, "tests"])
    result = {
        **header,
        "wall_seconds": round(seconds, 1) if seconds is not None else None,
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
        + (f"; {result['wall_seconds']:.0f} s wall" if seconds is not None else ""), "",
    ]
    failed = [r for r in result["tests"] if r["outcome"] == "failed"]
    if failed:
        lines += ["## Failures", "", "| test | phase | last line |", "|---|---|---|"]
        lines += [f"| `{r['test']}` | {r['when']} | {r.get('message', '').replace('|', '/')} |"
                  for r in failed]
        lines.append("")
    if not_run:
        lines += ["## Not run when this summary was written (the run stopped, or still going)",
                  ""]
        lines += [f"- `{t}`" for t in not_run] + [""]
    lines += ["## Every test", "", "| test | outcome | s |", "|---|---|---:|"]
    lines += [f"| `{r['test']}` | {r['outcome']} | {r['seconds']:.1f} |" for r in result["tests"]]
    (out / "slow_suite.md").write_text("\n".join(lines) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=HERE.parent, help="the checkout whose tests run")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--log", type=Path, default=None, help="per-test log (default OUT/slow_suite.jsonl)")
    ap.add_argument("--summarize", type=Path, default=None, help="only rewrite the summary from LOG")
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    repo = args.repo.resolve()
    env = dict(os.environ, PYTHONPATH=f"{repo}{os.pathsep}{HERE}", TF_CPP_MIN_LOG_LEVEL="3")
    collected = _collect(repo, env)
    if not collected:
        print(f"error: no slow tests collected in {repo}; is it a rewriter checkout?",
              file=sys.stderr)
        return 2
    command = ("PYTHONPATH=. python benchmarks/slow_suite.py"
               + (f" -- {' '.join(extra)}" if extra else ""))
    if args.summarize:
        summarize(args.summarize, repo, args.out, collected, command, None)
        return 0
    log = (args.log or args.out / "slow_suite.jsonl").resolve()
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    files = [f for f in ORDER if (repo / f).exists()]
    files += sorted({t.split("::")[0] for t in collected} - set(files))
    cmd = [sys.executable, "-m", "pytest", "-m", "slow", "-p", "slow_record", "-q",
           f"--junitxml={log.with_suffix('.xml')}", *files, *extra]
    start = time.time()
    code = subprocess.run(cmd, cwd=repo, env=dict(env, SLOW_SUITE_LOG=str(log)),
                          check=False).returncode
    result = summarize(log, repo, args.out, collected, command, time.time() - start)
    print(f"{result['counts']} of {len(collected)}; summary in {args.out}/slow_suite.md")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
