"""benchmarks/slow_suite.py runs shards and merges those recorded at the same code (a fake
repository with three slow tests; no TensorFlow)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from benchmarks import slow_suite

FAKE = {
    "pytest.ini": "[pytest]\nmarkers =\n    slow: slow\n",
    "rewriter/__init__.py": "",
    "tests/test_a.py": ("import pytest\n\n@pytest.mark.slow\ndef test_ok():\n    pass\n\n"
                        "@pytest.mark.slow\ndef test_bad():\n    assert 1 == 2, 'one is not two'\n"),
    "tests/test_b.py": ("import pytest\n\n@pytest.mark.slow\ndef test_b():\n    pass\n\n"
                        "def test_fast():\n    pass\n"),
}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                   check=True, capture_output=True)


def _summary(out: Path) -> dict:
    return json.loads((out / "slow_suite.json").read_text())


def test_shards_at_the_same_code_add_up_and_resume_skips_what_they_recorded(tmp_path,
                                                                             monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    # Collection is a pytest subprocess per call; the fake's slow tests are known.
    monkeypatch.setattr(slow_suite, "_collect", lambda repo, env: [
        "tests/test_a.py::test_ok", "tests/test_a.py::test_bad", "tests/test_b.py::test_b"])
    repo, out = tmp_path / "repo", tmp_path / "out"
    for name, text in FAKE.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "one")
    base = ["--repo", str(repo), "--out", str(out)]

    assert slow_suite.main([*base, "--only-files", "tests/test_b.py"]) == 0
    first = _summary(out)
    assert first["collected"] == 3 and first["counts"] == {"passed": 1}
    assert sorted(first["not_run"]) == ["tests/test_a.py::test_bad", "tests/test_a.py::test_ok"]
    assert "--repo" not in first["command"] and "--only-files tests/test_b.py" in first["command"]

    # A commit outside the code (README) keeps the code key: the next shard adds up.
    (repo / "README.md").write_text("x\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "docs")
    assert slow_suite.main([*base, "--resume"]) == 1  # test_bad fails
    both = _summary(out)
    assert both["counts"] == {"passed": 2, "failed": 1} and both["not_run"] == []
    assert len(both["shards"]) == 2
    # Both shards may carry the same date (to the second): pick the new one by name.
    [later] = [s["file"] for s in both["shards"] if s["file"] != first["shards"][0]["file"]]
    second = json.loads((out / slow_suite.SHARDS / later).read_text().splitlines()[0])["shard"]
    rows = (out / slow_suite.SHARDS / later).read_text().splitlines()[1:]
    assert sorted(json.loads(r)["test"] for r in rows) == ["tests/test_a.py::test_bad",
                                                           "tests/test_a.py::test_ok"]
    assert second["wall_seconds"] > 0
    md = (out / "slow_suite.md").read_text()
    assert "one is not two" in md and "2 shard(s)" in md
    assert slow_suite.main([*base, "--resume"]) == 0  # nothing left at this code

    # Changing the tests changes the code: no shard counts any more.
    (repo / "tests/test_b.py").write_text(FAKE["tests/test_b.py"] + "# changed\n")
    _git(repo, "commit", "-qam", "tests")
    assert slow_suite.main([*base, "--summarize"]) == 0
    assert _summary(out)["counts"] == {} and len(_summary(out)["not_run"]) == 3
    assert slow_suite.main([*base, "--only-files", "tests/nope.py"]) == 2
