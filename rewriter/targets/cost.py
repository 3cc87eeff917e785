"""Estimated latency of a ``.tflite`` on an Ethos-U system: the NPU part from Vela's own per-layer
performance output, the ops Vela leaves on the host CPU from a documented lower-bound model.

NPU: Vela run with ``--verbose-performance`` writes ``<net>_per-layer.csv`` (one row per
operator it scheduled: original TFLite operator, the NPU operator it became, ``Op Cycles``,
``MAC Count``, ``Name`` = the output tensor's name). Cycles are at the system config's
``core_clock`` (Vela's summary CSV), so ``ms = cycles / core_clock * 1e3``. A row whose name holds
``/<rule>/`` was produced by that rewrite rule (the rules name their nodes so), which gives the
cost of each rule's output on the chip.

Host CPU (ops Vela leaves to TFLite Micro on the Cortex-M55 beside the NPU): a **lower bound**,
each op at the core's peak vector throughput, at the same ``core_clock`` as the NPU (the brief of
Corstone-300-like systems; an assumption, stated in the report):

* int8 multiply-accumulates (CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, BATCH_MATMUL):
  :data:`INT8_MACS_PER_CYCLE` = 8. Helium (MVE) executes a 128-bit vector instruction in beats
  of 32 bits; the Cortex-M55 has a dual-beat (64-bit) datapath, so one vector multiply-accumulate
  instruction retires 8 int8 MACs per cycle (Arm, "Cortex-M55 processor technical overview";
  Embedded 90, Nov. 2023, p. 37: "dual beat ... 8x Q7/int8" per cycle).
* other int8 ops: one int8 lane operation per output element at the same peak, 8 per cycle.
* float32 ops (what int8 conversion leaves in float): 2 elements per cycle (the same datapath,
  "2x fp32" per cycle, same source); a transcendental costs more, so this too is a lower bound.

CMSIS-NN kernels do not reach the peak (requantisation, loads, loop overhead), so the real host
time is longer: the plain converter's file, which leaves ops on the host, is estimated in its
favour, and a job whose total is below this estimate of the plain file is faster for real.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

INT8_MACS_PER_CYCLE = 8
INT8_ELEMENTS_PER_CYCLE = 8
FLOAT_ELEMENTS_PER_CYCLE = 2
MAC_OPS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL",
                     "TRANSPOSE_CONV"})
CPU_MODEL = (f"lower bound at the core's peak: {INT8_MACS_PER_CYCLE} int8 MACs/cycle, "
             f"{INT8_ELEMENTS_PER_CYCLE} int8 / {FLOAT_ELEMENTS_PER_CYCLE} float32 elements/cycle "
             "(Cortex-M55 Helium, dual-beat), at the system config's core clock")


@dataclass
class LayerCost:
    """One row of Vela's per-layer CSV."""

    original_op: str
    npu_op: str
    target: str
    cycles: int
    macs: int
    name: str


def parse_per_layer_csv(path: str | Path) -> list[LayerCost]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    out = []
    for r in rows:
        r = {k.strip(): (v or "").strip() for k, v in r.items() if k}
        out.append(LayerCost(r.get("Original Operator", ""), r.get("NNG Operator", ""),
                             r.get("Target", ""), int(float(r.get("Op Cycles") or 0)),
                             int(float(r.get("MAC Count") or 0)), r.get("Name", "")))
    return out


def _ms(cycles: float, clock: float) -> float:
    return round(cycles / clock * 1e3, 6)


def npu_breakdown(layers: list[LayerCost], clock: float,
                  rules: list[str] | None = None, top: int = 8) -> dict[str, Any]:
    """NPU cycles and ms by original operator, by rewrite rule (the rows whose tensor name holds
    ``/<rule>/``; ``null`` = not made by a rule) and the ``top`` most expensive layers."""
    by_op: dict[str, int] = {}
    by_rule: dict[str, int] = {}
    for layer in layers:
        by_op[layer.original_op] = by_op.get(layer.original_op, 0) + layer.cycles
        rule = next((r for r in rules or () if f"/{r}/" in layer.name or
                     layer.name.startswith(f"{r}/")), None)
        key = rule or "(no rule)"
        by_rule[key] = by_rule.get(key, 0) + layer.cycles
    total = sum(layer.cycles for layer in layers)
    ranked = sorted(layers, key=lambda x: -x.cycles)[:top]
    return {"cycles": total, "ms": _ms(total, clock),
            "by_op": {k: {"cycles": v, "ms": _ms(v, clock)}
                      for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])},
            "by_rule": {k: {"cycles": v, "ms": _ms(v, clock)}
                        for k, v in sorted(by_rule.items(), key=lambda kv: -kv[1])},
            "top_layers": [{"op": x.original_op, "npu_op": x.npu_op, "cycles": x.cycles,
                            "ms": _ms(x.cycles, clock), "name": x.name[:160]} for x in ranked]}


def host_ops(tflite_path: str | Path, ofms: list[str | None]) -> list[dict[str, Any]]:
    """Per op of the file whose output tensor is in ``ofms`` (Vela's CPU ops): its MACs,
    output elements and whether it computes in float; and its lower-bound cycles."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(model_path=str(tflite_path),
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    tensors = {t["index"]: t for t in interp.get_tensor_details()}
    wanted = {o for o in ofms if o}
    out = []
    for op in interp._get_ops_details():  # the only op listing LiteRT offers
        outs = [tensors[i] for i in op.get("outputs", []) if i in tensors]
        if not outs or outs[0]["name"] not in wanted:
            continue
        ins = [tensors[i] for i in op.get("inputs", []) if i >= 0 and i in tensors]
        out.append(_host_cost(op["op_name"], ins, outs))
    return out


def _host_cost(name: str, ins: list[dict[str, Any]], outs: list[dict[str, Any]]) -> dict[str, Any]:
    elems = int(np.prod(outs[0]["shape"])) if len(outs[0]["shape"]) else 1
    in_elems = max((int(np.prod(t["shape"])) for t in ins if len(t["shape"])), default=1)
    macs = 0
    if name in MAC_OPS and len(ins) >= 2:
        w = [int(s) for s in ins[1]["shape"]]
        if name == "CONV_2D" and len(w) == 4:
            macs = elems * w[1] * w[2] * w[3]
        elif name == "DEPTHWISE_CONV_2D" and len(w) == 4:
            macs = elems * w[1] * w[2]
        elif name == "TRANSPOSE_CONV" and len(w) == 4:  # filter [O, kh, kw, I]
            macs = in_elems * w[0] * w[1] * w[2]
        elif w:
            k = int(ins[0]["shape"][-1]) if len(ins[0]["shape"]) else 1
            macs = elems * k
    is_float = any(np.dtype(t["dtype"]) == np.float32 for t in (*ins, *outs))
    if macs:
        cycles = macs / (FLOAT_ELEMENTS_PER_CYCLE if is_float else INT8_MACS_PER_CYCLE)
    else:
        cycles = max(elems, in_elems) / (FLOAT_ELEMENTS_PER_CYCLE if is_float
                                         else INT8_ELEMENTS_PER_CYCLE)
    return {"op": name, "ofm": outs[0]["name"], "macs": macs, "elements": max(elems, in_elems),
            "float": is_float, "cycles": int(round(cycles))}


def host_breakdown(rows: list[dict[str, Any]], clock: float) -> dict[str, Any]:
    total = sum(r["cycles"] for r in rows)
    by_op: dict[str, int] = {}
    for r in rows:
        by_op[r["op"]] = by_op.get(r["op"], 0) + r["cycles"]
    return {"ops": len(rows), "cycles": total, "ms": _ms(total, clock), "model": CPU_MODEL,
            "by_op": {k: {"cycles": v, "ms": _ms(v, clock)}
                      for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])}}


def estimate(vela: Any, tflite_path: str | Path, rules: list[str] | None = None
             ) -> dict[str, Any] | None:
    """NPU + host estimate of a file Vela compiled (a :class:`~rewriter.targets.vela.VelaResult` with its
    per-layer rows); None when Vela wrote no per-layer CSV."""
    clock = float(vela.csv.get("core_clock") or 0)
    if not vela.layers or not clock:
        return None
    npu = npu_breakdown(vela.layers, clock, rules)
    host = host_breakdown(host_ops(tflite_path, [c.ofm for c in vela.cpu_reasons]), clock)
    return {"system_config": vela.csv.get("system_config"),
            "memory_mode": vela.csv.get("memory_mode"),
            "core_clock_hz": clock, "npu_ms": npu["ms"], "host_ms": host["ms"],
            "total_ms": round(npu["ms"] + host["ms"], 6), "npu": npu, "host": host}


# ----------------------------------------------------------------------------- Edge TPU
#: coral.ai/docs/edgetpu/compiler, "Parameter data caching": "The Edge TPU has roughly 8 MB of
#: SRAM that can cache the model's parameter data"; what does not fit streams from the host
#: memory on every inference ("off-chip memory").
EDGETPU_PARAMETER_CACHE = 8 * 2**20


def edgetpu_estimate(tflite_path: str | Path, check: Any) -> dict[str, Any]:
    """The Edge TPU's documented cost model for a file and the table's verdict on it: ops
    mapped before the cut and after it (on the CPU), the parameter bytes (constant tensors) of
    the mapped ops against the on-chip parameter cache, and what would stream from the host
    every inference; per-op counts on and off the chip."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(model_path=str(tflite_path),
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    tensors = {t["index"]: t for t in interp.get_tensor_details()}
    ops = interp._get_ops_details()  # the only op listing LiteRT offers
    produced = {i for op in ops for i in op.get("outputs", [])}
    inputs = {d["index"] for d in interp.get_input_details()}
    verdicts = [v for v in check.verdicts if v.placement != "none"]
    on_chip = [v.placement == "accelerator" for v in verdicts]
    if len(on_chip) != len(ops):  # the table folded some: count by position up to the cut
        mapped = (check.cut or {}).get("mapped_before", len(ops)) if check.cut else len(ops)
        on_chip = [i < mapped for i in range(len(ops))]
    params = 0
    counts: dict[str, dict[str, int]] = {}
    for op, chip in zip(ops, on_chip, strict=True):
        where = "edgetpu" if chip else "cpu"
        counts.setdefault(op["op_name"], {"edgetpu": 0, "cpu": 0})[where] += 1
        if not chip:
            continue
        for i in op.get("inputs", []):
            t = tensors.get(i)
            if t is None or i in produced or i in inputs:
                continue
            params += int(np.prod(t["shape"])) * np.dtype(t["dtype"]).itemsize
    streamed = max(0, params - EDGETPU_PARAMETER_CACHE)
    return {"ops_on_edgetpu": sum(on_chip), "ops_on_cpu": len(ops) - sum(on_chip),
            "parameter_bytes": params, "parameter_cache_bytes": EDGETPU_PARAMETER_CACHE,
            "streamed_bytes_per_inference": streamed, "by_op": counts,
            "model": "ops before the compiler's cut run on the Edge TPU; parameters beyond its "
                     "~8 MB on-chip cache stream from the host every inference "
                     "(coral.ai/docs/edgetpu/compiler)"}


# ----------------------------------------------------------------------------- side by side
def latency(vela: Any, estimate: dict[str, Any] | None) -> dict[str, Any] | None:
    """One file's cost in the target's currency: Ethos-U NPU/CPU ops and NPU + host ms (from
    ``estimate`` and Vela's result), the Edge TPU ops on/off the chip and streamed parameters
    (an :func:`edgetpu_estimate`); None without a cost model."""
    if estimate is None:
        return None
    if "npu_ms" in estimate:
        return {"npu_ops": vela.npu_ops if vela else None,
                "cpu_ops": vela.cpu_ops if vela else None,
                **{k: estimate[k] for k in ("npu_ms", "host_ms", "total_ms")},
                "by_rule": {k: v["ms"] for k, v in estimate["npu"]["by_rule"].items()
                            if k != "(no rule)"}}
    return {k: estimate[k] for k in ("ops_on_edgetpu", "ops_on_cpu", "parameter_bytes",
                                     "streamed_bytes_per_inference")}


def versus(job: dict[str, Any], plain: dict[str, Any]) -> dict[str, Any]:
    """The job's artifact beside the plain converter's file, with ratios job / plain."""
    out: dict[str, Any] = {"job": job, "plain": plain}
    for key in ("npu_ms", "total_ms"):
        if job.get(key) is not None and plain.get(key):
            out[f"{key.split('_')[0]}_ratio"] = round(job[key] / plain[key], 4)
    return out


def versus_lines(cmp: dict[str, Any] | None) -> list[str]:
    """What the report and ``check`` print for :func:`versus`."""
    if not cmp:
        return []
    if cmp.get("error"):
        return [f"plain converter's file: not estimated ({cmp['error']})"]
    j, p = cmp["job"], cmp["plain"]
    same = " (the same file: no rule applied)" if cmp.get("same_file") else ""
    if "npu_ms" in j:
        def one(d: dict[str, Any]) -> str:
            return (f"{d['npu_ops']} NPU / {d['cpu_ops']} CPU ops, NPU {d['npu_ms']:.3f} ms + "
                    f"host {d['host_ms']:.3f} ms = {d['total_ms']:.3f} ms")
        lines = [f"job's artifact: {one(j)}", f"plain converter's file{same}: {one(p)}"]
        if "total_ratio" in cmp:
            lines.append(f"job / plain: NPU {cmp.get('npu_ratio', float('nan')):.2f}x, "
                         f"total {cmp['total_ratio']:.2f}x")
        if j.get("by_rule"):
            lines.append("the rules' ops cost (NPU): " + ", ".join(
                f"{k} {v:.3f} ms" for k, v in j["by_rule"].items()))
        return lines

    def etpu(d: dict[str, Any]) -> str:
        return (f"{d['ops_on_edgetpu']} ops on the Edge TPU / {d['ops_on_cpu']} on the CPU, "
                f"{d['parameter_bytes'] / 2**20:.2f} MiB parameters, "
                f"{d['streamed_bytes_per_inference'] / 2**20:.2f} MiB streamed per inference")
    return [f"job's artifact: {etpu(j)}", f"plain converter's file{same}: {etpu(p)}"]
