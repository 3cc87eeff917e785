"""A baseline that failed reads as the fact in the speed table (benchmarks/speed.py,
benchmarks/failure.py): the signal or the exception line, never the TF log lines on stderr, and
no ratio against a file that does not exist."""

from __future__ import annotations

import subprocess
import sys

from benchmarks import failure, speed

#: What the plain converter left on stderr when it died on kws (speed.json at 87d2c32).
KWS_STDERR = (
    "56 cudart_stub.cc:31] Could not find cuda drivers on your machine, GPU will not be used.\n"
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    "I0000 00:00:1795698880.294593   30356 cudart_stub.cc:31] Could not find cuda drivers on "
    "your machine, GPU will not be used.\n")


def test_a_child_killed_by_a_signal_is_described_by_the_signal_not_its_log():
    assert failure.describe(-11, KWS_STDERR) == "died with SIGSEGV"
    assert failure.describe(139, KWS_STDERR) == "died with SIGSEGV"  # 128+11 from a shell


def test_an_exit_code_gives_the_exception_line_or_the_code_never_a_log_line():
    err = KWS_STDERR + "Traceback ...\n  File \"x.py\"\nValueError: bad shape (1, 3)\n"
    assert failure.describe(1, err) == "ValueError: bad shape (1, 3)"
    assert failure.describe(3, KWS_STDERR + "error: internal; log kept at /tmp/x\n") == \
        "error: internal; log kept at /tmp/x"
    assert failure.describe(1, KWS_STDERR) == "exit 1"


def test_a_recorded_log_tail_is_cleaned_to_a_reason():
    assert failure.clean(KWS_STDERR) == "failed"
    assert failure.clean("RuntimeError: a | b\nmore") == "RuntimeError: a / b"


def test_a_real_segfaulting_child_reads_died_with_sigsegv():
    code = "import os, signal, sys; sys.stderr.write('I0000 00:00:1 x.cc:31] noise\\n'); " \
           "os.kill(os.getpid(), signal.SIGSEGV)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert speed._result(proc) == {"ok": False, "error": "died with SIGSEGV"}


def _row(plain: dict) -> dict:
    job = {"npu_ops": 492, "cpu_ops": 0, "npu_ms": 0.481, "host_ms": 0.0, "total_ms": 0.481}
    return {"model": "kws", "config": "ethos-u55-128", "system": "Ethos_U55_High_End_Embedded",
            "rules": ["while_unroll"], "plain": plain, "job": job}


def test_the_table_says_the_plain_converter_crashed_and_takes_no_ratio():
    md = speed.render([_row({"ok": False, "error": "died with SIGSEGV"})])
    row = next(ln for ln in md.splitlines() if ln.startswith("| kws"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:10] == ["died with SIGSEGV", "-", "492 / 0", "0.481 + 0.000 = 0.481", "n/a",
                           "n/a", "n/a (no plain file)"]


def test_an_old_log_tail_in_the_results_never_reaches_the_table():
    md = speed.render([_row({"ok": False, "error": KWS_STDERR})])
    assert "cudart" not in md and "WARNING" not in md
    assert len([ln for ln in md.splitlines() if ln.startswith("| kws")]) == 1
