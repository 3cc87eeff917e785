"""``--accuracy``'s approximation move (:mod:`rewriter.job.approximate`): an approximate rule
applied on purpose where the target runs the op but loses more than the rule's bound.

Fast: the planner plans a node the target runs only when asked (``approximate``), states the
rule's bound and the bound holds; the move's decisions (kept only when it meets the target with
every op on the NPU, dropped otherwise, no move without a rule) on stand-ins for the job's
attempts. Slow: the audio family on ethos-u55-128 in 16x8 reaches 0.99 on held-back clips.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from rewriter.job.approximate import CANDIDATE_DIR, ApproximationMove, approximation_move
from rewriter.rewrite.planner import ON_PURPOSE, plan, plan_and_apply
from rewriter.targets import load_target


@pytest.fixture(scope="module")
def log_model():
    import tensorflow as tf

    from rewriter.frontends.function import model_from_function

    return model_from_function(lambda x: tf.math.log(tf.nn.relu(x) + 1e-2), [[1, 256]])


def test_a_node_the_target_runs_is_replaced_only_on_purpose_and_within_its_bound(log_model):
    target = load_target("ethos-u55-128")
    log = next(n.name for n in log_model.graph_def.node if n.op == "Log")
    assert not [f for f in plan(log_model, target, "16x8").fixes if f.op == "Log"]
    fixes = [f for f in plan(log_model, target, "16x8", approximate={log}).fixes
             if f.op == "Log"]
    assert len(fixes) == 1 and fixes[0].rule == "elementwise_ramps" and not fixes[0].exact
    assert fixes[0].reason == ON_PURPOSE
    # --exact-only refuses it, and says so
    refused = plan(log_model, target, "16x8", exact_only=True, approximate={log})
    assert [u.op for u in refused.unfixable] == ["Log"]
    assert "--exact-only refuses it" in refused.unfixable[0].why
    # applied, on calibration data over [0, 4]: the stated bound holds on the calibrated range
    name = log_model.inputs[0].name
    rng = np.random.default_rng(0)
    cal = [{name: rng.uniform(0, 4, (1, 256)).astype(np.float32)} for _ in range(8)]
    the_plan, res = plan_and_apply(log_model, target, "16x8", data=cal, approximate={log})
    assert "Log" not in {n.op for n in res.model.graph_def.node}
    (app,) = [a for a in res.applied if a.rule == "elementwise_ramps"]
    assert app.bound is not None and 0 < app.bound.max_abs_error < 0.05
    assert the_plan.fixes[-1].reason == ON_PURPOSE
    x = np.linspace(0, 4, 256, dtype=np.float32)[None]
    want = np.asarray(next(iter(log_model.run({name: x}).values())))
    got = np.asarray(next(iter(res.model.run({name: x}).values())))
    err = float(np.max(np.abs(got - want)))
    assert 0 < err <= app.bound.max_abs_error, (err, app.bound)


# ---------------------------------------------------------------- the move, on stand-ins
@dataclass
class _Ctx:
    target: Any
    outdir: Path
    opts: Any
    data: Any
    quantize: str = "16x8"

    @staticmethod
    def steps(*_: Any) -> Any:
        return contextlib.nullcontext()


@dataclass
class _Attempt:
    rewrite: Any
    artifact: Any
    deployment: Any
    saved_model: str | None = None
    warnings: list[str] = field(default_factory=list)


def _run(cos: float) -> Any:
    return SimpleNamespace(comparison=SimpleNamespace(outputs=[SimpleNamespace(cosine=cos)]))


def _deployment(path: Path, ms: float, sram: float, cpu: int) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * 2048)
    vela = SimpleNamespace(inference_time=ms / 1e3, csv={"sram_memory_used": sram}, cpu_ops=cpu)
    return SimpleNamespace(exported=SimpleNamespace(path=path, ok=True),
                           verdict=SimpleNamespace(vela=vela))


def _graph(*ops: tuple[str, str]) -> Any:
    return SimpleNamespace(graph_def=SimpleNamespace(
        node=[SimpleNamespace(name=n, op=o) for n, o in ops]))


def _setup(tmp_path, monkeypatch, op: str, after: float, cpu: int = 0, exact_only=False):
    from rewriter.rules.base import Applied, Bound

    layer = SimpleNamespace(layer="logmel", ops=["LOG"], node="m/logmel", added=4.9)
    monkeypatch.setattr("rewriter.verify.int8_layers.int8_layer_errors",
                        lambda path, model, samples: SimpleNamespace(worst=lambda n=1: [layer]))
    ctx = _Ctx(load_target("ethos-u55-128"), tmp_path,
               SimpleNamespace(accuracy=0.99, exact_only=exact_only),
               SimpleNamespace(calibration_samples=[{}], samples=[{}], basis="8 sample(s)"))
    first = _Attempt(SimpleNamespace(model=_graph(("m/logmel", op)), applied=[]), _run(0.976),
                     _deployment(tmp_path / "model.tflite", 0.517, 77.4, 0))
    bound = Bound(0.0112, (3.3e-4, 2335.0), "46 ramps")

    def redo(c: Any, nodes: frozenset[str]) -> Any:
        assert c.outdir == tmp_path / CANDIDATE_DIR and nodes == {"m/logmel"}
        applied = [Applied("elementwise_ramps", "m/logmel", ["m/logmel"], [], False, bound)]
        return _Attempt(SimpleNamespace(model=_graph(), applied=applied), _run(after),
                        _deployment(c.outdir / "model.tflite", 0.703, 187.4, cpu),
                        str(c.outdir / "saved_model"))

    promoted = []
    monkeypatch.setattr("rewriter.job.stages.promote",
                        lambda cand, out, dep: promoted.append(cand) or dep)
    return ctx, first, redo, promoted


def test_the_move_is_kept_when_it_meets_the_target_and_states_bound_and_cost(tmp_path,
                                                                            monkeypatch):
    ctx, first, redo, promoted = _setup(tmp_path, monkeypatch, "Log", 0.9903)
    attempt, move = approximation_move(ctx, first, redo)
    assert move.kept and move.met and promoted == [tmp_path / CANDIDATE_DIR]
    assert attempt is not first and attempt.saved_model == str(tmp_path / "saved_model")
    assert move.rule == "elementwise_ramps" and move.bounds[0]["max_abs_error"] == 0.0112
    assert move.cost_before["vela_ms"] == 0.517 and move.cost_after["vela_ms"] == 0.703
    assert move.cost_after["sram_kib"] == 187.4 and move.cost_after["cpu_ops"] == 0
    text = move.describe()
    assert "replaced on purpose by elementwise_ramps" in text and "max abs error 0.0112" in text
    assert "0.9760 -> 0.9903" in text
    assert "vela_ms 0.517 -> 0.703" in text and "kept" in text
    json.dumps(move.to_json())


@pytest.mark.parametrize("after,cpu,why", [(0.985, 0, "< 0.99"), (0.995, 2, "to the CPU")])
def test_the_move_is_dropped_below_the_target_or_off_the_npu(tmp_path, monkeypatch, after, cpu,
                                                             why):
    ctx, first, redo, promoted = _setup(tmp_path, monkeypatch, "Log", after, cpu)
    (tmp_path / CANDIDATE_DIR).mkdir()
    attempt, move = approximation_move(ctx, first, redo)
    assert attempt is first and not move.kept and not move.met and not promoted
    assert why in move.why and not (tmp_path / CANDIDATE_DIR).exists()
    assert move.worst_after == after and "dropped" in move.describe()


def test_no_move_without_a_rule_or_under_exact_only(tmp_path, monkeypatch):
    def never(*_: Any) -> Any:
        raise AssertionError("no candidate should be built")

    ctx, first, _, _ = _setup(tmp_path, monkeypatch, "Conv2D", 0.99)
    attempt, move = approximation_move(ctx, first, never)
    assert attempt is first and move.rule is None and not move.met
    assert "no rule replaces it" in move.why and "Conv2D" in move.why
    ctx, first, _, _ = _setup(tmp_path, monkeypatch, "Log", 0.99, exact_only=True)
    _, move = approximation_move(ctx, first, never)
    assert move.rule is None and "--exact-only refuses it" in move.why


def test_a_file_that_meets_the_target_needs_no_move(tmp_path, monkeypatch):
    ctx, first, _, _ = _setup(tmp_path, monkeypatch, "Log", 0.99)
    first.artifact = _run(0.995)
    attempt, move = approximation_move(ctx, first, lambda *_: None)
    assert attempt is first and move.met and move.rule is None and "no move needed" in move.why
    assert isinstance(move, ApproximationMove)


# ---------------------------------------------------------------- the audio family, end to end
@pytest.mark.slow  # two 16x8 exports and Vela compilations: ~25 s on the shared machine
@pytest.mark.parametrize("quantize", [["--quantize", "16x8"], []], ids=["16x8", "int8-job"])
def test_audio_reaches_099_on_ethos_u55_in_16x8_with_the_log_as_ramps(cli, tmp_path, quantize):
    """With ``--quantize 16x8``, or in an int8 job (the default) whose int8/16x8 plans all miss
    0.99 (the whole model in 16x8: 0.9762): the move is then taken in 16x8 (was exit 1)."""
    from tests import families

    path = families.audio_saved_model(tmp_path / "audio", samples=8000, frame=256, step=128,
                                      mels=32)
    clips = families.waveforms(32, samples=8000)[:, 0]
    np.save(tmp_path / "cal.npy", clips[:24])
    np.save(tmp_path / "held.npy", clips[24:])
    out = tmp_path / "out"
    code, stdout, stderr = cli(path, "--target", "ethos-u55-128", *quantize, "--accuracy", "0.99",
                               "--calibration", tmp_path / "cal.npy", "--data",
                               tmp_path / "held.npy", "-o", out)
    report = json.loads((out / "report.json").read_text())
    move = report["approximation"]
    assert code == 0, stdout[-3000:]
    assert move["kept"] and move["met"] and move["rule"] == "elementwise_ramps"
    assert move["layer"]["tf_op"] == "Log" and move["layer"]["ops"] == ["LOG"]
    assert move["worst_before"] < 0.99 <= move["worst_after"]
    assert 0 < move["bounds"][0]["max_abs_error"] < 0.02
    assert move["cost_before"]["cpu_ops"] == move["cost_after"]["cpu_ops"] == 0
    assert move["cost_after"]["vela_ms"] > move["cost_before"]["vela_ms"]
    assert report["vela"]["cpu_ops"] == 0
    cos = min(o["cosine"] for o in report["equivalence"]["artifact"]["outputs"].values())
    assert cos >= 0.99 and not (out / CANDIDATE_DIR).exists()
    assert "replaced on purpose by elementwise_ramps" in stderr  # the warning line
