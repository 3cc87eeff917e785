"""Regenerate the evidence the README quotes: every benchmark, one command, stamped files.

    PYTHONPATH=. python benchmarks/regenerate.py [--quick] [--only NAME,...] [--nice 10]
    PYTHONPATH=. python benchmarks/regenerate.py --check     # stamps and staleness only
    PYTHONPATH=. python benchmarks/regenerate.py --list      # the plan, with durations

Runs, one at a time, each benchmark of :data:`PLAN` with the exact command it lists (``--quick``:
the entries marked quick, about 30 minutes on 2 idle cores), then stamps every results file
it wrote with this checkout's commit, date, machine, tool versions and that command
(``benchmarks/stamp.py``; the scripts that stamp their files themselves are stamped again
with the same header). ``--check`` lists every results file of the plan with its commit and
whether it is stale: the code it describes (``rewriter``, ``op_tables``, its script) changed
since that commit; exit 1 if any is stale or unstamped. After a run it
rewrites README.md's stale marks (``benchmarks/figures.py --mark``: a passage quoting a stale
file says "measured at COMMIT, stale: code changed since"; the regenerated files lose theirs).
Then ``python -m pytest tests/test_readme_figures.py`` checks the README's figures against the files
(``benchmarks/figures.py``; with ``REWRITER_FIGURES_STRICT=1`` it also fails on stale files).
Exit 0 when every benchmark ran and exited 0, 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks import stamp  # noqa: E402

R = "benchmarks/results/"


@dataclass(frozen=True)
class Bench:
    name: str
    args: tuple[str, ...]      # benchmarks/SCRIPT and its arguments
    files: tuple[str, ...]     # the results files it writes (from the repository root)
    minutes: int               # wall time on 2 shared cores
    quick: bool = False
    measured: bool = False     # minutes measured by a run of this plan (else an estimate)

    @property
    def script(self) -> str:
        return Path(self.args[0]).name

    @property
    def command(self) -> str:
        return "PYTHONPATH=. python " + " ".join(self.args)


# What the README quotes. Durations: estimates from the runs the results files record (the sum
# of the per-job ``seconds`` in their .json plus start-up, where they record it), except where
# ``measured`` (a run of this plan on the shared 2-core machines, loaded by other work).
# ``quick``: every README passage's file that is cheap to regenerate (about 30 minutes in all);
# the rest (zoo, activation matrix, real models, memory, speed, slow suite) is the full run's.
PLAN = [
    Bench("readme_example", ("benchmarks/readme_example.py",),
          (R + "readme_example.md", R + "readme_example.json"), 2, quick=True, measured=True),
    Bench("lstm_fused_support", ("benchmarks/lstm_fused_support.py",),
          (R + "lstm_fused_support.md", R + "lstm_fused_support.json"), 2, quick=True),
    Bench("audio_int8_range", ("benchmarks/audio_int8_range.py",),
          (R + "audio_int8_range.md",), 2, quick=True),
    # 8 jobs, 196 s of job time in audio_16x8.json, plus training and TF start-up; since
    # s11-audio one more (--accuracy 0.99 on ethos-u55-128, ~25 s) and two files on 8 clip sets.
    Bench("audio_16x8", ("benchmarks/audio_16x8.py",),
          (R + "audio_16x8.md", R + "audio_16x8.json"), 6, quick=True),
    # 3 models x 2 targets, the job itself per row: 3461 s at 26c85ee beside other work
    # (ResNet50's jobs 805 s and 1107 s, MobileNetV3Large's 186 s and 249 s).
    Bench("mixed_precision", ("benchmarks/mixed_precision.py",),
          (R + "mixed_precision.md", R + "mixed_precision.json"), 58, measured=True),
    # Basic Pitch --accuracy 0.99 on tflm, ethos-u55-128, onnx with 32 --data clips: the tflm
    # job with --recover: 540 s in all at 26c85ee (the tflm job 404 s), beside other work.
    Bench("basic_pitch_accuracy", ("benchmarks/basic_pitch_accuracy.py",),
          (R + "basic_pitch_accuracy.md", R + "basic_pitch_accuracy.json"), 9, measured=True),
    # MobileNetV2 64x64 (4 files in LiteRT), the audio model's 2 jobs, Basic Pitch's onnx job:
    # 631 s measured at 80cd224 beside other work.
    Bench("precision_bounds", ("benchmarks/precision_bounds.py",),
          (R + "precision_bounds.md", R + "precision_bounds.json"), 12),
    # Not quick: no README passage quotes it (op_tables' [int16] sections cite it), and its
    # result moves with the converter / TFLite Micro / Vela versions rather than our code.
    Bench("int16_kernels", ("benchmarks/int16_kernels.py",),
          (R + "int16_kernels.md", R + "int16_kernels.json"), 13),
    Bench("families_transformer", ("benchmarks/families_transformer.py",),
          (R + "families_transformer.md",), 5, quick=True),
    Bench("model_families_audio", ("benchmarks/model_families.py", "--models", "audio", "--out",
                                   R + "model_families_audio"),
          (R + "model_families_audio.md", R + "model_families_audio.json"), 2, quick=True),
    Bench("model_families_basic_pitch",
          ("benchmarks/model_families.py", "--models", "basic_pitch", "--out",
           R + "model_families_basic_pitch"),
          (R + "model_families_basic_pitch.md", R + "model_families_basic_pitch.json"), 6,
          quick=True),  # its json: 249 s of job time, plus building the model
    Bench("model_families_basic_pitch_edgetpu",
          ("benchmarks/model_families.py", "--models", "basic_pitch", "--targets", "edgetpu",
           "--out", R + "model_families_basic_pitch_edgetpu"),
          (R + "model_families_basic_pitch_edgetpu.md",
           R + "model_families_basic_pitch_edgetpu.json"), 30),
    Bench("model_families_basic_pitch_tflm",
          ("benchmarks/model_families.py", "--models", "basic_pitch", "--targets", "tflm",
           "--out", R + "model_families_basic_pitch_tflm"),
          (R + "model_families_basic_pitch_tflm.md",
           R + "model_families_basic_pitch_tflm.json"), 30),
    Bench("model_families_basic_pitch_onnx",
          ("benchmarks/model_families.py", "--models", "basic_pitch", "--targets", "onnx",
           "--out", R + "model_families_basic_pitch_onnx"),
          (R + "model_families_basic_pitch_onnx.md",
           R + "model_families_basic_pitch_onnx.json"), 4, measured=True),
    Bench("model_families", ("benchmarks/model_families.py", "--models",
                             "detector,detector_tfkeras,detector_nms"),
          (R + "model_families.md", R + "model_families.json"), 8, quick=True),  # json: 390 s of jobs
    Bench("model_families_recurrent",
          ("benchmarks/model_families.py", "--models", "recurrent", "--slow", "--out",
           R + "model_families_recurrent"),
          (R + "model_families_recurrent.md", R + "model_families_recurrent.json"), 30),
    # 144 jobs: 957 s of job time in activation_matrix.json, plus building each network and
    # running its int8 file in TFLite Micro.
    Bench("activation_matrix", ("benchmarks/activation_matrix.py",),
          (R + "activation_matrix.md", R + "activation_matrix.json"), 30),
    Bench("prequant_int8", ("benchmarks/prequant_int8.py", "--size", "128", "--models",
                            "MobileNetV2,MobileNetV3Small,EfficientNetB0"),
          (R + "prequant_int8.md", R + "prequant_int8.json"), 15),
    Bench("convnext64_edgetpu", ("benchmarks/real_models.py", "--realistic", "--size", "64",
                                 "--models", "ConvNeXtTiny", "--targets", "edgetpu", "--name",
                                 "convnext64_edgetpu"),
          (R + "convnext64_edgetpu.md", R + "convnext64_edgetpu.json"), 5),
    Bench("real_models", ("benchmarks/real_models.py", "--realistic", "--size", "224",
                          "--targets", "edgetpu,ethos-u55-128,tflm,onnx,gpu"),
          (R + "real_models.md", R + "real_models.json"), 20),
    Bench("real_models_edgetpu", ("benchmarks/real_models.py", "--realistic", "--size", "224",
                                  "--targets", "edgetpu", "--name", "real_models_edgetpu"),
          (R + "real_models_edgetpu.md", R + "real_models_edgetpu.json"), 10),
    Bench("stage_memory", ("benchmarks/stage_memory.py", "--out", R + "stage_memory", "--",
                           "/tmp/rewriter_mem96/models/ConvNeXtTiny/model.keras", "--target",
                           "tflm", "--calibration",
                           "/tmp/rewriter_mem96/models/ConvNeXtTiny/calibration.npy", "--data",
                           "/tmp/rewriter_mem96/models/ConvNeXtTiny/data.npy", "-o",
                           "/tmp/rewriter_mem96/stage_out"),
          (R + "stage_memory.md", R + "stage_memory.json"), 3),
    Bench("memory_ratio", ("benchmarks/memory_ratio.py", "--models", "ConvNeXtTiny,ResNet50",
                           "--targets", "edgetpu,tflm", "--size", "96", "--workdir",
                           "/tmp/rewriter_mem96", "--out", R + "memory_ratio"),
          (R + "memory_ratio.md", R + "memory_ratio.json"), 20),
    Bench("memory_ratio_224", ("benchmarks/memory_ratio.py", "--models", "ResNet50", "--targets",
                               "edgetpu,onnx", "--size", "224", "--workdir",
                               "/tmp/rewriter_mem224", "--out", R + "memory_ratio_224"),
          (R + "memory_ratio_224.md", R + "memory_ratio_224.json"), 15),
    Bench("speed", ("benchmarks/speed.py", "--workdir", "/tmp/rewriter_speed"),
          (R + "speed.md", R + "speed.json"), 240),
    Bench("speed_onnx2tf", ("benchmarks/speed.py", "--workdir", "/tmp/rewriter_speed", "--models",
                            "grouped_conv_stack,fer_emotion,transformer", "--onnx2tf",
                            "/work/venv-onnx2tf/bin/onnx2tf", "--out", R + "speed_onnx2tf"),
          (R + "speed_onnx2tf.md", R + "speed_onnx2tf.json"), 20),
    # Cold. With the baseline cache warm (benchmarks/baseline_cache.py: an earlier run with the
    # same models and tool versions, at any commit) about 35: in the whole-zoo run at abacb5d,
    # 1573 s of its 3546 s were the plain converter's, tf2onnx's and onnx2tf's conversions.
    Bench("zoo", ("benchmarks/zoo.py", "--full", "--size", "96", "--workdir", "/tmp/zoo_regen"),
          ("benchmarks/RESULTS.md", R + "zoo.json"), 60),
    # pytest -m slow, 295 tests (was 450) since the cuts of issue 24 (tests/test_results_claims.py checks
    # the activation matrix, the 224x224 real architectures and the prequant table on the files
    # above instead of rerunning them: about 35 min less). The 79 tests recorded at 4c4c510 took
    # 940 s; the rest, not yet recorded, estimated from the benchmarks' per-job times: 162
    # check/run agreements (~24 min), the recurrent/grouped-conv matrix (29, ~30 min), fuzz
    # (15 x 20 mutants, ~10 min), rules on real architectures (9, ~5 min), the rest ~10 min.
    Bench("slow_suite", ("benchmarks/slow_suite.py", "--resume"),
          (R + "slow_suite.md", R + "slow_suite.json"), 110),
]
# stage_memory reads the models memory_ratio builds: run memory_ratio first.
ORDER = ["memory_ratio"]


def _written_since(path: Path, start: float) -> bool:
    """``path`` exists and was written at or after ``start`` (a run's own output)."""
    return path.exists() and path.stat().st_mtime >= start - 1


def _files_stamp(bench: Bench) -> None:
    files = [ROOT / f for f in bench.files]
    commit = stamp.header(bench.command, bench.script)["commit"]
    # The scripts that stamp their own files (same commit) keep their format and stamp.
    own = [f for f in files if f.suffix in (".md", ".json")
           and (stamp.read(f) or {}).get("commit") != commit]
    head = stamp.stamp_files(own, bench.script, command=bench.command)
    for f in files:  # files whose format holds no stamp keep a sidecar
        if stamp.read(f) is None and stamp.read(f.with_suffix(".md")) is None:
            f.with_suffix(".stamp.json").write_text(
                __import__("json").dumps(head, indent=1) + "\n")


def check(plan: list[Bench]) -> int:
    bad = 0
    for bench in plan:
        for name in bench.files:
            head = stamp.stamp_of(ROOT / name)
            why = stamp.stale(head, bench.script) if (ROOT / name).exists() else "missing"
            commit = (head or {}).get("commit") or "-"
            print(f"{name}: {commit[:7]} {(head or {}).get('date', '')}: "
                  + (f"STALE ({why})" if why else "current"))
            bad += bool(why)
    from benchmarks import figures

    for figure, test in figures.unrecorded():
        print(f"README figure {figure}: no results file (from {test or 'nowhere'}; an open item)")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the quick subset (~30 min)")
    ap.add_argument("--only", help="comma-separated names of the plan")
    ap.add_argument("--nice", type=int, default=10, help="run the benchmarks at this niceness")
    ap.add_argument("--check", action="store_true", help="only list stamps and staleness")
    ap.add_argument("--list", action="store_true", help="only print the plan")
    args = ap.parse_args(argv)
    plan = [b for b in PLAN if not args.quick or b.quick]
    if args.only:
        names = args.only.split(",")
        unknown = set(names) - {b.name for b in PLAN}
        if unknown:
            print(f"error: no benchmark {sorted(unknown)} in the plan; see --list", file=sys.stderr)
            return 2
        plan = [b for b in PLAN if b.name in names]
    plan.sort(key=lambda b: (b.name not in ORDER, b.name == "slow_suite"))
    if args.list:
        for b in plan:
            print(f"{b.name:<28} {'' if b.measured else '~'}{b.minutes:>4} min "
                  f"{'quick' if b.quick else '     '} {b.command}")
        print(f"total about {sum(b.minutes for b in plan)} min")
        return 0
    if args.check:
        return check(plan)
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    failed = []
    for bench in plan:
        print(f"== {bench.name}: {bench.command}", flush=True)
        start = time.time()
        code = subprocess.call(["nice", "-n", str(args.nice), sys.executable, *bench.args],
                               cwd=ROOT, env=env)
        print(f"== {bench.name}: exit {code}, {time.time() - start:.0f} s", flush=True)
        if code != 0:
            failed.append(bench.name)
        if code == 0 and all(_written_since(ROOT / f, start) for f in bench.files):
            _files_stamp(bench)
        elif any((ROOT / f).exists() for f in bench.files):  # never stamp what it did not write
            print(f"== {bench.name}: its files were not all written by this run: not stamped",
                  flush=True)
    check(plan)
    from benchmarks import figures

    print(f"README.md: {figures.mark()} passages' stale marks rewritten "
          "(update the figures of the regenerated passages to their new files)")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
