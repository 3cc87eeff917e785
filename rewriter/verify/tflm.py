"""Run a ``.tflite`` in TFLite Micro's Python interpreter (``tflite_micro``), in a subprocess.

TFLite Micro aborts the process on some models (an unsupported op or a failed allocation can
end in ``abort()``), so the interpreter runs in a child process (:func:`rewriter.host.child.run`:
it dies with the job, and a timeout or an interrupt kills it): ``python -m
rewriter.verify.tflm MODEL IN.npz OUT.npz``. The parent reads the file's input/output names and
quantisation with LiteRT (TFLite Micro has no names), quantises the feeds, and dequantises the
results; the child only sets tensors by index, invokes, and writes raw outputs. A crash or a
non-zero exit becomes a :class:`~rewriter.verify.runners.RunnerError` with the child's last
stderr lines and the signal, if any.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.host import child
from rewriter.verify.runners import LiteRTRunner, Runner, RunnerError, rename_outputs

#: Seconds a TFLite Micro run may take before it is killed.
TIMEOUT = 300.0
#: Smallest tensor arena given to TFLite Micro (bytes); else 10x the model size.
MIN_ARENA = 4 << 20
#: Largest tensor arena tried (bytes).
MAX_ARENA = 1 << 30
_MISSING_OP_RE = re.compile(r"Didn't find op for builtin opcode '(\w+)'")


#: Why a TFLite Micro run cannot happen, and what to do.
MISSING = ("TFLite Micro's interpreter is not installed: pip install 'rewriter[tflm]' "
           "(the tflite-micro build this tool is tested with)")


def tflm_available() -> bool:
    """True when the ``tflite_micro`` package is importable (checked without importing it)."""
    import importlib.util

    return importlib.util.find_spec("tflite_micro") is not None


class TflmRunner(Runner):
    """A ``.tflite`` run in TFLite Micro; every ``run``/``run_many`` is one subprocess."""

    kind = "tflm"

    def __init__(self, path: str | os.PathLike) -> None:
        if not tflm_available():
            raise RunnerError(MISSING)
        lite = LiteRTRunner(path)  # names and quantisation: TFLM exposes no names
        self.io = lite.io
        super().__init__(os.fspath(path), lite.inputs, lite.outputs)

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._run_encoded([feeds])[0]

    def run_many(self, samples: Sequence[Mapping[str, np.ndarray]]
                 ) -> list[dict[str, np.ndarray]]:
        return self._run_encoded([self.bind_feeds(s) for s in samples])

    def _run_encoded(self, samples: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        arrays = {f"s{k}_i{j}": self.io.encode(j, s[spec.name])
                  for k, s in enumerate(samples) for j, spec in enumerate(self.inputs)}
        raw = run_subprocess(self.path, arrays, len(samples), len(self.inputs),
                             len(self.outputs))
        return [{name: self.io.decode(j, raw[f"s{k}_o{j}"])
                 for j, name in enumerate(self.outputs)} for k in range(len(samples))]


def run_tflm(path: str | os.PathLike, feeds: Mapping[str, np.ndarray],
             output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Run a ``.tflite`` in TFLite Micro (in a subprocess, since it can abort)."""
    return rename_outputs(TflmRunner(path).run(feeds), output_names)


def run_subprocess(model_path: str, arrays: dict[str, np.ndarray], n_samples: int,
                   n_inputs: int, n_outputs: int) -> dict[str, np.ndarray]:
    """Run the worker on encoded inputs; raw outputs keyed ``s{sample}_o{output}``."""
    with tempfile.TemporaryDirectory(prefix="rewriter-tflm-") as tmp:
        src, dst = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(src, **arrays)
        cmd = [sys.executable, "-m", "rewriter.verify.tflm", model_path, str(src), str(dst),
               str(n_samples), str(n_inputs), str(n_outputs)]
        proc = child.run(cmd, timeout=TIMEOUT)
        if proc.timed_out:
            raise RunnerError(f"{model_path}: TFLite Micro did not finish in {TIMEOUT:.0f}s")
        if proc.returncode != 0 or not dst.exists():
            ops = list(dict.fromkeys(_MISSING_OP_RE.findall(proc.stderr)))
            if ops:
                raise RunnerError(f"{model_path}: TFLite Micro has no kernel for op "
                                  f"{', '.join(ops)}", ops=ops)
            raise RunnerError(f"{model_path}: TFLite Micro failed ({_why(proc)})")
        with np.load(dst, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}


def _why(proc: child.Finished) -> str:
    """The signal or exit code, and the child's messages without Python traceback lines."""
    lines = [ln.strip() for ln in proc.stderr.splitlines()
             if ln.strip() and not ln.startswith((" ", "Traceback"))]
    tail = " | ".join(lines[-3:])
    code = proc.returncode
    how = f"killed by {child.signal_name(-code)}" if code < 0 else f"exit {code}"
    return how + (f": {tail}" if tail else "")


def arena_sizes(model_bytes: int) -> list[int]:
    """The tensor arena sizes tried, smallest first: 10x the model (at least :data:`MIN_ARENA`),
    doubled up to :data:`MAX_ARENA`. The arena is a deployment choice (the MCU's RAM), not the
    model's: verification gives the interpreter what it asks for, and the report of a model that
    needs more than the target board has is the deployment's to make."""
    size = max(10 * model_bytes, MIN_ARENA)
    sizes = [size]
    while size < MAX_ARENA:
        size = min(2 * size, MAX_ARENA)
        sizes.append(size)
    return sizes


def _interpreter(runtime: Any, data: bytes) -> Any:
    """An interpreter whose arena holds the model's tensors (TFLite Micro's allocation raises
    ``RuntimeError`` when the arena is too small; the next size is tried)."""
    *smaller, largest = arena_sizes(len(data))
    for size in smaller:
        try:
            return runtime.Interpreter.from_bytes(data, arena_size=size)
        except RuntimeError:
            pass
    return runtime.Interpreter.from_bytes(data, arena_size=largest)


def smallest_arena(path: str | os.PathLike) -> int:
    """The smallest tensor arena (bytes) TFLite Micro's interpreter allocates ``path`` in, found by
    bisection in a child process (each try builds an interpreter: allocation failing raises, so
    the figure is exact to the byte on this host), then confirmed by one inference at that size.
    A :class:`RunnerError` when the file does not load at :data:`MAX_ARENA` or does not run."""
    proc = child.run([sys.executable, "-m", "rewriter.verify.tflm", "--arena", os.fspath(path)],
                     timeout=TIMEOUT)
    if proc.timed_out:
        raise RunnerError(f"{path}: TFLite Micro did not finish in {TIMEOUT:.0f}s")
    if proc.returncode != 0:
        ops = list(dict.fromkeys(_MISSING_OP_RE.findall(proc.stderr)))
        if ops:
            raise RunnerError(f"{path}: TFLite Micro has no kernel for op {', '.join(ops)}",
                              ops=ops)
        raise RunnerError(f"{path}: TFLite Micro failed ({_why(proc)})")
    return int(proc.stdout.split()[-1])


def runs_with_arena(path: str | os.PathLike, size: int) -> bool:
    """True when TFLite Micro allocates ``path`` in a ``size``-byte arena and runs one inference
    (zeros) in it; in a child process, so an abort is a False too."""
    proc = child.run([sys.executable, "-m", "rewriter.verify.tflm", "--try", os.fspath(path),
                      str(size)], timeout=TIMEOUT)
    return proc.returncode == 0 and not proc.timed_out


def _allocates(runtime: Any, data: bytes, size: int) -> Any:
    try:
        return runtime.Interpreter.from_bytes(data, arena_size=size)
    except RuntimeError:
        return None


def _invoke_zeros(interp: Any, data: bytes) -> None:
    """One inference on zeros (every input of subgraph 0, counted from the flatbuffer)."""
    from ai_edge_litert import schema_py_generated as schema

    n_inputs = schema.Model.GetRootAsModel(data, 0).Subgraphs(0).InputsLength()
    for j in range(n_inputs):
        d = interp.get_input_details(j)
        interp.set_input(np.zeros(d["shape"], d["dtype"]), j)
    interp.invoke()


def _arena_worker(argv: Sequence[str]) -> int:
    """Child process: ``--arena MODEL`` prints the smallest arena; ``--try MODEL SIZE`` exits 0
    when the model allocates and runs in SIZE bytes."""
    from tflite_micro import runtime

    data = Path(argv[1]).read_bytes()
    if argv[0] == "--try":
        interp = _allocates(runtime, data, int(argv[2]))
        if interp is None:
            return 1
        _invoke_zeros(interp, data)
        return 0
    hi = next((s for s in arena_sizes(len(data)) if _allocates(runtime, data, s) is not None),
              None)
    if hi is None:
        print(f"the model does not allocate in {MAX_ARENA} bytes", file=sys.stderr)
        return 1
    lo = 0  # lo fails, hi allocates
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _allocates(runtime, data, mid) is not None:
            hi = mid
        else:
            lo = mid
    interp = _allocates(runtime, data, hi)
    _invoke_zeros(interp, data)
    print(hi)
    return 0


def _worker(argv: Sequence[str]) -> int:
    """Child process: run every sample through one TFLite Micro interpreter."""
    model_path, src, dst, n_samples, n_inputs, n_outputs = argv
    from tflite_micro import runtime

    data = Path(model_path).read_bytes()
    interp = _interpreter(runtime, data)
    out: dict[str, np.ndarray] = {}
    with np.load(src, allow_pickle=False) as arrays:
        for k in range(int(n_samples)):
            for j in range(int(n_inputs)):
                interp.set_input(arrays[f"s{k}_i{j}"], j)
            interp.invoke()
            for j in range(int(n_outputs)):
                out[f"s{k}_o{j}"] = np.array(interp.get_output(j))
            interp.reset()
    np.savez(dst, **out)
    return 0


if __name__ == "__main__":
    sys.exit(_arena_worker(sys.argv[1:]) if sys.argv[1] in ("--arena", "--try")
             else _worker(sys.argv[1:]))
