"""README figures come from results files: find each quoted figure and check it against its file.

A README passage that quotes measured figures sits between two markers naming its results
files (paths from the repository root; a ``.md`` and its ``.json`` twin are read together):

    <!-- figures: benchmarks/results/prequant_int8.md -->
    ... the table or sentences quoting the file, naming the commit it was measured at ...
    <!-- /figures -->

:func:`check` returns what is wrong: a figure in a passage that no number of its files gives
(each decimal, every integer of two digits or more, and the integers of ``N NPU``, ``N CPU``,
``A/B``, ``N of M``, ``N MB``; a decimal may be the file's value rounded to the digits quoted;
``N NPU`` / ``N CPU`` must appear with their unit); a file without a stamp (commit,
command: ``benchmarks/stamp.py``); a passage that does not name its file's commit (7 hex
digits); and, outside every passage, a measured-looking figure (3+ decimals, or a mantissa with
decimals and an exponent; not a bound such as ``>= 0.999``) unless its paragraph names the
test that measured it (an open item, :func:`unrecorded`).
Backquoted text (commands, paths) and
HTML comments are not figures. :func:`stale` lists the files whose code changed since their
stamp's commit.

A passage quoting a stale file says so where a reader sees it: the words ``measured at COMMIT,
stale: code changed since`` with that file's commit (7 hex digits), outside HTML comments;
:func:`check` fails when the mark is missing, and when a passage keeps it for a commit none of
its files is stale at (the file was regenerated, or the code is back). :func:`mark` (``python
benchmarks/figures.py --mark``) rewrites README.md's mark lines (:data:`MARK_LINE`) to match:
run it after a change to ``rewriter/`` or ``op_tables/`` makes files stale, or after
regenerating them (``benchmarks/regenerate.py`` runs it).
"""

from __future__ import annotations

import bisect
import re
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import stamp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^<!-- figures: (?P<files>[^>\n]*?) -->(?P<body>.*?)^<!-- /figures -->",
                   re.S | re.M)
DECIMAL = re.compile(r"(?<![\w.])(\d+\.\d+(?:e[-+]?\d+)?|\d+e-\d+)(%?)(?![\w])")
INTEGER = re.compile(r"(?<![\w./-])(\d+)(?= NPU| CPU| MB|/\d| of \d)|(?<=/)(\d+)(?![\w.])|"
                     r"(?<= of )(\d+)(?![\w.])")
# Any other integer of two digits or more (not part of a date, time, size "96x96" or name).
WHOLE = re.compile(r"(?<![\w.:/\-])(\d{2,})(?![\w.:\-]|/\d)")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
# Operator counts must appear with their unit ("3 CPU", or "CPU: 3" / "cpu": 3 in JSON).
UNIT = re.compile(r"(?<![\w./-])(\d+) (NPU|CPU)\b")
MEASURED = re.compile(r"(?<![\w.])(\d+\.\d{3,}|\d+\.\d+e-\d+)(?![\w])")

# A figure outside a marked passage has no results file. It is tolerated only in a paragraph
# that names the test which measured it (``tests/....py``): an open item (:func:`unrecorded`
# lists them; give each a results file and a passage).
TEST = re.compile(r"tests/[\w/]+\.py")

STALE = re.compile(r"measured at `?([0-9a-f]{7})[0-9a-f]*`?, stale: code changed since", re.I)
# The line :func:`mark` writes after a passage's opening marker, one per stale commit.
MARK_LINE = re.compile(r"^_Measured at `?[0-9a-f]{7}`?, stale: code changed since .*_$")


def _prose(text: str) -> str:
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"```.*?```", " ", text, flags=re.S)
    return re.sub(r"`[^`\n]*`", " ", text)


def quoted(body: str) -> tuple[list[str], list[str]]:
    """The decimals and the integers a passage quotes."""
    prose = _prose(body)
    decimals = [m.group(1) + m.group(2) for m in DECIMAL.finditer(prose)]
    integers = [next(g for g in m.groups() if g) for m in INTEGER.finditer(prose)]
    integers += [m.group(1) for m in WHOLE.finditer(prose)]
    return decimals, integers


def _numbers(files: list[Path]) -> tuple[list[float], set[str]]:
    values, integers = [], set()
    for path in files:
        for twin in {path, path.with_suffix(".md"), path.with_suffix(".json")}:
            if twin.exists():
                for token in NUMBER.findall(twin.read_text(encoding="utf-8", errors="replace")):
                    try:
                        values.append(abs(float(token)))
                    except ValueError:
                        continue
                    if re.fullmatch(r"-?\d+", token):
                        integers.add(token.lstrip("-"))
    return sorted(values), integers


def _texts(files: list[Path]) -> list[str]:
    return [twin.read_text(encoding="utf-8", errors="replace") for path in files
            for twin in {path, path.with_suffix(".md"), path.with_suffix(".json")} if twin.exists()]


def _near(values: list[float], target: float, half: float) -> bool:
    i = bisect.bisect_left(values, target - half)
    return i < len(values) and values[i] <= target + half


def decimal_found(token: str, values: list[float]) -> bool:
    """``token`` (e.g. 0.9903, 4.4e-7, 96.5%) is a value of the file rounded as quoted."""
    percent = token.endswith("%")
    text = token.rstrip("%")
    mantissa, _, exp = text.partition("e")
    places = len(mantissa.partition(".")[2])
    scale = 10.0 ** int(exp) if exp else 1.0
    value = float(text)
    half = 0.5 * 10.0 ** -places * scale * (1 + 1e-9)
    if _near(values, value, half):
        return True
    return percent and _near(values, value / 100, half / 100)


def passages(readme: str) -> list[tuple[list[str], str, int]]:
    """(files, body, line) of every marked passage."""
    return [(m.group("files").split(), m.group("body"), readme[:m.start()].count("\n") + 1)
            for m in BLOCK.finditer(readme)]


def _staleness(files: list[str], root: Path, repo: Path) -> dict[str, tuple[str, str | None]]:
    """{file: (its commit's 7 digits, why it is stale or None)} for the stamped files."""
    found = {}
    for name in files:
        head = stamp.stamp_of(root / name)
        if head and head.get("commit"):
            found[name] = (head["commit"][:7], stamp.stale(head, root=repo))
    return found


def stale_marks(body: str) -> set[str]:
    """The commits a passage marks stale (visible text: HTML comments do not count)."""
    return set(STALE.findall(re.sub(r"<!--.*?-->", " ", body, flags=re.S)))


def _mark_problems(files: list[str], body: str, line: int, root: Path, repo: Path) -> list[str]:
    state = _staleness(files, root, repo)
    stale_at = {c: n for n, (c, why) in state.items() if why}
    current = {c: n for n, (c, why) in state.items() if not why}
    marks = stale_marks(body)
    fix = " (python benchmarks/figures.py --mark)"
    problems = [f"README line {line}: {name} is stale ({state[name][1]}) and the passage does "
                f"not say 'measured at {c}, stale: code changed since'{fix}"
                for c, name in stale_at.items() if c not in marks]
    for c in sorted(marks - set(stale_at)):
        problems.append(f"README line {line}: the passage keeps the stale mark on {current[c]}, "
                        f"current for HEAD's code{fix}" if c in current else
                        f"README line {line}: the stale mark names {c}, the commit of none of "
                        f"its files")
    return problems


def check(readme_path: Path = ROOT / "README.md", root: Path = ROOT,
          repo: Path = ROOT) -> list[str]:
    """What is wrong with the README's figures (``repo``: the git checkout judging staleness)."""
    readme = readme_path.read_text(encoding="utf-8")
    problems = []
    for files, body, line in passages(readme):
        paths = [root / f for f in files]
        missing = [f for f, p in zip(files, paths) if not p.exists()]
        if missing or not files:
            problems.append(f"README line {line}: no results file {missing or '(none named)'}")
            continue
        for name, path in zip(files, paths):
            head = stamp.stamp_of(path)
            if not head or not head.get("commit") or not head.get("command"):
                problems.append(f"README line {line}: {name} has no stamp (commit, command)")
            elif head["commit"][:7] not in body:
                problems.append(f"README line {line}: the passage does not name {name}'s "
                                f"commit {head['commit'][:7]}")
        values, integers = _numbers(paths)
        decimals, ints = quoted(body)
        bad = [d for d in decimals if not decimal_found(d, values)]
        bad += [i for i in ints if i not in integers]
        text = " ".join(_texts(paths))
        bad += [f"{n} {unit}" for n, unit in UNIT.findall(_prose(body))
                if not re.search(rf"(?<![\w.]){n} {unit}\b|\b{unit}\W{{1,3}}{n}(?![\w.])", text, re.I)]
        if bad:
            problems.append(f"README line {line}: not in {' '.join(files)}: {', '.join(bad)}")
        problems += _mark_problems(files, body, line, root, repo)
    loose = [t for t, source in _outside(readme) if not source]
    if loose:
        problems.append("README figures outside a marked passage (no results file): "
                        + ", ".join(loose))
    return problems


def _outside(readme: str) -> list[tuple[str, str | None]]:
    """(figure, the test its paragraph names or None) for each figure outside a passage."""
    found = []
    for paragraph in BLOCK.sub("", readme).split("\n\n"):
        # A bound (">= 0.999", "<= 4.1e-6", "< 0.996") states a requirement, not a measurement
        # ("0.99 -> 0.999" is a measurement: an arrow's ">" is not a bound).
        prose = re.sub(r"(>=|<=|(?<!-)[<>])\s*[\d.e-]+", " ", _prose(paragraph))
        test = TEST.search(paragraph)
        found += [(t, test.group(0) if test else None) for t in MEASURED.findall(prose)]
    return found


def unrecorded(readme_path: Path = ROOT / "README.md") -> list[tuple[str, str | None]]:
    """The README's figures that no results file holds (quoted from a test's run)."""
    return _outside(readme_path.read_text(encoding="utf-8"))


def stale(readme_path: Path = ROOT / "README.md", root: Path = ROOT,
          repo: Path = ROOT) -> dict[str, str]:
    """{results file: why it is stale} for the files the README's passages quote."""
    found = {}
    for files, _, _ in passages(readme_path.read_text(encoding="utf-8")):
        for name in files:
            head = stamp.stamp_of(root / name)
            why = stamp.stale(head, root=repo)
            if why:
                found[name] = why
    return found


def mark(readme_path: Path = ROOT / "README.md", root: Path = ROOT, repo: Path = ROOT) -> int:
    """Rewrite the README's mark lines: one after each passage's opening marker per stale
    commit of its files, none for current ones. Returns how many passages changed."""
    lines = readme_path.read_text(encoding="utf-8").split("\n")
    out, changed, i = [], 0, 0
    while i < len(lines):
        opening = re.match(r"^<!-- figures: (?P<files>[^>\n]*?) -->$", lines[i])
        out.append(lines[i])
        i += 1
        if not opening:
            continue
        old = []
        while i < len(lines) and (MARK_LINE.match(lines[i]) or (old and not lines[i]
                                                                  and old[-1] != "")):
            old.append(lines[i])
            i += 1
        files = opening.group("files").split()
        by_commit: dict[str, list[str]] = {}
        for name, (commit, why) in _staleness(files, root, repo).items():
            if why:
                by_commit.setdefault(commit, []).append(name)
        new = []
        for commit, names in by_commit.items():
            new += [f"_Measured at `{commit}`, stale: code changed since "
                    f"({', '.join(f'`{n}`' for n in names)}; `benchmarks/regenerate.py --check`)._",
                    ""]
        changed += new != old
        out += new
    readme_path.write_text("\n".join(out), encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Check README.md's figures against results files.")
    ap.add_argument("--mark", action="store_true",
                    help="first rewrite README.md's stale marks to match the files' staleness")
    args = ap.parse_args(argv)
    if args.mark:
        print(f"README.md: {mark()} passages' stale marks rewritten")
    problems = check()
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
