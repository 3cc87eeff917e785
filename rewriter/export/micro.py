"""A microcontroller deployment package of the job's ``.tflite`` (``rewrite run --deploy``).

OUT/deploy/ holds what a TFLite Micro application needs, names as in TFLite Micro's examples:

* ``model_data.cc`` / ``model_data.h``: the file as ``alignas(16) const unsigned char g_model[]``
  and ``const unsigned int g_model_len`` (for Ethos-U the Vela-compiled file);
* ``op_resolver.h``: ``inline TfLiteStatus RegisterOps(tflite::MicroMutableOpResolver<N>&)`` with
  exactly the builtin ops the file holds (``AddXxx()`` as ``micro_mutable_op_resolver.h`` spells
  them, :mod:`rewriter.export.micro_ops`), plus ``AddEthosU()`` for the Ethos-U custom op;
* ``arena.h``: ``kTensorArenaSize`` = the arena measured + :data:`ARENA_MARGIN`, and where the
  figure comes from;
* ``README.md``: the snippet wiring them together.
* after an ``--inputs`` cut at an embedding lookup, ``lookup_<k>.npy`` and ``lookup.h``: the
  table(s) the host looks the ids up in (:mod:`rewriter.export.micro_lookup`).

The arena: for a file TFLite Micro runs on this host (tflm), the smallest arena its interpreter
allocates the file in, by bisection (:func:`rewriter.verify.tflm.smallest_arena`), measured on a
64-bit host (the interpreter's own structures are larger than on a 32-bit MCU: the figure bounds
the MCU's from above). A Vela file cannot run here (the host interpreter has no Ethos-U kernel):
its arena is Vela's ``sram_memory_used`` (the SRAM Vela plans for the NPU's tensors and scratch),
stated as Vela's, not measured.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewriter.errors import UserError
from rewriter.export.micro_ops import ADD_METHODS, ETHOSU_CUSTOM, ETHOSU_METHOD

#: Bytes added to the measured arena in ``arena.h`` (the interpreter's allocations differ a
#: little between builds and hosts; TFLite Micro aligns the arena's start, losing up to 15).
ARENA_MARGIN = 1024
#: Alignment of the model array (TFLite Micro's examples: ``alignas(16)``).
ALIGN = 16


def deployable(target_name: str) -> bool:
    return target_name == "tflm" or target_name.startswith("ethos-u")


def refuse_unless_deployable(target_name: str, flag: str = "--deploy") -> None:
    if not deployable(target_name):
        raise UserError(f"{flag} is about a TFLite Micro deployment, for the tflm and ethos-u* "
                        f"targets only (not {target_name}): drop {flag} or pick one of those")


@dataclass
class Package:
    """The figures ``report.json``'s ``memory`` section states, the budgets they are held to
    (``--sram``/``--flash``, bytes) and, once written, the ``deploy/`` directory."""

    model_file: str  # the file deployed (the Vela file for Ethos-U)
    model_bytes: int
    ops: list[str]  # resolver methods, in the order registered
    arena_bytes: int  # measured (or Vela's), without the margin
    arena_source: str
    sram_budget: int | None = None
    flash_budget: int | None = None
    path: Path | None = None  # the deploy directory, when written (--deploy)
    lookups: list[dict[str, Any]] = field(default_factory=list)  # host lookup tables written
    vela: dict[str, Any] | None = None  # Ethos-U: Vela's own memory figures (KiB) and settings
    #: per budget overrun ("sram", "flash"): the largest tensors or weights and what would
    #: reduce them (:func:`rewriter.export.micro_memory.advice`), set by :meth:`explain`
    advice: dict[str, dict[str, Any]] = field(default_factory=dict)

    def overruns(self) -> list[str]:
        """One phrase per budget exceeded (the SRAM budget holds ``kTensorArenaSize``, margin
        included; the flash budget the model array)."""
        out = []
        if self.sram_budget is not None and self.arena_size > self.sram_budget:
            out.append(f"SRAM: tensor arena {self.arena_size} bytes ({self.arena_bytes} + "
                       f"{ARENA_MARGIN} margin) > --sram {_kib(self.sram_budget)}, "
                       f"{self.arena_size - self.sram_budget} bytes over")
        if self.flash_budget is not None and self.model_bytes > self.flash_budget:
            out.append(f"flash: {Path(self.model_file).name} {self.model_bytes} bytes > --flash "
                       f"{_kib(self.flash_budget)}, {self.model_bytes - self.flash_budget} "
                       "bytes over")
        return out

    def explain(self, artifact: str | Path, target_name: str, optimise: str | None) -> None:
        """Fill :attr:`advice` for each budget overrun, from the job's ``artifact``."""
        from rewriter.export.micro_memory import advice

        self.advice = {}
        if self.sram_budget is not None and self.arena_size > self.sram_budget:
            self.advice["sram"] = advice("sram", artifact, target_name, optimise)
        if self.flash_budget is not None and self.model_bytes > self.flash_budget:
            self.advice["flash"] = advice("flash", artifact, target_name, optimise)

    def overrun_lines(self) -> list[str]:
        """One line per budget exceeded: the overrun, the largest tensors or weights, and what
        would reduce it (stderr, report.md and report.html)."""
        out = []
        for phrase in self.overruns():
            a = self.advice.get("sram" if phrase.startswith("SRAM") else "flash")
            out.append(phrase + ("" if a is None else
                                 f"; {a['largest_text']}; would reduce it: "
                                 + "; ".join(a["reduce"])))
        return out

    @property
    def arena_size(self) -> int:
        """``kTensorArenaSize``: the measured arena plus :data:`ARENA_MARGIN`."""
        return self.arena_bytes + ARENA_MARGIN

    def memory_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "flash": {"bytes": self.model_bytes, "budget_bytes": self.flash_budget,
                      "source": f"size of {Path(self.model_file).name} (the model array)"},
            "sram": {"bytes": self.arena_size, "needed_bytes": self.arena_bytes,
                     "margin_bytes": ARENA_MARGIN, "budget_bytes": self.sram_budget,
                     "source": self.arena_source},
            "over_budget": self.overruns()}
        if self.vela is not None:
            out["vela"] = self.vela
        if self.advice:
            out["advice"] = self.advice
            out["over_budget_lines"] = self.overrun_lines()
        if self.path is not None:
            out["deploy"] = str(self.path)
        if self.lookups:
            out["host_lookup_tables"] = self.lookups
        return out


def _kib(n: int) -> str:
    return f"{n / 1024:g} KiB ({n} bytes)"


def file_ops(path: str | Path) -> tuple[list[str], list[str]]:
    """The builtin op names and custom op codes the ``.tflite`` uses (every subgraph), sorted."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(Path(path).read_bytes(), 0)
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    used = {i for sg in model.subgraphs for op in sg.operators for i in [op.opcodeIndex]}
    builtins, customs = set(), set()
    for i in used:
        code = model.operatorCodes[i]
        builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
        if names[builtin] == "CUSTOM":
            customs.add(code.customCode.decode() if isinstance(code.customCode, bytes)
                        else str(code.customCode))
        else:
            builtins.add(names[builtin])
    return sorted(builtins), sorted(customs)


def resolver_methods(path: str | Path) -> list[str]:
    """The ``MicroMutableOpResolver`` calls registering every op of the file; a
    :class:`UserError` naming ops TFLite Micro has no kernel for."""
    builtins, customs = file_ops(path)
    missing = [b for b in builtins if b not in ADD_METHODS]
    missing += [c for c in customs if c != ETHOSU_CUSTOM]
    if missing:
        raise UserError(f"{Path(path).name}: TFLite Micro has no kernel for "
                        f"{', '.join(missing)}; no deployment package is written")
    return [ADD_METHODS[b] for b in builtins] + ([ETHOSU_METHOD] if customs else [])


def c_array(data: bytes, name: str = "g_model") -> tuple[str, str]:
    """``model_data.cc`` and ``model_data.h`` holding ``data`` as an aligned C array."""
    rows = [", ".join(f"0x{b:02x}" for b in data[i:i + 12]) for i in range(0, len(data), 12)]
    body = ",\n".join("    " + r for r in rows)
    header = textwrap.dedent(f"""\
        // Generated by rewriter (--deploy). The model as a C array for TFLite Micro.
        #ifndef REWRITER_MODEL_DATA_H_
        #define REWRITER_MODEL_DATA_H_

        extern const unsigned char {name}[];
        extern const unsigned int {name}_len;

        #endif  // REWRITER_MODEL_DATA_H_
        """)
    cc = (f'// Generated by rewriter (--deploy): {len(data)} bytes, {ALIGN}-byte aligned.\n'
          f'#include "model_data.h"\n\n'
          f"alignas({ALIGN}) const unsigned char {name}[] = {{\n{body}\n}};\n"
          f"const unsigned int {name}_len = {len(data)};\n")
    return cc, header


def resolver_header(methods: list[str]) -> str:
    calls = "\n".join(f"  if ({m}() != kTfLiteOk) return kTfLiteError;" for m in methods)
    calls = calls.replace("  if (", "  if (resolver.")
    return textwrap.dedent(f"""\
        // Generated by rewriter (--deploy): exactly the ops the model uses.
        #ifndef REWRITER_OP_RESOLVER_H_
        #define REWRITER_OP_RESOLVER_H_

        #include "tensorflow/lite/micro/micro_mutable_op_resolver.h"

        constexpr int kNumOps = {len(methods)};
        using ModelOpResolver = tflite::MicroMutableOpResolver<kNumOps>;

        inline TfLiteStatus RegisterOps(ModelOpResolver& resolver) {{
        """) + calls + "\n  return kTfLiteOk;\n}\n\n#endif  // REWRITER_OP_RESOLVER_H_\n"


def arena_header(package: Package) -> str:
    return textwrap.dedent(f"""\
        // Generated by rewriter (--deploy).
        // Arena: {package.arena_bytes} bytes ({package.arena_source})
        // + {ARENA_MARGIN} bytes margin.
        #ifndef REWRITER_ARENA_H_
        #define REWRITER_ARENA_H_

        constexpr int kTensorArenaNeeded = {package.arena_bytes};
        constexpr int kTensorArenaSize = {package.arena_size};

        #endif  // REWRITER_ARENA_H_
        """)


README = """\
# TFLite Micro package

Generated by `rewrite ... --deploy` from `{model}` ({bytes} bytes).

| file | holds |
|---|---|
| `model_data.cc`, `model_data.h` | the model as `g_model[]` ({align}-byte aligned), `g_model_len` |
| `op_resolver.h` | `RegisterOps(resolver)`: {n} ops ({ops}) |
| `arena.h` | `kTensorArenaSize` = {arena} bytes: {measured} ({source}) + {margin} margin |

```cpp
#include "tensorflow/lite/micro/micro_interpreter.h"
#include "model_data.h"
#include "op_resolver.h"
#include "arena.h"

alignas(16) static uint8_t tensor_arena[kTensorArenaSize];

TfLiteStatus Setup(tflite::MicroInterpreter** out) {{
  static ModelOpResolver resolver;
  if (RegisterOps(resolver) != kTfLiteOk) return kTfLiteError;
  static tflite::MicroInterpreter interpreter(tflite::GetModel(g_model), resolver,
                                              tensor_arena, kTensorArenaSize);
  if (interpreter.AllocateTensors() != kTfLiteOk) return kTfLiteError;
  *out = &interpreter;  // then: fill interpreter.input(0), Invoke(), read output(0)
  return kTfLiteOk;
}}
```

Compile `model_data.cc` with the application; link TFLite Micro{ethosu}. TFLite Micro's
library for a Cortex-M part, from a tflite-micro checkout:

```sh
make -f tensorflow/lite/micro/tools/make/Makefile TARGET=cortex_m_generic \\
     TARGET_ARCH={arch} OPTIMIZED_KERNEL_DIR=cmsis_nn{coproc} microlite
```
"""


def write_package(pkg: Package, outdir: Path) -> Package:
    """Write ``outdir/deploy/`` for the measured ``pkg``; returns it with its path set."""
    from rewriter.host.fs import atomic_write_text

    model_file, arena_bytes, arena_source = pkg.model_file, pkg.arena_bytes, pkg.arena_source
    data = Path(model_file).read_bytes()
    methods = pkg.ops
    pkg.path = outdir / "deploy"
    pkg.path.mkdir(parents=True, exist_ok=True)
    cc, h = c_array(data)
    ethosu = (" and the Ethos-U driver (`AddEthosU()` registers its kernel)"
              if ETHOSU_METHOD in methods else "")
    files = {"model_data.cc": cc, "model_data.h": h, "op_resolver.h": resolver_header(methods),
             "arena.h": arena_header(pkg),
             "README.md": README.format(model=Path(model_file).name, bytes=len(data),
                                        align=ALIGN, n=len(methods), ops=", ".join(methods),
                                        arena=pkg.arena_size, measured=arena_bytes,
                                        source=arena_source, margin=ARENA_MARGIN,
                                        ethosu=ethosu,
                                        arch="cortex-m55" if ethosu else "cortex-m4",
                                        coproc=" CO_PROCESSOR=ethos_u" if ethosu else "")}
    for name, text in files.items():
        atomic_write_text(pkg.path / name, text)
    return pkg


def measure(target_name: str, artifact: Path, vela: Any) -> Package:
    """The memory figures of a finished job's file: the artifact (tflm) or Vela's (ethos-u*)."""
    if target_name.startswith("ethos-u"):
        if vela is None or not vela.output_tflite:
            raise UserError("--deploy/--sram/--flash for Ethos-U measure the Vela-compiled file, "
                            "and Vela did not run (drop --no-vela)")
        sram = vela.csv.get("sram_memory_used")
        if sram in (None, ""):
            raise UserError("Vela's summary states no sram_memory_used: no arena figure")
        used = {k: vela.csv.get(k) or None for k in ("system_config", "memory_mode",
                                                     "weights_storage_area")}
        settings = vela.settings.to_json() if vela.settings is not None else {}
        pkg = _package(vela.output_tflite, int(round(float(sram) * 1024)),
                       f"Vela's summary: sram_memory_used {float(sram):g} KiB (system config "
                       f"{used['system_config']}, memory mode {used['memory_mode']}, optimise "
                       f"{settings.get('optimise') or 'Performance'}); not measured in TFLite "
                       "Micro: the host interpreter has no Ethos-U kernel")
        pkg.vela = {"summary": {f"{k}_{unit}": _float(vela.csv.get(k))
                                for k, unit in VELA_MEMORY.items()},
                    "used": used, "settings": settings, "command": " ".join(vela.command)}
        return pkg
    from rewriter.verify.tflm import smallest_arena

    return _package(artifact, smallest_arena(artifact),
                    "smallest arena TFLite Micro's interpreter allocates and runs the file in, "
                    "bisected on a 64-bit host")


#: Vela's summary CSV memory columns recorded in ``memory.vela``, with Vela's units.
VELA_MEMORY = {"sram_memory_used": "kib", "on_chip_flash_memory_used": "kib",
               "off_chip_flash_memory_used": "kib", "total_original_weights": "bytes",
               "total_npu_encoded_weights": "bytes"}


def _float(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _package(model_file: str | Path, arena_bytes: int, source: str) -> Package:
    return Package(str(model_file), Path(model_file).stat().st_size,
                   resolver_methods(model_file), arena_bytes, source)
