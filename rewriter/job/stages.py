"""The stages of a job, each a function that returns a typed result.

``run`` (:mod:`rewriter.job.pipeline`), ``check``, ``verify`` and the benchmarks compose the same
stages, so a file is exported, judged and run one way everywhere:

* :func:`job_data`: the verification samples and the int8 calibration set, with their
  provenance (:class:`JobData`);
* :func:`export_artifact`: the model as ``model.tflite`` / ``model.onnx`` (:class:`Exported`);
* :func:`check_artifact`: the op table on the exported file, then Vela for Ethos-U targets,
  whose placement decides (:class:`ArtifactVerdict`);
* :func:`run_artifact`: the file run in its runtime and compared with the original's outputs at
  the tolerance policy's thresholds (:class:`ArtifactRun`).

:func:`deploy` is export then check. Stages never print; :class:`Steps` times them and shows
them through the caller's ``progress`` (the CLI passes ``ui.step``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.defaults import (
    CALIBRATION_CAP,
    CALIBRATION_SAMPLES,
    CALIBRATION_SEED,
    DATA_SAMPLES,
    INTEGER_MODES,
    VERIFY_SAMPLES,
    VERIFY_SEED,
)
from rewriter.errors import UserError
from rewriter.export.result import ExportError, ExportResult
from rewriter.ir.model import Model
from rewriter.targets import GraphCheck, Target
from rewriter.targets.vela import VelaResult
from rewriter.verify.data import Data
from rewriter.verify.metrics import Comparison, compare_within, stack_samples
from rewriter.verify.tolerance import DEFAULT_POLICY, TolerancePolicy

Feeds = dict[str, np.ndarray]
Progress = Callable[[str], contextlib.AbstractContextManager[None]]
#: ``bar(description, total)``: a context giving ``advance(steps, text)`` (a progress bar).
Bar = Callable[[str, int], contextlib.AbstractContextManager[Callable[[int, str], None]]]

#: The runtime each artifact kind runs in (the report names it).
RUNTIME_TITLES = {"litert": "LiteRT", "onnxruntime": "ONNX Runtime", "tflm": "TFLite Micro"}


def no_progress(_: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


class Steps:
    """Times named steps (``timings[key]`` in seconds) and shows them through ``progress``."""

    def __init__(self, progress: Progress = no_progress) -> None:
        self.progress = progress
        self.timings: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, key: str, message: str | None = None) -> Iterator[None]:
        shown = self.progress(message) if message else contextlib.nullcontext()
        start = time.perf_counter()
        try:
            with shown:
                yield
        finally:
            self.timings[key] = round(time.perf_counter() - start, 3)


# ----------------------------------------------------------------------------- data
#: Quantisation modes whose converter calibrates activation ranges on samples.
CALIBRATED = INTEGER_MODES


@dataclass
class JobData:
    """The samples a job verifies on and, for int8, the samples it calibrates on, each with its
    provenance (:class:`rewriter.verify.data.Data`), and what the user should know about them
    (synthetic data measures nothing about real data).

    ``basis`` says which data the verdict rests on and ``calibrated`` what calibrated (the
    summary line shows both); ``disjoint`` is False only when the one sample given both
    calibrated and verified; ``cap`` is the most samples calibration takes from the user."""

    verification: Data
    calibration: Data | None
    verification_warning: str | None = None
    calibration_warning: str | None = None
    basis: str = ""
    calibrated: str = ""
    disjoint: bool = True
    cap: int = CALIBRATION_CAP

    @property
    def samples(self) -> list[Feeds]:
        return self.verification.samples

    @property
    def calibration_samples(self) -> list[Feeds] | None:
        return self.calibration.samples if self.calibration is not None else None

    @property
    def warnings(self) -> list[str]:
        out = [w for w in (self.verification_warning, self.calibration_warning) if w]
        for d in (self.verification, self.calibration):
            out.extend(w for w in (d.warnings if d else []) if w not in out)
        return out

    def describe(self) -> str:
        """The summary line's words on the data: the verdict's basis, then the calibration."""
        return "; ".join(t for t in (f"verdict on {self.basis}" if self.basis else "",
                                     self.calibrated) if t)

    def to_json(self) -> dict[str, Any]:
        """``report["data"]``: what the verdict and the calibration rest on."""
        verification = self.verification.to_json() | {"verdict_rests_on": self.basis,
                                                        "disjoint": self.disjoint}
        calibration = (self.calibration.to_json() | {"calibrated_on": self.calibrated,
                                                     "cap": self.cap}
                       if self.calibration else None)
        return {"verification": verification, "calibration": calibration}


def job_data(model: Model, quantize: str, calibration: str | None = None,
             inputs: str | None = None, samples: int | None = None,
             calibration_samples: int | None = None,
             ranges: Mapping[str, tuple[float, float]] | None = None,
             pixels: Any = None, hold_out: bool = False) -> JobData:
    """Verification samples and the calibration set, mapped the way the model expects (its
    input Rescaling/Normalization, or ``pixels``), never overlapping when the user gave data.
    ``samples``: how many are verified on (default: every sample of ``inputs`` given beside a
    calibration set, up to :data:`~rewriter.defaults.DATA_SAMPLES`; else
    :data:`~rewriter.defaults.VERIFY_SAMPLES`):

    * ``calibration`` and ``inputs`` (different files): calibrate on every sample of the
      first (at most ``calibration_samples``, default :data:`~rewriter.defaults.
      CALIBRATION_CAP`), verify on ``samples`` of the second;
    * one set (``calibration``, or ``inputs`` when the mode calibrates (int8) or ``hold_out``
      (``--recover`` fine-tunes on the calibration set), or both naming one file): its last
      quarter (at most ``samples``, at least one) is held back and verified on, the rest
      calibrates; a set of one sample both calibrates and verifies (``disjoint`` False; refused
      for ``hold_out``);
    * no data: seeded synthetic verification samples and, when calibrating, seeded synthetic
      calibration samples (:data:`~rewriter.defaults.CALIBRATION_SAMPLES`)."""
    from rewriter.verify.data import gather
    from rewriter.verify.input_scaling import input_scaling
    from rewriter.verify.through_cut import gather_through_cut

    common = {"ranges": dict(ranges or {}), "pixels": pixels, "scaling": input_scaling(model)}
    given, samples = samples, samples or VERIFY_SAMPLES
    cap = calibration_samples or CALIBRATION_CAP
    calibrates = quantize in CALIBRATED or hold_out
    what = f"{quantize} calibrated" if quantize in CALIBRATED else "fine-tuned"
    if inputs and calibration and Path(inputs).resolve() == Path(calibration).resolve():
        inputs = None  # one set of data, given twice
    verify_warning = cal_warning = None
    cal = None
    if calibration:
        cal = gather_through_cut(calibration, model, samples=cap + samples, **common)
        if cal.nonfinite():
            raise UserError(f"{calibration}: calibration data holds {cal.nonfinite()} NaN/Inf "
                            "value(s); the int8 converter cannot calibrate on them: remove them")
    one = None  # (the one set of data, its flag) to split
    if inputs and (cal is not None or not calibrates):
        want = given or DATA_SAMPLES
        data = gather_through_cut(inputs, model, samples=want + 1, **common)
        more, data = len(data.samples) > want, data.head(want)
        said = ["not calibrated on"] if cal is not None else []
        if more:
            said.append(f"its first {want}: --samples N for more")
        basis = f"{len(data.samples)} sample(s) of --data" + (f" ({'; '.join(said)})"
                                                              if said else "")
        if cal is not None:
            cal = cal.head(cap)
    elif cal is not None and not calibrates:
        data, cal = cal.head(samples), cal.head(cap)
        basis = f"{len(data.samples)} sample(s) of --calibration (no calibration: {quantize})"
    elif inputs:
        whole = gather_through_cut(inputs, model, samples=cap + samples, **common)
        if whole.nonfinite():  # cannot calibrate on it: verify on it, calibrate synthetic
            data = whole.head(samples)
            basis = f"{len(data.samples)} sample(s) of --data"
        else:
            one = (whole, "--data")
    elif cal is not None:
        one = (cal, "--calibration")
    else:
        data = gather(None, model.inputs, samples=samples, seed=VERIFY_SEED, **common)
        basis = f"{len(data.samples)} SYNTHETIC sample(s)"
        verify_warning = (f"verified on {len(data.samples)} synthetic inputs (seeded; "
                          + "; ".join(f"{k}: {v}" for k, v in data.mapping.items())
                          + "); give --data or --calibration with real data to measure on it")
    disjoint = True
    if one is not None:
        whole, flag = one
        n = len(whole.samples)
        if n < 2:
            if hold_out:
                raise UserError(f"{whole.source}: --recover needs at least 2 calibration "
                                "samples (it holds some back to measure on)")
            data, cal, disjoint = whole, whole, False
            basis = f"the 1 sample of {flag}, which also {what} (too few to hold one back)"
            verify_warning = (f"{flag} holds 1 sample: it both {what} and verified, so the "
                              "verdict says nothing about other inputs; give more samples or "
                              "--data")
        else:
            held = max(1, min(samples, n // 4))
            data, cal = whole.tail(held), whole.head(n - held).head(cap)
            data.notes.insert(0, f"held back from {flag}: its last {held} sample(s) (a "
                                 f"quarter of its {n}, at most --samples {samples}), which "
                                 f"are never {what} on")
            basis = f"{held} sample(s) held back from {flag}"
    if calibrates and cal is None:
        cal = gather(None, model.inputs, samples=CALIBRATION_SAMPLES, seed=CALIBRATION_SEED,
                     **common)
        cal_warning = (f"{what} on synthetic "
                       "inputs: accuracy on real data is unmeasured; give --calibration (.npy, "
                       ".npz or an image directory)")
    calibrated = ""
    if calibrates and cal is not None:
        count = len(cal.samples)
        every = "every one not held back" if one is not None and disjoint else "every one"
        calibrated = (f"{what} on {count} synthetic sample(s)" if cal.synthetic else
                      f"{what} on {count} sample(s) of {cal.source}"
                      + (f" (the cap, --calibration-samples {cap})" if count >= cap else
                         f" ({every}; cap {cap})"))
    through = next((n for d in (data, cal) if d is not None for n in d.notes
                    if n.startswith("data mapped through")), None)
    if through:  # the user's data for the original inputs, mapped to the cut's (--inputs)
        basis += f"; {through}"
    return JobData(data, cal, verify_warning, cal_warning, basis, calibrated, disjoint, cap)


# ----------------------------------------------------------------------------- export
@dataclass
class Exported:
    """The export stage: the file written, or the error that stopped the converter."""

    path: Path
    result: ExportResult | None
    error: ExportError | None = None

    @property
    def ok(self) -> bool:
        return self.result is not None

    def to_json(self) -> dict[str, Any]:
        if self.result is not None:
            return {"ok": True, **self.result.to_json()}
        assert self.error is not None
        return {"ok": False, **self.error.to_json()}


def wants_int8_io(target: Target, requested: bool | None, quantize: str) -> bool:
    """Integer input/output (int8, int16 for 16x8): as requested, else for int8 accelerators
    (Edge TPU, Ethos-U, TFLite Micro), where float I/O would add a QUANTIZE and a DEQUANTIZE
    that run on the CPU; only for integer files."""
    wanted = requested if requested is not None else target.default_quantize == "int8"
    return bool(wanted) and quantize in INTEGER_MODES


def export_artifact(model: Model, target: Target, quantize: str, path: Path,
                    calibration: Sequence[Feeds] | None = None,
                    int8_io: bool | None = None) -> Exported:
    """Export ``model`` for ``target`` to ``path`` (its artifact kind); an
    :class:`~rewriter.export.ExportError` becomes the stage's ``error``."""
    try:
        if target.artifact == "onnx":
            from rewriter.export.onnx import export_onnx

            return Exported(path, export_onnx(model, path, opset=target.opset))
        from rewriter.export.tflite import export_tflite

        model, regrouped = _regrouped(model, target)
        result = export_tflite(model, path, quantize=quantize, calibration=calibration,
                               int8_io=wants_int8_io(target, int8_io, quantize))
        if regrouped:
            result.repairs.insert(0, f"{regrouped} grouped convolution(s) exported grouped, as "
                                  "the plain converter does: the target runs a grouped CONV_2D "
                                  "(the TF graph keeps the split form TF's CPU kernels need)")
        return Exported(path, result)
    except ExportError as exc:
        return Exported(path, None, exc)


def _regrouped(model: Model, target: Target) -> tuple[Model, int]:
    """The model with its split grouped convolutions put back together where the target runs
    grouped ones (exact), and how many were."""
    if not target.grouped_conv:
        return model, 0
    from rewriter.rules.grouped_conv_split import regroup

    keep = [s.name for s in model.outputs]
    graph_def, count = regroup(model.graph_def, keep)
    return (model.with_graph(graph_def) if count else model), count


def export_message(target: Target, quantize: str, path: Path) -> str:
    """What the export stage says while it runs."""
    what = f"opset {target.opset}" if target.artifact == "onnx" else quantize
    return f"exporting {path.name} ({what})"


# ----------------------------------------------------------------------------- artifact check
@dataclass
class ArtifactVerdict:
    """The op table's verdict on the exported file and, for Ethos-U, Vela's placement (which
    overrides the table; ``disagreements`` lists where the two differ)."""

    check: GraphCheck
    vela: VelaResult | None = None
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    estimate: dict[str, Any] | None = None  # rewriter.targets.cost.estimate: NPU + host ms

    @property
    def ok(self) -> bool:
        return bool(self.check.ok)

    def unsupported_ops(self) -> set[str]:
        """The target ops the file holds that the target lacks."""
        return {v.op for v in self.check.verdicts if not v.supported}

    def latency(self) -> dict[str, Any] | None:
        """The file's cost on the target (:func:`rewriter.targets.cost.latency`)."""
        from rewriter.targets.cost import latency

        return latency(self.vela, self.estimate)

    def vela_json(self) -> dict[str, Any] | None:
        if self.vela is None:
            return None
        out = self.vela.to_json() | {"disagreements_with_table": self.disagreements,
                                     "file_ops": self.check.placement()["ops_total"]}
        if self.vela.output_tflite:
            out["output_tflite"] = self.vela.output_tflite
        if self.estimate is not None:
            out["estimate"] = self.estimate
        return out


def check_artifact(target: Target, path: str | Path) -> ArtifactVerdict:
    """The op table on the exported file (for the Edge TPU with its documented cost model:
    :func:`rewriter.targets.cost.edgetpu_estimate`)."""
    check = target.check_artifact(str(path))
    estimate = None
    if target.partitioning == "cut-at-first" and target.artifact == "tflite":
        from rewriter.targets.cost import edgetpu_estimate

        estimate = edgetpu_estimate(path, check)
    return ArtifactVerdict(check, estimate=estimate)


def vela_stage(verdict: ArtifactVerdict, target: Target, path: str | Path,
               outdir: Path | None = None) -> ArtifactVerdict:
    """Compile the file with Vela for the target's accelerator config; its placement becomes
    the verdict. A target without a Vela config is returned unchanged."""
    from rewriter.rules import all_rules
    from rewriter.targets.cost import estimate
    from rewriter.targets.vela import reconcile, run_vela

    if not target.vela_config:
        return verdict
    vela = run_vela(str(path), target.vela_config, outdir, system_config=target.system_config,
                    memory_mode=target.memory_mode, settings=target.vela_settings)
    cost = estimate(vela, path, [r.name for r in all_rules()] + ["grouped_conv_split"])
    return ArtifactVerdict(verdict.check, vela, reconcile(verdict.check, vela), cost)


# ----------------------------------------------------------------------------- deploy
@dataclass
class Deployment:
    """Export, then the verdict on the file (None when the export failed)."""

    exported: Exported
    verdict: ArtifactVerdict | None

    @property
    def ok(self) -> bool:
        return self.verdict is not None and self.verdict.ok

    def unsupported_ops(self) -> set[str]:
        """Ops the target lacks in the file, or the ops that stopped the export."""
        if self.verdict is not None:
            return self.verdict.unsupported_ops()
        return set(self.exported.error.ops if self.exported.error else ())


def deploy(model: Model, target: Target, quantize: str, path: Path, steps: Steps,
           calibration: Sequence[Feeds] | None = None, int8_io: bool | None = None,
           vela: bool = True, vela_outdir: Path | None = None) -> Deployment:
    """Export the model, check the file against the table, and run Vela for Ethos-U."""
    with steps("export", export_message(target, quantize, path)):
        exported = export_artifact(model, target, quantize, path, calibration, int8_io)
    if not exported.ok:
        return Deployment(exported, None)
    return _judge(target, exported, path, steps, vela, vela_outdir,
                  ("check_artifact", "checking the artifact against the table"),
                  ("vela", "compiling with Vela"))


def _judge(target: Target, exported: Exported, path: Path, steps: Steps, vela: bool,
           vela_outdir: Path | None, check: tuple[str, str], compile_: tuple[str, str]
           ) -> Deployment:
    """The exported file at ``path`` against the target's table, then through Vela for
    Ethos-U; ``check`` and ``compile_`` name the two steps (the timings key, the message)."""
    with steps(*check):
        verdict = check_artifact(target, path)
    if vela and target.vela_config:
        with steps(compile_[0], f"{compile_[1]} ({target.vela_config})"):
            verdict = vela_stage(verdict, target, path, vela_outdir)
    return Deployment(exported, verdict)


def rejudge(target: Target, deployment: Deployment, steps: Steps, vela: bool = True,
            vela_outdir: Path | None = None) -> Deployment:
    """The deployment of the file at its path judged again, after its bytes were replaced in
    place (``--accuracy``'s plan over the int8 file): its ops, the table check and Vela describe
    the file delivered, not the one it replaced."""
    import dataclasses

    from rewriter.export.tflite import tflite_ops

    exported, path = deployment.exported, Path(deployment.exported.path)
    result = exported.result
    if result is not None and result.format == "tflite":
        data = path.read_bytes()
        ops, float_ops, io = tflite_ops(data)
        result = dataclasses.replace(result, size=len(data), ops=ops, io=io, float_ops=float_ops)
        exported = dataclasses.replace(exported, result=result)
    return _judge(target, exported, path, steps, vela, vela_outdir,
                  ("check_plan", "checking the delivered plan against the table"),
                  ("vela_plan", "compiling the delivered plan with Vela"))


def promote(candidate: Path, outdir: Path, deployment: Deployment) -> Deployment:
    """Move every file of a deployment delivered into ``candidate`` (a directory inside
    ``outdir``) over ``outdir``'s files of the same names, remove ``candidate``, and return the
    deployment with its paths in ``outdir``: the same bytes, judged once, now where the job's
    artifact lives."""
    import dataclasses
    import os
    import shutil

    for entry in sorted(candidate.iterdir()):
        final = outdir / entry.name
        if final.is_dir() and not final.is_symlink():
            shutil.rmtree(final)
        elif final.exists() or final.is_symlink():
            final.unlink()
        os.replace(entry, final)
    candidate.rmdir()

    def moved(path: str | os.PathLike[str]) -> str:
        rel = Path(path).relative_to(candidate) if Path(path).is_relative_to(candidate) else None
        return os.fspath(path) if rel is None else str(outdir / rel)

    exported = deployment.exported
    result = exported.result
    if result is not None:
        result = dataclasses.replace(result, path=moved(result.path))
    exported = dataclasses.replace(exported, path=Path(moved(exported.path)), result=result)
    verdict = deployment.verdict
    if verdict is not None and verdict.vela is not None and verdict.vela.output_tflite:
        verdict = dataclasses.replace(verdict, vela=dataclasses.replace(
            verdict.vela, output_tflite=moved(verdict.vela.output_tflite)))
    return Deployment(exported, verdict)


# ----------------------------------------------------------------------------- run
def run_samples(runner: Any, samples: Sequence[Mapping[str, np.ndarray]],
                output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Every sample through ``runner``; outputs stacked on a leading axis and, given
    ``output_names``, keyed by them (matched by name, normalised name or order)."""
    from rewriter.verify.runners import rename_outputs

    runs = runner.run_many(samples)
    return stack_samples([rename_outputs(r, output_names) for r in runs])


def artifact_runtime(target: Target) -> str:
    """The runtime the target's artifact is run in: ONNX Runtime (CPU) for ``.onnx``; for
    ``.tflite`` the table's ``runtime`` (TFLite Micro's interpreter for ``tflm``, else LiteRT's
    builtin kernels)."""
    return "onnxruntime" if target.artifact == "onnx" else target.runtime


@dataclass
class ArtifactRun:
    """The exported file run on the job's samples and compared with the original's outputs."""

    runtime: str
    outputs: dict[str, np.ndarray]
    comparison: Comparison
    #: Why the file ran in another runtime than the target's (None: it ran in the target's).
    fallback: str | None = None
    #: What the target's runtime could not run: ``{op, count, reason}`` (an unsupported-op
    #: entry of the report; the op that made TFLite Micro abort, found by bisection).
    not_runnable: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        """The outputs match, in the target's own runtime (a file it cannot run is not OK)."""
        return self.comparison.ok and self.fallback is None

    def to_json(self) -> dict[str, Any]:
        out = self.comparison.to_json() | {"runtime": RUNTIME_TITLES[self.runtime]}
        return out | ({"runtime_fallback": self.fallback} if self.fallback else {})


def _after_path(message: str) -> str:
    """A runner's message without the leading ``PATH: `` (the staging path means nothing)."""
    head, sep, rest = message.partition(": ")
    return rest if sep and ("/" in head or head.endswith(".tflite")) else message


def run_artifact(path: str | Path, runtime: str, quantize: str, model: Model,
                 samples: Sequence[Feeds], reference: Mapping[str, np.ndarray],
                 applied: Sequence[Any] = (),
                 policy: TolerancePolicy = DEFAULT_POLICY,
                 noise_floor: Mapping[str, float] | None = None,
                 response: Any = None) -> ArtifactRun:
    """Run the file in ``runtime`` and compare with ``reference`` at the policy's artifact
    tolerance for ``quantize``, the rule applications ``applied`` the file carries, the
    original's float32 ``noise_floor`` and its measured ``response`` to the applications'
    bounds (:mod:`rewriter.verify.bound_response`; float files).

    A ``.tflite`` that TFLite Micro cannot load because it has no kernel for an op (an op the
    target's table lacks too, so the job fails on it anyway) is run in LiteRT instead, so its
    numbers are still measured and the job ends with its report (exit 1), not exit 2;
    ``fallback`` says why. So is a file TFLite Micro fails to run for another reason (a kernel
    refusing a dtype: Basic Pitch's int8 SQRT), and then the run is not OK whatever the
    numbers."""
    from rewriter.verify.factory import artifact_runner
    from rewriter.verify.runners import RunnerError

    names = [o.name for o in model.outputs]
    fallback = None
    not_runnable = None
    try:
        try:
            runner = artifact_runner(path, "tflm" if runtime == "tflm" else "litert")
            outs = run_samples(runner, samples, names)
        except RunnerError as exc:
            if runtime != "tflm":
                raise
            not_runnable = None if exc.ops else _tflm_culprit(path, _after_path(str(exc)))
            at = (f", from operator #{not_runnable['nodes'][0][1:]} {not_runnable['op']} on"
                  if not_runnable else "")
            fallback = (f"TFLite Micro has no kernel for {', '.join(exc.ops)}, so the file "
                        "does not load there; its numbers were measured in LiteRT" if exc.ops
                        else f"TFLite Micro could not run the file ({_after_path(str(exc))}"
                        f"{at}); its numbers were measured in LiteRT")
            runtime = "litert"
            outs = run_samples(artifact_runner(path, "litert"), samples, names)
    except UserError as exc:
        raise UserError(f"the exported artifact does not run: {exc}") from None
    tolerance = policy.for_artifact(quantize, reference, applied, noise_floor, response)
    return ArtifactRun(runtime, outs, compare_within(reference, outs, tolerance, len(samples)),
                       fallback, not_runnable)


def _tflm_culprit(path: str | Path, why: str) -> dict[str, Any] | None:
    """The unsupported-op entry for the operator TFLite Micro aborts on (None: not one op)."""
    from rewriter.verify.tflm_culprit import failing_operator

    found = failing_operator(path)
    if found is None:
        return None
    index, op = found
    return {"op": op, "count": 1, "fix": None, "nodes": [f"#{index}"],
            "reason": f"{op}: TFLite Micro cannot run the file from this operator on ({why}; "
                      "the first prefix of the file it fails on ends here)"}
