"""Measure each exact form of a rule family on each target and write ``op_tables/_form_costs.toml``.

    PYTHONPATH=. python benchmarks/form_costs.py [--configs ethos-u55-128,ethos-u65-256,...]
        [--out op_tables/_form_costs.toml]

Where one op has several exact forms the target runs (``rewriter.rules``: rules of one
``family``; today LayerNorm over channels: layernorm_decompose / layernorm_conv_mean /
layernorm_l2norm, and GroupNorm: groupnorm_decompose / groupnorm_l2norm), the planner takes the
cheapest on the target by this table (``rewriter.targets.form_costs``). Per case (a Keras 3 layer
at stated shapes: LayerNormalization at ConvNeXtTiny's four stages at 96x96, a small 8x8x32
one, a transformer token LN; GroupNormalization(8) on 1x24x24x64), each form is applied alone
(``rewriter.rewrite.passes.apply_rules``), exported in full int8 with int8 I/O on 32 seeded
normal samples (``rewriter.export.tflite``) and judged by the target's own tool:

* Ethos-U configs: Vela 5.2 (each accelerator's default system config and memory mode):
  NPU ms from its per-layer cycles, host ms of the ops it leaves on the CPU
  (``rewriter.targets.cost``: a lower bound), its SRAM figure;
* every target (``target = "any"``): the int8 file's activation bytes live at its peak
  (``micro_memory.peak``, the arena's main part), its size (flash), and the cycles of all its
  ops on a Cortex-M55-class host by ``rewriter.targets.cost``'s lower-bound model (what a
  TFLite Micro target computes on its CPU).

A form that does not apply to a case (layernorm_conv_mean needs rank 4) has no row for it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = ROOT / "op_tables" / "_form_costs.toml"
CONFIGS = ("ethos-u55-128", "ethos-u65-256", "ethos-u85-256")
#: (family, case name, Keras layer, input shape, forms)
LN_FORMS = ("layernorm_decompose", "layernorm_conv_mean", "layernorm_l2norm")
CASES = (
    ("layernorm", "ln_24x24x96", "LayerNormalization", (1, 24, 24, 96), LN_FORMS),
    ("layernorm", "ln_12x12x192", "LayerNormalization", (1, 12, 12, 192), LN_FORMS),
    ("layernorm", "ln_6x6x384", "LayerNormalization", (1, 6, 6, 384), LN_FORMS),
    ("layernorm", "ln_3x3x768", "LayerNormalization", (1, 3, 3, 768), LN_FORMS),
    ("layernorm", "ln_8x8x32", "LayerNormalization", (1, 8, 8, 32), LN_FORMS),
    ("layernorm", "ln_tokens_16x64", "LayerNormalization", (1, 16, 64), LN_FORMS),
    ("groupnorm", "gn8_24x24x64", "GroupNormalization", (1, 24, 24, 64),
     ("groupnorm_decompose", "groupnorm_l2norm")),
)


def _model(layer: str, shape: tuple[int, ...]) -> Any:
    import keras

    from rewriter.testing import model_from_keras

    keras.utils.set_random_seed(0)
    inp = keras.Input(shape[1:], batch_size=shape[0])
    lay = (keras.layers.LayerNormalization(epsilon=1e-6) if layer == "LayerNormalization" else
           keras.layers.GroupNormalization(8, epsilon=1e-3))
    km = keras.Model(inp, lay(inp))
    rng = np.random.default_rng(1)
    lay.set_weights([rng.uniform(0.5, 2.0, w.shape).astype("f4") if i == 0 else
                     rng.normal(0, 0.5, w.shape).astype("f4")
                     for i, w in enumerate(lay.get_weights())])
    return model_from_keras(km)


def measure_form(model: Any, rule: str, configs: list[str], work: Path) -> dict[str, Any] | None:
    """The form's int8 file judged on every config; None when the rule does not apply."""
    from rewriter.export.micro_memory import peak, read_layout
    from rewriter.export.tflite import export_tflite
    from rewriter.rewrite.passes import apply_rules
    from rewriter.targets.cost import estimate
    from rewriter.targets.vela import run_vela

    res = apply_rules(model, [rule])
    if not res.applied:
        return None
    spec = model.inputs[0]
    rng = np.random.default_rng(2)
    cal = [{spec.name: rng.normal(0.5, 1.5, (1, *spec.shape[1:])).astype("f4")}
           for _ in range(32)]
    path = work / f"{rule}.tflite"
    export_tflite(res.model, path, quantize="int8", calibration=cal, int8_io=True)
    layout = read_layout(path)
    _, live = peak(layout)
    out: dict[str, Any] = {"activation_peak_bytes": sum(t.bytes for t in live),
                           "file_bytes": path.stat().st_size,
                           "host_cycles": _host_cycles(path), "targets": {}}
    for config in configs:
        vela = run_vela(path, config, outdir=work / f"{rule}_{config}")
        est = estimate(vela, path) or {}
        out["targets"][config] = {
            "system_config": vela.csv.get("system_config"),
            "memory_mode": vela.csv.get("memory_mode"),
            "npu_ops": vela.npu_ops, "cpu_ops": vela.cpu_ops,
            "npu_ms": est.get("npu_ms"), "host_ms": est.get("host_ms"),
            "total_ms": est.get("total_ms"),
            "sram_kib": float(vela.csv.get("sram_memory_used") or 0)}
    return out


def _host_cycles(path: Path) -> int:
    """Every op of the file on the host CPU by ``rewriter.targets.cost``'s lower-bound model."""
    from ai_edge_litert.interpreter import Interpreter

    from rewriter.targets.cost import host_ops

    interp = Interpreter(model_path=str(path))
    names = {t["index"]: t["name"] for t in interp.get_tensor_details()}
    ofms = [names[o] for op in interp._get_ops_details() for o in op.get("outputs", [])[:1]
            if o in names]
    return sum(r["cycles"] for r in host_ops(path, ofms))


def to_toml(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The table: a header saying how it was made, then one ``[[form]]`` per (case, rule,
    target) (``target = "any"`` for the memory figures every target shares)."""
    lines = ["# Measured cost of each exact form of a rule family, per target: the planner takes",
             "# the cheapest form the target runs (rewriter/targets/form_costs.py).",
             "# Written by benchmarks/form_costs.py; do not edit by hand.", "",
             "[meta]"]
    lines += [f"{k} = {_value(v)}" for k, v in meta.items()]
    for r in rows:
        lines += ["", "[[form]]"] + [f"{k} = {_value(v)}" for k, v in r.items()]
    return "\n".join(lines) + "\n"


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, float):
        return repr(round(v, 6))
    return str(v)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--cases", default="", help="case names (default: all)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    configs = args.configs.split(",")
    wanted = set(args.cases.split(",")) if args.cases else None
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    for family, case, layer, shape, forms in CASES:
        if wanted is not None and case not in wanted:
            continue
        model = _model(layer, shape)
        for rule in forms:
            with tempfile.TemporaryDirectory() as tmp:
                got = measure_form(model, rule, configs, Path(tmp))
            if got is None:
                print(f"{case} {rule}: does not apply", flush=True)
                continue
            base = {"family": family, "case": case, "layer": layer, "shape": list(shape),
                    "rule": rule}
            rows.append(base | {"target": "any",
                                "activation_peak_bytes": got["activation_peak_bytes"],
                                "file_bytes": got["file_bytes"],
                                "host_cycles": got["host_cycles"]})
            for config, t in got["targets"].items():
                rows.append(base | {"target": config} | {k: v for k, v in t.items()
                                                          if v is not None})
                print(f"{case} {rule} {config}: {t['npu_ops']} NPU / {t['cpu_ops']} CPU, "
                      f"{t['npu_ms']} + {t['host_ms']} ms, SRAM {t['sram_kib']} KiB", flush=True)
    meta = _meta(argv, time.perf_counter() - start, rows)
    args.out.write_text(to_toml(rows, meta))
    print(f"wrote {args.out}")
    return 0


def measured_paths(rows: list[dict[str, Any]], root: Path = ROOT) -> list[str]:
    """The code a table measures: the rules it measured, what they share with their family
    (``rewriter/rules/_<family>.py``) and this benchmark."""
    paths = [f"rewriter/rules/{rule}.py" for rule in sorted({row["rule"] for row in rows})]
    paths += [f"rewriter/rules/_{family}.py" for family in sorted({row["family"] for row in rows})
              if (root / f"rewriter/rules/_{family}.py").exists()]
    return paths + ["benchmarks/form_costs.py"]


def code_key(rows: list[dict[str, Any]], root: Path = ROOT) -> str:
    """A hash of the contents of :func:`measured_paths`: stored in the table's meta, so whether
    the table is current is decided from the files themselves, in any checkout (a shallow clone,
    or one where the measuring commit was rebased away)."""
    import hashlib

    digest = hashlib.sha256()
    for path in measured_paths(rows, root):
        digest.update(path.encode() + b"\0" + (root / path).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _meta(argv: list[str] | None, seconds: float, rows: list[dict[str, Any]]) -> dict[str, Any]:
    from benchmarks import stamp

    s = stamp.header(stamp.command_line("form_costs.py", argv), "form_costs.py")
    return {"command": s["command"], "commit": s["commit"], "code": code_key(rows),
            "date": s["date"], "dirty": s["dirty"], "seconds": round(seconds),
            "versions": ", ".join(f"{k} {v}" for k, v in sorted(s["versions"].items())),
            "calibration": "32 seeded samples, normal(0.5, 1.5), full int8 with int8 I/O",
            "host_model": "rewriter.targets.cost (lower bound at the Cortex-M55's peak)"}


if __name__ == "__main__":
    raise SystemExit(main())
