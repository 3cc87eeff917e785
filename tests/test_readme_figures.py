"""The README's measured figures come from stamped results files (benchmarks/figures.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks import figures, stamp

ROOT = Path(__file__).resolve().parent.parent


def test_readme_figures_match_their_results_files():
    assert figures.check() == []


def test_results_files_are_current_when_strict():
    """Stale files (code changed since their commit) fail with REWRITER_FIGURES_STRICT=1,
    as `benchmarks/regenerate.py --check` does; the default suite only lists them."""
    found = figures.stale()
    if os.environ.get("REWRITER_FIGURES_STRICT") == "1":
        assert found == {}
    elif found:
        pytest.skip("stale results files: " + "; ".join(f"{k}: {v}" for k, v in found.items()))


def _results(tmp_path: Path, body: str, commit: str | None = None, name: str = "r.md") -> Path:
    """A results file stamped at HEAD (current: benchmarks/x.py does not exist, and the code is
    compared commit to commit), or at ``commit``."""
    res = tmp_path / name
    head = dict(stamp.header("PYTHONPATH=. python benchmarks/x.py", "x.py"), dirty=False)
    if commit:
        head["commit"] = commit
    res.write_text("# x\n\n" + stamp.markdown_header(head) + "\n\n" + body)
    return res


def test_a_stale_file_is_marked_stale_in_its_passage(tmp_path):
    """A passage quoting a stale file must say 'measured at COMMIT, stale: code changed since';
    it must not keep the mark once the file is current. figures.mark() writes the marks."""
    first = stamp._git("rev-list", "--max-parents=0", "HEAD").split()[0]
    _results(tmp_path, "| 0.5 |\n", commit=first, name="old.md")
    _results(tmp_path, "| 0.25 |\n", name="new.md")
    old, new = first[:7], stamp.read(tmp_path / "new.md")["commit"][:7]
    readme = tmp_path / "README.md"
    plain = (f"<!-- figures: old.md -->\nAt {old}: 0.5.\n<!-- /figures -->\n\n"
             f"<!-- figures: new.md -->\nAt {new}: 0.25.\n<!-- /figures -->\n")
    readme.write_text(plain)
    problems = figures.check(readme, tmp_path)
    assert len(problems) == 1 and "old.md is stale" in problems[0]
    # A mark inside an HTML comment is not visible: still missing.
    readme.write_text(plain.replace("0.5.", f"0.5. <!-- measured at {old}, stale: code changed "
                                            "since -->"))
    assert "old.md is stale" in figures.check(readme, tmp_path)[0]
    readme.write_text(plain.replace("0.5.", f"0.5 (measured at {old}, stale: code changed since)."))
    assert figures.check(readme, tmp_path) == []
    readme.write_text(plain.replace("0.25.", f"0.25 (measured at {new}, stale: code changed since)."))
    problems = figures.check(readme, tmp_path)
    assert any("keeps the stale mark on new.md" in p for p in problems)
    # mark() writes its own lines only: the hand-written mark on new.md stays, still an error.
    assert figures.mark(readme, tmp_path) == 1
    text = readme.read_text()
    assert f"_Measured at `{old}`, stale: code changed since (`old.md`;" in text
    assert len(figures.check(readme, tmp_path)) == 1
    readme.write_text(text.replace(f"0.25 (measured at {new}, stale: code changed since).", "0.25."))
    assert figures.check(readme, tmp_path) == []
    assert figures.mark(readme, tmp_path) == 0  # idempotent
    # Once old.md is regenerated (current), mark() takes its line out again.
    _results(tmp_path, "| 0.5 |\n", name="old.md")
    assert figures.mark(readme, tmp_path) == 1
    assert "stale" not in readme.read_text()


def test_a_figure_edited_by_hand_fails(tmp_path):
    res = _results(tmp_path, "| m | 0.99028 | 2622 NPU / 3 CPU | 4.4e-07 | 1756 |\n")
    commit = stamp.read(res)["commit"][:7]
    good = (f"<!-- figures: r.md -->\nAt {commit}: cosine 0.9903, 2622 NPU / 3 CPU, 4.4e-7."
            "\n<!-- /figures -->\n")
    readme = tmp_path / "README.md"
    readme.write_text(good)
    assert figures.check(readme, tmp_path) == []
    readme.write_text(good.replace("0.9903", "0.9913"))
    assert "0.9913" in figures.check(readme, tmp_path)[0]
    readme.write_text(good.replace("2622 NPU / 3", "2625 NPU / 0"))
    problem = figures.check(readme, tmp_path)[0]
    assert "2625 NPU" in problem and "0 CPU" in problem
    readme.write_text(good.replace("4.4e-7.", "4.4e-7, peak 1756 MB."))
    assert figures.check(readme, tmp_path) == []
    readme.write_text(good.replace("4.4e-7.", "4.4e-7, peak 1757 MB."))
    assert "1757" in figures.check(readme, tmp_path)[0]
    readme.write_text(good.replace(commit, "a" * 7))
    assert "does not name" in figures.check(readme, tmp_path)[0]
    readme.write_text(good + "Elsewhere 0.99871 from nowhere.\n")
    assert "0.99871" in figures.check(readme, tmp_path)[0]


def test_a_file_without_stamp_fails(tmp_path):
    (tmp_path / "r.md").write_text("| 0.5 |\n")
    readme = tmp_path / "README.md"
    readme.write_text("<!-- figures: r.md -->\n0.5\n<!-- /figures -->\n")
    assert "no stamp" in figures.check(readme, tmp_path)[0]


def test_stale_names_a_changed_commit(tmp_path):
    head = stamp.header("x", "figures.py")
    assert stamp.stale(head) in (None,) or "changed since" in stamp.stale(head) \
        or "uncommitted" in stamp.stale(head)
    old = dict(head, dirty=False, commit=stamp._git("rev-list", "--max-parents=0", "HEAD")
               .split()[0])
    assert "changed since" in stamp.stale(old, "figures.py")
    assert stamp.stale(None) == "no stamp (commit, date, command)"


def test_every_quoted_results_file_is_regenerated_by_the_plan():
    """No file without its command: each file a README passage quotes is written by an entry of
    benchmarks/regenerate.py's plan, or is the kept record of an earlier run of a script of the
    plan (e.g. benchmarks/results/zoo_full_abacb5d.md), its stamp naming that command."""
    from benchmarks.regenerate import PLAN

    planned = {f for bench in PLAN for f in bench.files}
    planned |= {str(Path(f).with_suffix(s)) for f in planned for s in (".md", ".json")}
    scripts = {bench.args[0] for bench in PLAN}
    quoted = {f for files, _, _ in figures.passages((ROOT / "README.md").read_text())
              for f in files}
    kept = {f for f in quoted - planned
            if any(s in (stamp.stamp_of(ROOT / f) or {}).get("command", "") for s in scripts)}
    assert quoted - planned - kept == set()


def test_a_bound_is_not_a_figure_but_an_arrow_is(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("Asserted by `tests/test_x.py`: cosine < 0.996 before, >= 0.999 after.\n\n"
                      "Measured: 0.99523 -> 0.99962.\n")
    assert figures.unrecorded(readme) == [("0.99523", None), ("0.99962", None)]


def test_quick_plan_fits_about_thirty_minutes():
    """`regenerate.py --quick` stays about 30 minutes on 2 idle cores (the plan's estimates)."""
    from benchmarks.regenerate import PLAN

    assert 20 <= sum(b.minutes for b in PLAN if b.quick) <= 35


def test_a_benchmark_that_fails_leaves_its_old_files_unstamped(tmp_path, monkeypatch):
    """regenerate.py stamped a benchmark's files whenever they existed: precision_bounds.py
    failed in 10 s (AttributeError) and its previous results were stamped with the new commit
    as if measured there. Only files the run wrote, from a run that exited 0, are stamped."""
    import benchmarks.regenerate as regen

    old = tmp_path / "old.md"
    old.write_text("# measured long ago\n")
    bench = regen.Bench("failing", ("benchmarks/failing.py",), (str(old),), 1)
    stamped = []
    monkeypatch.setattr(regen, "PLAN", [bench])
    monkeypatch.setattr(regen, "_files_stamp", lambda b: stamped.append(b.name))
    monkeypatch.setattr(regen, "check", lambda plan: 0)
    monkeypatch.setattr(regen.subprocess, "call", lambda *a, **k: 1)
    import benchmarks.figures as figures

    monkeypatch.setattr(figures, "mark", lambda: 0)
    assert regen.main(["--only", "failing"]) == 1
    assert stamped == []

    def writes(*a, **k):
        old.write_text("# measured now\n")
        return 0

    monkeypatch.setattr(regen.subprocess, "call", writes)
    assert regen.main(["--only", "failing"]) == 0
    assert stamped == ["failing"]
