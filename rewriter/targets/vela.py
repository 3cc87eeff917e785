"""Run Arm's Vela compiler on a ``.tflite`` and parse where it placed each op.

Vela is run in a child process (``python -m ethosu.vela``, started by
:func:`rewriter.host.child.run`: it dies with the job, and a timeout or an interrupt kills it) with ``--accelerator-config``; its
stdout gives ``CPU operators = N (x%)`` / ``NPU operators = N (x%)`` and, per op left on the CPU,
``Warning (supported operators) operator: OP, ofm: 'name'`` followed by ``Reason: ...`` lines.
The summary CSV it writes gives the performance estimate (``inference_time`` and friends).
:func:`supported_ops_report` reads Vela's own op lists (``--supported-ops-report``), which the
Ethos-U op tables are tested against.
"""

from __future__ import annotations

import csv
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewriter.errors import UserError
from rewriter.host import child

VELA = [sys.executable, "-m", "ethosu.vela"]
TIMEOUT_S = 600

_COUNT = re.compile(r"^\s*(CPU|NPU) operators\s*=\s*(\d+)", re.M)
_WARN = re.compile(r"Warning \(supported operators\) operator:\s*(None|[A-Z0-9_]+)(?:,\s*ofm:\s*'([^']*)')?")
_REASON = re.compile(r"^\s*Reason:\s*(.+?)\s*$")


#: ``--optimise``: Vela's strategies (Vela's default: Performance).
OPTIMISE = ("Performance", "Size")


@dataclass
class VelaSettings:
    """How the user configures Vela beyond the accelerator: ``--system-config``,
    ``--memory-mode``, ``--optimise``, ``--arena-cache-size`` (bytes) and their own
    ``vela.ini`` (``--vela-config``, Vela's ``--config``). None: Vela's default."""

    system_config: str | None = None
    memory_mode: str | None = None
    optimise: str | None = None
    arena_cache_size: int | None = None
    config_file: str | None = None

    def args(self) -> list[str]:
        """Vela's arguments for these settings."""
        out: list[str] = []
        for flag, value in (("--config", self.config_file),
                            ("--system-config", self.system_config),
                            ("--memory-mode", self.memory_mode), ("--optimise", self.optimise),
                            ("--arena-cache-size", self.arena_cache_size)):
            if value is not None:
                out += [flag, str(value)]
        return out

    def to_json(self) -> dict[str, Any]:
        """What was asked for (None: Vela's default; the summary CSV names what Vela used)."""
        return {"system_config": self.system_config, "memory_mode": self.memory_mode,
                "optimise": self.optimise, "arena_cache_size": self.arena_cache_size,
                "config_file": self.config_file}


@dataclass
class CpuOp:
    """One op Vela left on the CPU, with its reasons (Vela's words)."""

    op: str
    ofm: str | None
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "ofm": self.ofm, "reasons": list(self.reasons)}


@dataclass
class VelaResult:
    """Vela's placement and performance estimate for one file and accelerator config."""

    config: str
    npu_ops: int
    cpu_ops: int
    cpu_reasons: list[CpuOp]
    csv: dict[str, str]
    time: float  # seconds Vela took
    output_tflite: str | None = None
    stdout: str = ""
    layers: list[Any] = field(default_factory=list)  # rewriter.targets.cost.LayerCost rows
    settings: VelaSettings | None = None  # what the user configured Vela with
    command: list[str] = field(default_factory=list)  # Vela's arguments (file names only)

    @property
    def inference_time(self) -> float | None:
        """Vela's estimated inference time in seconds (from the summary CSV)."""
        v = self.csv.get("inference_time")
        return float(v) if v not in (None, "") else None

    def cpu_op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for c in self.cpu_reasons:
            counts[c.op] = counts.get(c.op, 0) + 1
        return counts

    def to_json(self) -> dict[str, Any]:
        keys = SUMMARY_METRICS
        return {"config": self.config, "system_config": self.csv.get("system_config"),
                "memory_mode": self.csv.get("memory_mode"),
                "npu_ops": self.npu_ops, "cpu_ops": self.cpu_ops,
                "cpu_reasons": [c.to_json() for c in self.cpu_reasons],
                "summary": {k: self.csv[k] for k in keys if k in self.csv},
                "settings": (self.settings or VelaSettings()).to_json(),
                "command": " ".join(self.command), "vela_seconds": round(self.time, 2)}


#: Vela's summary CSV columns the reports show: label and unit (Vela writes SRAM/flash in KiB,
#: the inference time in seconds, shown in ms).
SUMMARY_METRICS = {
    "inference_time": ("estimated inference time", "ms"),
    "cycles_npu": ("NPU cycles", "cycles"),
    "cycles_total": ("total cycles", "cycles"),
    "nn_macs": ("multiply-accumulates", "MACs"),
    "sram_memory_used": ("SRAM used", "KiB"),
    "off_chip_flash_memory_used": ("off-chip flash used", "KiB"),
}


def summary_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value with its unit) for each known metric of a Vela summary."""
    rows = []
    for key, (label, unit) in SUMMARY_METRICS.items():
        value = summary.get(key)
        if value in (None, ""):
            continue
        number = float(value) * 1e3 if key == "inference_time" else float(value)
        text = f"{number:.3f}" if unit == "ms" else f"{number:.2f}" if unit == "KiB" else (
            f"{int(number)}")
        rows.append((label, f"{text} {unit}"))
    return rows


def count_note(vela: dict[str, Any], file_ops: int | None) -> str | None:
    """Why Vela's operator counts differ from the op table's count of the file's operators."""
    vela_total = int(vela.get("npu_ops") or 0) + int(vela.get("cpu_ops") or 0)
    if file_ops is None or vela_total == file_ops:
        return None
    npu, cpu = int(vela.get("npu_ops") or 0), int(vela.get("cpu_ops") or 0)
    return (f"the file has {file_ops} operators: Vela leaves {cpu} of them to the CPU and "
            f"compiles the other {file_ops - cpu} into its own graph, whose {npu} operators are "
            "its NPU count (it splits some ops into several and fuses others)")


def estimate_lines(vela: dict[str, Any]) -> list[str]:
    """What the report and ``check`` say about the estimated latency (``vela["estimate"]``)."""
    e = vela.get("estimate")
    if not e:
        return []
    host = e["host"]
    lines = [f"Estimated latency ({e['system_config']}, {e['memory_mode']}, "
             f"{e['core_clock_hz'] / 1e6:.0f} MHz): NPU {e['npu_ms']:.3f} ms (Vela, per layer) + "
             f"host {e['host_ms']:.3f} ms ({host['ops']} CPU op(s); {host['model']}) = "
             f"{e['total_ms']:.3f} ms"]
    top = list(e["npu"]["by_op"].items())[:6]
    if top:
        lines.append("NPU time by operator: " + ", ".join(f"{k} {v['ms']:.3f} ms"
                                                          for k, v in top))
    rules = [(k, v) for k, v in e["npu"]["by_rule"].items() if k != "(no rule)"]
    if rules:
        lines.append("NPU time of the rules' ops: " + ", ".join(f"{k} {v['ms']:.3f} ms"
                                                                for k, v in rules))
    if host["by_op"]:
        lines.append("host time by operator: " + ", ".join(
            f"{k} {v['ms']:.3f} ms" for k, v in list(host["by_op"].items())[:6]))
    return lines


def parse_stdout(text: str) -> tuple[int | None, int | None, list[CpuOp]]:
    """(npu_ops, cpu_ops, per-op CPU reasons) from Vela's console output."""
    counts = {m.group(1): int(m.group(2)) for m in _COUNT.finditer(text)}
    cpu: list[CpuOp] = []
    current: CpuOp | None = None
    for line in text.splitlines():
        m = _WARN.search(line)
        if m:
            current = CpuOp(m.group(1), m.group(2))
            cpu.append(current)
        elif current is None:
            continue
        elif not line.strip():
            current = None
        elif _REASON.match(line):
            current.reasons.append(_REASON.match(line).group(1))
        elif current.reasons:
            current.reasons[-1] += " " + line.strip()
    return counts.get("NPU"), counts.get("CPU"), cpu


def parse_summary_csv(path: Path) -> dict[str, str]:
    """The one data row of Vela's ``<net>_summary_<system>.csv`` as a dict."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {k.strip(): (v or "").strip() for k, v in rows[0].items()} if rows else {}


def run_vela(tflite_path: str | Path, config: str, outdir: str | Path | None = None,
             extra_args: list[str] | None = None, system_config: str | None = None,
             memory_mode: str | None = None, settings: VelaSettings | None = None) -> VelaResult:
    """Compile ``tflite_path`` for ``config`` (e.g. ``ethos-u55-128``) and parse the result.

    ``settings`` (the user's :class:`VelaSettings`; or ``system_config`` and ``memory_mode``
    alone) are passed to Vela (None: Vela's defaults, which its summary CSV names); the result
    records them and the arguments Vela ran with. Vela runs with ``--verbose-performance``: its
    per-layer CSV becomes ``layers``.
    ``outdir`` receives ``<net>_vela.tflite`` and the CSVs (a temp dir when None).
    Raises :class:`UserError` when Vela fails on the file.
    """
    from rewriter.targets.cost import parse_per_layer_csv

    src = Path(tflite_path)
    if not src.is_file():
        raise UserError(f"no such file: {src}")
    if settings is None:
        settings = VelaSettings(system_config, memory_mode)
    with tempfile.TemporaryDirectory(prefix="vela_") as tmp:
        out = Path(outdir) if outdir is not None else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        args = ["--accelerator-config", config, *settings.args(), *(extra_args or [])]
        cmd = [*VELA, str(src.resolve()), *args, "--output-dir", str(out.resolve()),
               "--verbose-performance"]
        start = time.perf_counter()
        proc = child.run(cmd, timeout=TIMEOUT_S, cwd=tmp)
        if proc.timed_out:
            raise UserError(f"vela did not finish within {TIMEOUT_S} s on {src}")
        elapsed = time.perf_counter() - start
        text = proc.stdout + "\n" + proc.stderr
        npu, cpu, reasons = parse_stdout(text)
        if proc.returncode != 0 or npu is None or cpu is None:
            tail = " | ".join(line for line in text.strip().splitlines()[-3:])
            raise UserError(f"vela failed on {src} ({proc.describe()}): {tail}")
        summaries = sorted(out.glob(f"{src.stem}_summary_*.csv"))
        summary = parse_summary_csv(summaries[0]) if summaries else {}
        compiled = out / f"{src.stem}_vela.tflite"
        per_layer = out / f"{src.stem}_per-layer.csv"
        layers = parse_per_layer_csv(per_layer) if per_layer.exists() else []
        return VelaResult(config, npu, cpu, reasons, summary, elapsed,
                          str(compiled) if outdir is not None and compiled.exists() else None,
                          _without_tables(text), layers, settings,
                          ["vela", src.name, *args])


def _without_tables(text: str) -> str:
    """Vela's console output without the per-layer table ``--verbose-performance`` prints (it is
    parsed from the CSV; kept, it would be thousands of lines)."""
    keep, skip = [], False
    for line in text.splitlines():
        if line.startswith("Performance for NPU"):
            skip = True
        elif skip and line.startswith("Network summary"):
            skip = False
        if not skip:
            keep.append(line)
    return "\n".join(keep)


# ----------------------------------------------------------------------------- supported ops
_SECTION = re.compile(r"^## (.+?) TFLite Summary Table\s*$")
_ROW = re.compile(r"^\|\s*([A-Z0-9_]+)\s*\|")


def parse_supported_ops(markdown: str) -> dict[str, list[str]]:
    """Op names per summary table of Vela's SUPPORTED_OPS.md: {"Ethos-U85": [...], ...}."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in markdown.splitlines():
        m = _SECTION.match(line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        if line.startswith("## "):
            current = None
            continue
        r = _ROW.match(line)
        if r and current is not None:
            current.append(r.group(1))
    return out


def supported_ops_report() -> dict[str, list[str]]:
    """Run ``vela --supported-ops-report`` in a temp dir and parse its summary tables."""
    with tempfile.TemporaryDirectory(prefix="vela_ops_") as tmp:
        proc = child.run([*VELA, "--supported-ops-report"], cwd=tmp, timeout=120)
        report = Path(tmp) / "SUPPORTED_OPS.md"
        if proc.returncode != 0 or not report.exists():
            raise UserError(f"vela --supported-ops-report failed: {proc.stderr.strip()[-200:]}")
        return parse_supported_ops(report.read_text())


def vela_ini_sections(path: str | Path | None = None) -> dict[str, list[str]]:
    """The system configs and memory modes of a Vela configuration file: ``path`` (a user's
    ``vela.ini``) or the one Vela uses by default (``ethosu/config_files/Arm/vela.ini``):
    ``{"System_Config": [...], "Memory_Mode": [...]}``; empty lists when Vela is not installed.
    A user's file that cannot be read or parsed is a :class:`UserError`."""
    import configparser
    import importlib.util

    out: dict[str, list[str]] = {"System_Config": [], "Memory_Mode": []}
    if path is None:
        spec = importlib.util.find_spec("ethosu")
        if spec is None or not spec.submodule_search_locations:
            return out
        ini = Path(list(spec.submodule_search_locations)[0]) / "config_files" / "Arm" / "vela.ini"
        if not ini.is_file():
            return out
    else:
        ini = Path(path)
    parser = configparser.ConfigParser()
    try:
        parser.read_string(ini.read_text(), str(ini))
    except (OSError, UnicodeDecodeError, configparser.Error) as e:
        raise UserError(f"--vela-config {ini}: not a Vela configuration file "
                        f"({type(e).__name__}: {str(e).splitlines()[0]})") from None
    for section in parser.sections():
        kind, _, name = section.partition(".")
        if kind in out and name:
            out[kind].append(name)
    return out


def configure(target: Any, system_config: str | None, memory_mode: str | None,
              optimise: str | None = None, arena_cache_size: int | None = None,
              config_file: str | None = None) -> None:
    """Set the target's Vela settings (:class:`VelaSettings`, passed through to Vela and
    recorded); a :class:`UserError` naming the choices when the configuration file (the user's
    ``config_file``, else Vela's own) has no such section, for a bad value, or when the target is
    no Ethos-U.

    Vela takes a user's configuration file only with a system config and memory mode named:
    when the file has exactly one of either, that one is taken."""
    target.vela_settings = VelaSettings()
    asked = [f for f, v in (("--system-config", system_config), ("--memory-mode", memory_mode),
                            ("--optimise", optimise), ("--arena-cache-size", arena_cache_size),
                            ("--vela-config", config_file)) if v is not None]
    if not asked:
        return
    if not target.vela_config:
        raise UserError(f"{'/'.join(asked)} apply to Ethos-U targets (Vela); "
                        f"{target.name} has no Vela: drop {asked[0]}")
    if optimise is not None and optimise not in OPTIMISE:
        raise UserError(f"--optimise {optimise}: Vela's strategies are {' and '.join(OPTIMISE)}")
    if arena_cache_size is not None and arena_cache_size <= 0:
        raise UserError(f"--arena-cache-size {arena_cache_size}: give a positive number of bytes")
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise UserError(f"--vela-config {config_file}: no such file")
        if path.suffix != ".ini":
            raise UserError(f"--vela-config {config_file}: Vela reads configuration files named "
                            "*.ini only; rename it")
        config_file = str(path.resolve())
    known = vela_ini_sections(config_file)
    where = f"{Path(config_file).name}" if config_file else "Vela's vela.ini"
    chosen: dict[str, str | None] = {}
    for value, key, flag in ((system_config, "System_Config", "--system-config"),
                             (memory_mode, "Memory_Mode", "--memory-mode")):
        if value is None and config_file is not None:
            if len(known[key]) != 1:
                raise UserError(f"--vela-config {config_file}: name one of its {key} sections "
                                f"with {flag} (it has: {', '.join(known[key]) or 'none'})")
            value = known[key][0]
        if value and (known[key] or config_file) and value not in known[key]:
            raise UserError(f"{flag} {value}: not in {where}; choose one of "
                            f"{', '.join(known[key]) or '(none: the file has no ' + key + ')'}")
        chosen[key] = value
    target.system_config, target.memory_mode = chosen["System_Config"], chosen["Memory_Mode"]
    target.vela_settings = VelaSettings(target.system_config, target.memory_mode, optimise,
                                        arena_cache_size, config_file)


def configure_from_args(target: Any, args: Any) -> None:
    """:func:`configure` with a command's parsed arguments (:func:`add_arguments`)."""
    configure(target, args.system_config, args.memory_mode, getattr(args, "optimise", None),
              getattr(args, "arena_cache_size", None), getattr(args, "vela_config", None))


def _bytes(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        import argparse

        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes") from None


def add_arguments(parser: Any) -> None:
    """Vela's settings (:class:`VelaSettings`), passed through to Vela and recorded."""
    g = parser.add_argument_group("Ethos-U (Vela)")
    g.add_argument("--system-config", metavar="NAME",
                   help="Vela system configuration (vela.ini), e.g. Ethos_U55_Deep_Embedded; "
                        "default Vela's (Ethos_U55_High_End_Embedded for U55)")
    g.add_argument("--memory-mode", metavar="NAME",
                   help="Vela memory mode (vela.ini), e.g. Sram_Only, Shared_Sram, "
                        "Dedicated_Sram; default Vela's")
    g.add_argument("--optimise", choices=OPTIMISE,
                   help="Vela's strategy: Performance (Vela's default) or Size (less SRAM)")
    g.add_argument("--arena-cache-size", type=_bytes, metavar="BYTES",
                   help="Vela's arena cache size in bytes (overrides the memory mode's)")
    g.add_argument("--vela-config", metavar="FILE.ini",
                   help="your own Vela configuration file; --system-config/--memory-mode name "
                        "its sections (default: the file's only one)")


def vela_version() -> str:
    return str(child.run([*VELA, "--version"], timeout=60).stdout).strip()


def reconcile(check: Any, result: VelaResult) -> list[dict[str, Any]]:
    """Make Vela's placement the verdict of an artifact :class:`~rewriter.targets.GraphCheck`.

    Ops Vela left on the CPU become unsupported with Vela's reasons; ops the table rejected but
    Vela put on the NPU become supported. Returns the disagreements (so the table can be fixed)
    and updates ``check.ok``. Float I/O QUANTIZE/DEQUANTIZE at the graph edges stay on the CPU
    without counting against the model.
    """
    on_cpu: dict[tuple[str, str | None], CpuOp] = {(c.op, c.ofm): c for c in result.cpu_reasons}
    disagreements = []
    for v in check.verdicts:
        if v.placement == "none" or v.target_op is None:
            continue
        ofm = v.node.split(" ", 1)[1] if " " in v.node else v.node
        # Vela names ops its enum lacks (RFFT2D, COMPLEX_ABS) "None": match those by ofm
        hit = on_cpu.get((v.target_op, ofm)) or on_cpu.get(("None", ofm))
        vela_npu = hit is None
        is_edge = v.supported and v.placement == "cpu"
        if is_edge:
            continue
        if vela_npu == v.supported:
            continue
        disagreements.append({"op": v.target_op, "node": v.node,
                              "table": "supported" if v.supported else "unsupported",
                              "vela": "npu" if vela_npu else "cpu",
                              "table_reason": v.reason,
                              "vela_reasons": list(hit.reasons) if hit else []})
        if vela_npu:
            v.supported, v.placement, v.reason, v.observed = True, "accelerator", None, None
        else:
            v.supported, v.placement = False, "cpu"
            v.reason = f"{v.target_op}: Vela: " + "; ".join(hit.reasons or ["left on the CPU"])
    check.ok = all(v.supported for v in check.verdicts)
    return disagreements
