"""benchmarks/baseline_cache.py: a baseline's output is reused only for the same inputs, tool
versions and command; a crash is never kept; our code's results in a work directory are dropped
when the code changes. No TensorFlow: fake tools write the files."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from benchmarks import baseline_cache as bc


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(bc.ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _case(root: Path, weights: float = 1.0) -> Path:
    case = root / "case"
    case.mkdir(parents=True)
    (case / "model.bin").write_bytes(b"model" + str(weights).encode())
    np.save(case / "calibration.npy", np.arange(6, dtype=np.float32))
    return case


def _convert(case: Path, calls: list[str], ok: bool = True, exit_code: int = 0):
    out = case / "plain.tflite"

    def run():
        calls.append(str(case))
        if ok:
            out.write_bytes(b"converted " + (case / "model.bin").read_bytes())
        return {"ok": ok, "path": str(out) if ok else None, "seconds": 12.5, "exit": exit_code}

    return out, run


def _cached(case: Path, run, out: Path, tools=None):
    return bc.cached("plain-tflite", [case / "model.bin", case / "calibration.npy"],
                     ["zoo_tools.py", "plain-tflite", str(case), str(out)],
                     tools or {"tensorflow": "2.21.0"}, lambda r: [out] if r["ok"] else [],
                     {"case": case}, run, lambda r: r["exit"] == 0)


def test_a_finished_baseline_is_reused_in_another_work_directory(tmp_path, cache):
    calls: list[str] = []
    first = _case(tmp_path / "a")
    out, run = _convert(first, calls)
    res = _cached(first, run, out)
    assert calls == [str(first)] and res["baseline_cache"]["hit"] is False
    second = _case(tmp_path / "b")  # same content elsewhere (another commit's work directory)
    out2, run2 = _convert(second, calls)
    res2 = _cached(second, run2, out2)
    assert calls == [str(first)]  # not converted again
    assert res2["baseline_cache"]["hit"] is True and res2["seconds"] == 12.5
    assert res2["path"] == str(out2) and out2.read_bytes() == out.read_bytes()
    assert res2["baseline_cache"]["measured"] == res["baseline_cache"]["measured"]
    assert "1 baseline conversion(s) reused" in bc.note([res2["baseline_cache"], None])


def test_other_inputs_versions_or_command_convert_again(tmp_path, cache):
    calls: list[str] = []
    case = _case(tmp_path / "a")
    out, run = _convert(case, calls)
    _cached(case, run, out)
    _cached(case, run, out, tools={"tensorflow": "2.22.0"})
    assert len(calls) == 2
    other = _case(tmp_path / "b", weights=2.0)
    out2, run2 = _convert(other, calls)
    _cached(other, run2, out2)
    assert len(calls) == 3
    k = bc.key("plain-tflite", [case / "model.bin"], ["a", str(case)], {}, {"case": case})
    assert k == bc.key("plain-tflite", [case / "model.bin"], ["a", str(other)], {},
                       {"case": other})
    assert k != bc.key("plain-tflite", [case / "model.bin"], ["b", str(case)], {},
                       {"case": case})


def test_a_crash_is_not_kept_a_tool_error_is(tmp_path, cache):
    calls: list[str] = []
    case = _case(tmp_path / "a")
    out, crash = _convert(case, calls, ok=False, exit_code=-11)
    assert _cached(case, crash, out)["ok"] is False
    assert _cached(case, crash, out)["ok"] is False
    assert len(calls) == 2  # a signal: ran again
    out, error = _convert(case, calls, ok=False, exit_code=0)
    _cached(case, error, out)
    res = _cached(case, error, out)
    assert len(calls) == 3 and res["ok"] is False and res["baseline_cache"]["hit"]


def test_off_turns_it_off(tmp_path, monkeypatch):
    monkeypatch.setenv(bc.ENV, "off")
    assert bc.cache_dir() is None
    calls: list[str] = []
    case = _case(tmp_path)
    out, run = _convert(case, calls)
    _cached(case, run, out)
    _cached(case, run, out)
    assert len(calls) == 2 and "baseline_cache" not in _cached(case, run, out)


def _keras_file(path: Path, object_id: int, date: str, weight: float) -> None:
    config = {"class_name": "Functional", "config": {"layers": [
        {"config": {"dtype": {"shared_object_id": object_id}}},
        {"config": {"dtype": {"shared_object_id": object_id}}}]}}
    buf = io.BytesIO()
    with h5py.File(buf, "w") as h5:
        h5.create_dataset("layers/conv2d/vars/0", data=np.full((3, 3), weight, np.float32))
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("metadata.json", json.dumps({"date_saved": date}))
        zf.writestr("config.json", json.dumps(config))
        zf.writestr("model.weights.h5", buf.getvalue())


def test_two_saves_of_one_keras_model_hash_alike(tmp_path):
    """The save date and Python's object ids differ between saves; the model does not."""
    _keras_file(tmp_path / "a.keras", 140714721179664, "2026-11-26@16:01", 0.5)
    _keras_file(tmp_path / "b.keras", 140621246289232, "2026-11-26@17:02", 0.5)
    _keras_file(tmp_path / "c.keras", 140621246289232, "2026-11-26@17:02", 0.25)
    assert (tmp_path / "a.keras").read_bytes() != (tmp_path / "b.keras").read_bytes()
    assert bc.file_hash(tmp_path / "a.keras") == bc.file_hash(tmp_path / "b.keras")
    assert bc.file_hash(tmp_path / "b.keras") != bc.file_hash(tmp_path / "c.keras")


def test_a_work_directory_loses_our_code_s_results_when_the_code_changes(tmp_path, monkeypatch):
    work = tmp_path / "work"
    (work / "m" / "job_tflm").mkdir(parents=True)
    (work / "m" / "plain_int8.tflite").write_bytes(b"x")
    monkeypatch.setattr(bc, "code_key", lambda paths=(), root=None: "one")
    assert bc.fresh_for_code(work, ["*/job_*"]) is True  # no key recorded: not trusted
    (work / "m" / "job_tflm").mkdir()
    assert bc.fresh_for_code(work, ["*/job_*"]) is False
    assert (work / "m" / "job_tflm").exists()
    monkeypatch.setattr(bc, "code_key", lambda paths=(), root=None: "two")
    assert bc.fresh_for_code(work, ["*/job_*"]) is True
    assert not (work / "m" / "job_tflm").exists() and (work / "m" / "plain_int8.tflite").exists()
