"""Model Explorer node data (``OUT/explorer/``) and ``rewrite explore``.

The job's node data is rebuilt with Model Explorer's own node-data classes, its node ids are
checked against the ids Model Explorer's own adapters give the ``.tflite`` and the GraphDef, and
``rewrite explore --no-open`` is loaded in headless Chromium, where the node data must be listed
and the graph coloured. One job's output (the session's ``edgetpu_run``) serves every test.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rewriter.errors import UserError
from rewriter.report.explorer import COLOURS, MAY_NOT_MAP

ROOT = Path(__file__).resolve().parent.parent


def _manifest(out: Path) -> dict:
    return json.loads((out / "explorer" / "explorer.json").read_text())


def _overlays(out: Path, key: str) -> dict[str, dict]:
    model = next(m for m in _manifest(out)["models"] if m["key"] == key)
    return {Path(f).name.split(".")[1]: json.loads((out / f).read_text())
            for f in model["node_data"]}


def _rebuild(data: dict) -> dict:
    """``data`` read back through model_explorer.node_data_builder's classes and written again."""
    ndb = pytest.importorskip("model_explorer.node_data_builder",
                              reason="pip install 'rewriter[explore]'")

    graphs = {}
    for graph_id, g in data.items():
        g = dict(g)
        results = {k: ndb.NodeDataResult(**v) for k, v in g.pop("results").items()}
        gradient = [ndb.GradientItem(**x) for x in g.pop("gradient", [])]
        thresholds = [ndb.ThresholdItem(**x) for x in g.pop("thresholds", [])]
        graphs[graph_id] = ndb.GraphNodeData(results=results, gradient=gradient,
                                             thresholds=thresholds, **g)
    return json.loads(ndb.ModelNodeData(graphsData=graphs).to_json_string())


def test_node_data_is_what_model_explorers_builder_writes(edgetpu_run):
    code, out = edgetpu_run
    assert code == 0
    files = [f for m in _manifest(out)["models"] for f in m["node_data"]]
    names = {Path(f).name for f in files}
    assert {"artifact.placement.json", "artifact.rule.json", "artifact.int8_added_error.json",
            "artifact.int8_cosine.json", "rewritten_graph.rule.json"} <= names
    for f in files:
        data = json.loads((out / f).read_text())
        assert _rebuild(data) == data, f
        for g in data.values():
            values = [r["value"] for r in g["results"].values()]
            assert values, f
            kinds = {type(v) for v in values}
            assert kinds <= ({str} if g["showExpandedSummaryOnGroupNode"] else {int, float}), f
            assert all(isinstance(v, str) or np.isfinite(v) for v in values)


def _tflite_graph(path: Path) -> dict:
    pytest.importorskip("model_explorer", reason="pip install 'rewriter[explore]'")
    from model_explorer.builtin_tflite_flatbuffer_adapter import BuiltinTfliteFlatbufferAdapter

    return BuiltinTfliteFlatbufferAdapter().convert(str(path), {})["graphCollections"][0].graphs[0]


def _graphdef_names(path: Path) -> dict[str, str]:
    pytest.importorskip("model_explorer", reason="pip install 'rewriter[explore]'")
    from model_explorer.builtin_graphdef_adapter import BuiltinGraphdefAdapter

    gd = BuiltinGraphdefAdapter().convert(str(path), {})
    return {n["id"]: n["namespace"] for n in gd["graphCollections"][0].graphs[0]["nodes"]}


def test_node_ids_are_the_ones_model_explorers_adapters_give(edgetpu_run):
    _, out = edgetpu_run
    report = json.loads((out / "report.json").read_text())
    graph = _tflite_graph(out / "model.tflite")
    labels = {n["id"]: n["label"] for n in graph["nodes"]}
    ops = report["artifact_ops"]
    over = _overlays(out, "artifact")
    place = over["placement"][graph["id"]]["results"]
    # every op of the file has a placement, on the node Model Explorer draws for that op
    assert sorted(place, key=int) == [str(i) for i in range(len(ops))]
    assert all(labels[i] == ops[int(i)].lower() for i in place)
    # the sample's file: all 24 ops on the Edge TPU, the 6 RESHAPEs of the ELU ramps flagged
    may = [i for i, r in place.items() if r["value"].startswith(MAY_NOT_MAP)]
    assert len(ops) == 24 and len(may) == 6 and {labels[i] for i in may} == {"reshape"}
    assert all(place[i]["bgColor"] == COLOURS[MAY_NOT_MAP] for i in may)
    assert all(r["value"] == "accelerator" for i, r in place.items() if i not in may)
    # the rule: elementwise_ramps made the 18 ops of the three ELUs (6 each), with its bound
    rule = over["rule"][graph["id"]]["results"]
    assert len(rule) == 18 and {labels[i] for i in rule} == {"reshape", "conv_2d", "relu", "add"}
    bound = report["rules_applied"][0]["exactness"]
    assert {r["value"] for r in rule.values()} == {f"elementwise_ramps ({bound})"}
    # int8: each op carries its layer's added error; the worst layer's ops hold the maximum
    layers = report["int8_layers"]["layers"]
    added = over["int8_added_error"][graph["id"]]["results"]
    worst = max(layers, key=lambda x: x["added"])
    assert added[str(worst["first"])]["value"] == pytest.approx(worst["added"], abs=1e-6)
    assert max(r["value"] for r in added.values()) == pytest.approx(worst["added"], abs=1e-6)
    # the rewritten TF graph: ids are GraphDef node indices; each one the rule created
    names = _graphdef_names(out / "explorer" / "rewritten_graph.pb")
    created = set(report["rules_applied"][0]["created"])
    tf_rule = _overlays(out, "rewritten_graph")["rule"]["main"]["results"]
    assert len(tf_rule) >= 30 and all(names[i] in created for i in tf_rule)
    # the SavedModel as Model Explorer's TF adapter draws it: the function holding the graph
    from model_explorer.builtin_tf_direct_adapter import BuiltinTfDirectAdapter

    sm = _overlays(out, "saved_model")["rule"]
    ((fn, data),) = sm.items()
    graphs = BuiltinTfDirectAdapter().convert(str(out / "saved_model" / "saved_model.pb"), {})
    (g,) = [g for c in graphs["graphCollections"] for g in c.graphs if g["id"] == fn]
    spaces = {n["id"]: n["namespace"] for n in g["nodes"]}
    assert len(data["results"]) == len(tf_rule)
    assert all(spaces[i] in created for i in data["results"])


def test_the_reports_say_how_to_open_it(edgetpu_run):
    _, out = edgetpu_run
    ex = json.loads((out / "report.json").read_text())["explorer"]
    assert ex["open"] == f"rewrite explore {out}"
    assert ex["models"]["model.tflite"][-1] == "placement"
    assert f"<code>rewrite explore {out}</code>" in (out / "report.html").read_text()
    assert f"`rewrite explore {out}`" in (out / "report.md").read_text()


def check_overlays(out: Path, res: dict) -> None:
    """``rewrite check MODEL --target edgetpu -o OUT`` on the sample (``res``: its --json):
    the plain converter's file with each op's placement (the cut at the first DEQUANTIZE of
    ELU's float island) and the fixing rule; the TF graph's Elu nodes with theirs."""
    assert res["explorer"] == str(out)
    conv = _overlays(out, "converted")
    place = conv["placement"]["main"]["results"]
    cut = res["cut"]
    assert len(place) == cut["mapped_before"] + cut["cpu_after"]
    assert place["0"]["value"] == "accelerator"
    assert all(r["value"].startswith(("host (unsupported)", "host (after the cut)"))
               for i, r in place.items() if i != "0")
    fixes = conv["fix"]["main"]["results"]
    assert len(fixes) == sum(u["count"] for u in res["unsupported"])
    assert {r["value"] for r in fixes.values()} >= {"elementwise_ramps fixes ELU"}
    tf_fix = _overlays(out, "original_graph")["fix"]["main"]["results"]
    assert [r["value"] for r in tf_fix.values()] == ["elementwise_ramps fixes Elu"] * 3
    import importlib.util

    if importlib.util.find_spec("model_explorer") is None:  # the ids: with its adapters
        return
    graph = _tflite_graph(out / "converted.tflite")
    labels = {n["id"]: n["label"] for n in graph["nodes"]}
    assert [labels[i] for i in fixes if "ELU" in fixes[i]["value"]].count("elu") == 3
    names = _graphdef_names(out / "explorer" / "original_graph.pb")
    assert sorted(names[i] for i in tf_fix) == [f"convbn_elu_1/elu{k}_1/Elu" for k in (1, 2, 3)]


# ----------------------------------------------------------------------------- the command
def test_explore_without_the_extra_names_it(edgetpu_run, cli, monkeypatch):
    from rewriter.commands import explore

    monkeypatch.setattr(explore, "explorer_available", lambda: False)
    code, out, err = cli("explore", edgetpu_run[1], "--no-open")
    assert code == 2 and out == ""
    assert err.strip().startswith("error: ") and "pip install 'rewriter[explore]'" in err


def test_explore_refuses_what_is_not_a_job_output(tmp_path, cli):
    code, _, err = cli("explore", tmp_path, "--no-open")
    assert code == 2 and "no Model Explorer node data" in err


def test_explore_binds_loopback_unless_host_is_given():
    from rewriter.commands.explore import LOOPBACK, bind_host, refuse_remote

    assert bind_host(None) == LOOPBACK == "127.0.0.1"
    for host in ("0.0.0.0", "192.168.1.20", "::"):
        with pytest.raises(UserError, match=f"pass --host {host}"):
            refuse_remote(host, explicit=False)
        refuse_remote(host, explicit=True)  # the user said so
    refuse_remote("127.0.0.1", explicit=False)
    refuse_remote("localhost", explicit=False)
    with pytest.raises(UserError):
        bind_host(" ")


def _tiny_out(root: Path) -> Path:
    """An OUT with a (dummy) model and one node-data file: enough for the server to start."""
    from rewriter.report.explorer import Overlay, write_overlays

    out = root / "out"
    out.mkdir()
    (out / "model.tflite").write_bytes(b"not read until the page asks")
    place = Overlay("placement", "main")
    place.set(0, "accelerator", COLOURS["accelerator"])
    write_overlays(out, {"artifact": ("model.tflite", [place])})
    return out


def test_explore_serves_only_out_and_its_models(tmp_path):
    """What Model Explorer's server would serve to any caller, the guard refuses: files outside
    OUT, models outside it, a command that deletes at stop, uploads and config changes, another
    host name (DNS rebinding) or another web site; OUT's own files still load."""
    from rewriter.commands.explore import allowed, load_manifest, refusal

    out = _tiny_out(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("x")
    (out / "escape").symlink_to(secret)
    allow = allowed(out, load_manifest(out), "127.0.0.1", 8080)
    ok = {"Host": "127.0.0.1:8080"}
    node = str(out / "explorer" / "artifact.placement.json")
    model = str(out / "model.tflite")

    def why(route, args=None, body=None, headers=ok):
        return refusal(route, args or {}, body, headers, allow)

    assert why("/api/v1/read_text_file", {"path": node}) is None
    assert why("/api/v1/read_text_file", {"path": str(out / "report.json")}) is None
    assert why("/", headers={"Host": "localhost:8080", "Sec-Fetch-Site": "none"}) is None
    cmd = {"extensionId": "builtin_tflite_flatbuffer", "cmdId": "convert", "modelPath": model,
           "settings": {}, "deleteAfterConversion": False}
    assert why("/api/v1/send_command", {"json": json.dumps(cmd)}) is None
    assert why("/apipost/v1/send_command", body=cmd) is None
    for path in (str(secret), str(out / "escape"), str(out / ".." / "secret.txt"), "~/.bashrc",
                 "/etc/passwd", ""):
        assert "outside" in why("/api/v1/read_text_file", {"path": path}), path
    assert "outside" in why("/apipost/v1/send_command", body={**cmd, "modelPath": str(secret)})
    assert "outside" in why("/api/v1/send_command", {"json": "not json"})
    assert "deletes nothing" in why("/apipost/v1/send_command",
                                    body={**cmd, "deleteAfterConversion": True})
    assert "not served" in why("/apipost/v1/upload")
    assert "not served" in why("/apipost/v1/update_config", body={})
    assert "host" in why("/", headers={"Host": "evil.example:8080"})
    assert "another web site" in why("/api/v1/read_text_file", {"path": node},
                                     headers={**ok, "Origin": "http://evil.example"})
    assert "another web site" in why("/", headers={**ok, "Sec-Fetch-Site": "cross-site"})


def test_the_running_server_refuses_a_file_outside_out(tmp_path):
    """The guard is on the server `rewrite explore` starts: OUT's node data is served, a file
    beside OUT is 403 (Model Explorer alone serves it)."""
    import urllib.error
    import urllib.request
    from urllib.parse import quote

    pytest.importorskip("model_explorer", reason="pip install 'rewriter[explore]'")
    out = _tiny_out(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the browser")
    port = _free_port()
    server = _serve(out, port)
    try:
        assert _served_url(server).startswith("http"), "the server printed no URL in 60 s"
        base = f"http://127.0.0.1:{port}/api/v1/read_text_file?path="
        node = out / "explorer" / "artifact.placement.json"
        with urllib.request.urlopen(base + quote(str(node)), timeout=10) as r:
            assert json.loads(r.read())["content"] == node.read_text()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + quote(str(secret)), timeout=10)
        assert refused.value.code == 403
        assert "outside" in json.loads(refused.value.read())["error"]
    finally:
        server.terminate()
        server.wait(timeout=20)


def _serve(out: Path, port: int) -> subprocess.Popen:
    """``rewrite explore OUT`` in a subprocess, as a user starts it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "rewriter", "explore", str(out),
                             "--no-open", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _served_url(server: subprocess.Popen) -> str:
    """The URL the server prints once it listens (within 60 s)."""
    url = ""
    deadline = time.monotonic() + 60
    while not url.startswith("http") and time.monotonic() < deadline:
        url = server.stdout.readline().strip()
        assert server.poll() is None or url, server.stderr.read()[-2000:]
    return url


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chromium_or_skip() -> str:
    from tests.cdp import chromium

    exe = chromium()
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed (CI must install the Debian package)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return exe


def test_explore_page_shows_the_node_data_in_headless_chromium(edgetpu_run, tmp_path):
    from tests.cdp import Browser
    from tests.test_report_html import decode_png

    exe = _chromium_or_skip()
    _, out = edgetpu_run
    port = _free_port()
    server = _serve(out, port)
    browser = None
    try:
        url = _served_url(server)
        assert url.startswith(f"http://127.0.0.1:{port}/?data="), url
        browser = Browser(exe, tmp_path / "profile", 1200, 800)
        browser.goto(url)
        names = ["rule", "int8_added_error", "int8_cosine", "range_starved", "placement"]
        panel = browser.wait_for(
            "(document.body && document.body.innerText.includes('NODE DATA PROVIDERS') && "
            "document.body.innerText.includes('placement')) ? document.body.innerText : ''",
            timeout=60)
        assert panel, browser.eval("document.body.innerText")[:2000]
        listed = panel.split("NODE DATA PROVIDERS", 1)[1]
        assert all(n in listed for n in names)
        assert "accelerator (might not be mapped): RESHAPE" in panel  # the node data table
        # expand every layer: the op nodes are drawn in their placement colour
        browser.eval("[...document.querySelectorAll('*')].find(e => e.children.length === 0 "
                     "&& e.textContent.trim() === 'unfold_more_double').closest('div,button')"
                     ".click()")
        time.sleep(1.5)
        img = decode_png(browser.screenshot(tmp_path / "explore.png").read_bytes())
        graph_area = img[60:, :820, :3].reshape(-1, 3)  # left of the side panel
        green = np.array([0xa5, 0xd6, 0xa7])
        assert np.sum(np.all(graph_area == green, axis=1)) > 500
    finally:
        if browser is not None:
            browser.close()
        server.terminate()
        server.wait(timeout=20)


def check_vela_overlay(out: Path) -> None:
    """An Ethos-U job's ``vela_cycles`` node data holds every cycle of Vela's per-layer CSV."""
    from rewriter.targets.cost import parse_per_layer_csv

    (csv,) = out.glob("*per-layer.csv")
    rows = parse_per_layer_csv(csv)
    cycles = _overlays(out, "artifact")["vela_cycles"]["main"]["results"]
    assert len(cycles) >= 15 and all(v["value"] > 0 for v in cycles.values())
    assert sum(v["value"] for v in cycles.values()) == sum(r.cycles for r in rows)


def test_vela_cycles_land_on_the_ops_vela_names():
    """Vela's per-layer rows (as on the sample's file for ethos-u55-128): an op's output, a
    MEAN's ``_intermediate`` step, and the ``_copy`` of a RESHAPE's input."""
    from rewriter.report.explorer import vela_overlay
    from rewriter.targets.cost import LayerCost

    ops = [("CONV_2D", "conv", ["image"]), ("RESHAPE", "plane", ["conv"]),
           ("MEAN", "pool", ["plane"]), ("FULLY_CONNECTED", "logits", ["pool"])]
    rows = [LayerCost("Conv2D", "Conv2D", "NPU", 14752, 0, "conv"),
            LayerCost("Reshape", "MemoryCopy", "NPU", 16640, 0, "conv_copy"),
            LayerCost("Mean", "DepthwiseConv2D", "NPU", 21917, 0, "pool_intermediate"),
            LayerCost("Mean", "Add", "NPU", 128, 0, "pool"),
            LayerCost("Conv2D", "Relu6", "NPU", 0, 0, "conv")]
    ov = vela_overlay(rows, ops, "main")
    assert {k: v["value"] for k, v in ov.results.items()} == {"0": 14752, "1": 16640,
                                                              "2": 22045}


def test_an_overlay_with_no_node_is_not_written(tmp_path):
    """A job no rule changed lists its graphs without an empty ``rule`` file."""
    from rewriter.report.explorer import Overlay, write_overlays

    place = Overlay("placement", "main")
    place.set(0, "accelerator", COLOURS["accelerator"])
    manifest = write_overlays(tmp_path, {"artifact": ("model.tflite",
                                                      [Overlay("rule", "main"), place])})
    assert json.loads(manifest.read_text())["models"] == [
        {"key": "artifact", "model": "model.tflite",
         "node_data": ["explorer/artifact.placement.json"]}]
    assert not (tmp_path / "explorer" / "artifact.rule.json").exists()
