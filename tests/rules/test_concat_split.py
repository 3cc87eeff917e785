"""concat_split: a ConcatV2 of more than 10 operands becomes a tree of concatenations of at most 10.

Exact (data movement only): outputs are compared for equality in float; the int8 file of the
rewrite loads and runs in TFLite Micro's own interpreter (which refuses a CONCATENATION of more
than 10 inputs), and its int8 outputs are compared with those of the unsplit model in LiteRT.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.concat_split import ConcatSplit
from rewriter.testing import model_from_function, op_types

RULE = ConcatSplit()


def _frames(n: int):
    def fn(x):
        return tf.concat([tf.tanh(x * (0.2 * i + 0.5)) for i in range(n)], axis=-1)
    return fn


@pytest.mark.parametrize("n, concats", [(11, 2), (25, 4), (123, 16)])
def test_a_wide_concat_becomes_a_tree_and_is_equal(n, concats):
    model = model_from_function(_frames(n), [(1, 4, 3)])
    result = apply_rules(model, [RULE])
    assert [a.rule for a in result.applied] == ["concat_split"]
    nodes = [x for x in result.model.graph_def.node if x.op == "ConcatV2"]
    assert len(nodes) == concats
    widths = [sum(1 for r in x.input if not r.startswith("^")) - 1 for x in nodes]
    assert max(widths) <= 10 and all(x.attr["N"].i == w for x, w in zip(nodes, widths))
    x = np.linspace(-2, 2, 12, dtype="f4").reshape(1, 4, 3)
    np.testing.assert_array_equal(result.model.run({"x0": x})["output_0"],
                                  model.run({"x0": x})["output_0"])


def test_ten_or_fewer_operands_are_left_alone():
    result = apply_rules(model_from_function(_frames(10), [(1, 4, 3)]), [RULE])
    assert result.applied == [] and op_types(result.model)["ConcatV2"] == 1


def test_tflm_table_refuses_the_wide_concat_and_the_job_fixes_it(tmp_path):
    """The tflm table flags the 12-input CONCATENATION; the planner picks concat_split; the int8
    file then has no CONCATENATION wider than 10 and matches the unsplit int8 model's output
    (LiteRT) to within one int8 step of the output scale."""
    from rewriter.export.tflite import export_tflite
    from rewriter.rewrite.planner import plan_and_apply
    from rewriter.targets import load_target
    from rewriter.verify.runners import RunnerError, run_tflite
    from rewriter.verify.tflm import TflmRunner, tflm_available

    model = model_from_function(_frames(12), [(1, 4, 3)])
    target = load_target("tflm")
    before = target.check_graph(model, "int8")
    bad = [v for v in before.verdicts if not v.supported]
    assert [v.op for v in bad] == ["ConcatV2"] and "At most 10 input tensors" in bad[0].reason
    assert "observed 12 inputs" in bad[0].reason
    plan, result = plan_and_apply(model, target, "int8")
    assert [f.rule for f in plan.fixes] == ["concat_split"]
    rng = np.random.default_rng(0)
    data = [{"x0": rng.uniform(-2, 2, (1, 4, 3)).astype("f4")} for _ in range(16)]
    paths = {}
    for m, name in ((model, "before"), (result.model, "after")):
        paths[name] = tmp_path / f"{name}.tflite"
        export_tflite(m, paths[name], quantize="int8", calibration=data)
    art = target.check_artifact(str(paths["after"]))
    assert all(v.supported for v in art.verdicts), [v.reason for v in art.verdicts
                                                   if not v.supported]
    assert not all(v.supported for v in target.check_artifact(str(paths["before"])).verdicts)
    lite = np.concatenate([next(iter(run_tflite(str(paths["before"]), d).values())).ravel()
                           for d in data])
    if not tflm_available():
        pytest.skip("TFLite Micro (pip install 'rewriter[tflm]') is not installed")
    with pytest.raises(RunnerError, match="TFLite Micro failed"):
        TflmRunner(paths["before"]).run_many(data[:1])
    micro = np.concatenate([next(iter(o.values())).ravel()
                            for o in TflmRunner(paths["after"]).run_many(data)])
    # outputs in [-1, 1] (tanh): one int8 step of the output is 2/255
    assert np.max(np.abs(micro - lite)) <= 2 / 255 + 1e-6
