"""The planner takes the cheapest exact form a target runs (rewriter/targets/form_costs.py,
op_tables/_form_costs.toml written by benchmarks/form_costs.py) and the report says which form
it took and what the alternatives cost."""

from __future__ import annotations

import pytest

from rewriter.report import forms
from rewriter.rules import all_rules
from rewriter.targets import form_costs


def _row(case, shape, rule, target, **fig):
    return {"family": "fam", "case": case, "shape": list(shape), "rule": rule, "target": target,
            **fig}


@pytest.fixture
def fake_table(monkeypatch):
    rows = [
        # big case: a is off the NPU (2 CPU ops), b all on it but slower on the NPU
        _row("big", (1, 24, 24, 96), "a", "ethos-u55-128", cpu_ops=2, total_ms=2.0, sram_kib=100.0),
        _row("big", (1, 24, 24, 96), "b", "ethos-u55-128", cpu_ops=0, total_ms=2.1, sram_kib=117.0),
        # small case: both placed; a faster by 30%
        _row("small", (1, 3, 3, 768), "a", "ethos-u55-128", cpu_ops=0, total_ms=0.07, sram_kib=9.0),
        _row("small", (1, 3, 3, 768), "b", "ethos-u55-128", cpu_ops=0, total_ms=0.10, sram_kib=9.0),
        # CPU targets: equal host cycles within 2%, b needs half the activation memory
        _row("big", (1, 24, 24, 96), "a", "any", host_cycles=10000, activation_peak_bytes=200),
        _row("big", (1, 24, 24, 96), "b", "any", host_cycles=10100, activation_peak_bytes=100),
    ]
    monkeypatch.setattr(form_costs, "table", lambda: {"meta": {"command": "cmd", "commit": "c0"},
                                                      "form": rows})


def test_placement_comes_before_time_then_the_model_shapes_pick_the_case(fake_table):
    order, ev = form_costs.rank("fam", "ethos-u55-128", ["a", "b"])  # both cases once
    assert order == ["b", "a"] and ev["forms"]["a"]["cpu_ops"] == 2
    # a model whose regions are all small: the small case alone, where a is faster
    order, ev = form_costs.rank("fam", "ethos-u55-128", ["a", "b"], [(1, 4, 4, 512)] * 3)
    assert order == ["a", "b"] and ev["cases"] == {"small": 3}
    assert ev["forms"]["a"]["total_ms"] == pytest.approx(0.21)


def test_an_unmeasured_config_uses_its_accelerator_s_measured_one(fake_table):
    order, ev = form_costs.rank("fam", "ethos-u55-64", ["a", "b"])
    assert order == ["b", "a"] and ev["measured_on"] == "ethos-u55-128"


def test_cpu_targets_compare_the_cpu_model_then_memory_others_keep_rule_order(fake_table):
    order, ev = form_costs.rank("fam", "tflm", ["a", "b"])
    assert order == ["b", "a"]  # cycles within 2%: memory decides
    assert ev["forms"]["b"]["activation_peak_bytes"] == 100
    order, ev = form_costs.rank("fam", "gpu", ["a", "b"])
    assert order == ["a", "b"] and ev["by"] == "rule priority" and "no common case" in ev["why"]
    assert form_costs.rank("fam", "tflm", ["a"]) == (["a"], None)


def test_a_region_of_a_rank_no_common_case_has_keeps_the_rules_order(fake_table):
    # the cases are rank 4: a rank-3 token region is not judged on them
    order, ev = form_costs.rank("fam", "ethos-u55-128", ["a", "b"], [(1, 16, 32)])
    assert order == ["a", "b"] and ev["by"] == "rule priority" and "rank 3" in ev["why"]
    # a model with both: the rank-4 regions alone are counted
    order, ev = form_costs.rank("fam", "ethos-u55-128", ["a", "b"], [(1, 16, 32), (1, 3, 3, 768)])
    assert order == ["a", "b"] and ev["cases"] == {"small": 1}


def test_nearest_case_prefers_the_same_rank_then_size_and_channels():
    cases = {"big": (1, 24, 24, 96), "small": (1, 3, 3, 768), "tokens": (1, 16, 64)}
    assert form_costs.nearest((1, 20, 20, 128), cases) == "big"
    assert form_costs.nearest((1, 2, 2, 1024), cases) == "small"
    assert form_costs.nearest((None, 49, 96), cases) == "tokens"


def test_the_committed_table_names_real_rules_of_one_family_and_says_how_it_was_made():
    data = form_costs.table()
    assert data["form"], "op_tables/_form_costs.toml is missing or empty"
    assert "benchmarks/form_costs.py" in data["meta"]["command"] and data["meta"]["commit"]
    rules = {r.name: r for r in all_rules()}
    for row in data["form"]:
        assert rules[row["rule"]].family == row["family"], row
        assert row["target"] == "any" or "npu_ms" in row, row


def test_on_ethos_u_a_rank4_layernorm_takes_conv_mean_and_the_report_shows_the_costs():
    import keras

    from rewriter.rewrite.planner import plan
    from rewriter.targets import load_target
    from rewriter.testing import model_from_keras

    inp = keras.Input((8, 8, 16), batch_size=1)
    model = model_from_keras(keras.Model(inp, keras.layers.LayerNormalization()(inp)))
    p = plan(model, load_target("ethos-u55-128"), "int8")
    [choice] = p.form_choices()
    assert choice["chosen"] == "layernorm_conv_mean"
    dec, conv = choice["forms"]["layernorm_decompose"], choice["forms"]["layernorm_conv_mean"]
    assert dec["cpu_ops"] > 0 and conv["cpu_ops"] == 0  # Vela runs the depth MEAN on the CPU
    assert [r for r in p.rules if r.startswith("layernorm")] == ["layernorm_conv_mean"]
    md = "\n".join(forms.markdown(p.form_choices()))
    assert "| layernorm_conv_mean (chosen) | 0 |" in md and "layernorm_decompose" in md


def test_a_token_layernorm_on_ethos_u_is_not_given_the_form_that_refuses_rank_3():
    """layernorm_conv_mean's check refuses what is not NHWC: on a [1, 16, 32] token LayerNorm the
    planner offers only the forms that match it, so the LN is rewritten (it was left to Vela when
    the plan took conv_mean, judged on a rank-4 case, and conv_mean then matched nothing)."""
    import keras

    from rewriter.rewrite.planner import plan
    from rewriter.targets import load_target
    from rewriter.testing import model_from_keras

    inp = keras.Input((16, 32), batch_size=1)
    model = model_from_keras(keras.Model(inp, keras.layers.LayerNormalization()(inp)))
    p = plan(model, load_target("ethos-u55-128"), "int8")
    assert [r for r in p.rules if r.startswith("layernorm")] == ["layernorm_decompose"]
    assert all("layernorm_conv_mean" not in c["forms"] for c in p.form_choices())


def test_the_measured_table_is_current_for_the_forms_it_measured():
    """The table is a measurement of the rules' code: when a measured rule (or what it shares
    with its family, or the benchmark) changes, the table is re-measured. Decided by the hash of
    the files' contents stored in the table, so it holds in a shallow clone too."""
    from benchmarks.form_costs import ROOT, code_key, measured_paths

    data = form_costs.table()
    paths = measured_paths(data["form"])
    assert all((ROOT / p).exists() for p in paths), paths
    assert "rewriter/rules/_layernorm.py" in paths and "benchmarks/form_costs.py" in paths
    assert data["meta"]["code"] == code_key(data["form"]), (
        f"{paths} changed since the table was measured at {data['meta']['commit'][:12]}: "
        f"run `{data['meta']['command']}`")
